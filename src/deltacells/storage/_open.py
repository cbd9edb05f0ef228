"""Turning what a user passes (a path, a URL or a store) into a store."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from deltacells.errors import InvalidValueError
from deltacells.storage._base import BaseStore
from deltacells.storage._fsspec import FsspecStore

__all__ = ["open_store"]


def open_store(
    url_or_store: str | os.PathLike[str] | BaseStore,
    storage_options: Mapping[str, Any] | None = None,
    *,
    io_concurrency: int | None = None,
) -> BaseStore:
    """The store for a local path or fsspec URL; a store is returned as is.

    Parameters
    ----------
    url_or_store
        A local path, an fsspec URL (``s3://bucket/prefix``...) or a :class:`BaseStore`.
    storage_options
        fsspec options for a path or URL (credentials, endpoint...).
    io_concurrency
        The most requests in flight at once, for a path or URL (a store keeps its own).

    Returns
    -------
    BaseStore
        ``url_or_store`` itself if it is a store, else an :class:`FsspecStore`.

    Raises
    ------
    ValueError
        If ``storage_options`` are given with a store (they would be ignored).
    """
    if isinstance(url_or_store, BaseStore):
        if storage_options:
            msg = (
                f"storage_options cannot be applied to the already opened {url_or_store!r}; "
                "pass them when creating the store, or pass a URL"
            )
            raise InvalidValueError(msg)
        return url_or_store
    return FsspecStore(url_or_store, storage_options, io_concurrency=io_concurrency)
