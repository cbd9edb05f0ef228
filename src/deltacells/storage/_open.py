"""Turning what a user passes (a path, a URL or a store) into a store: obstore's for buckets, fsspec's otherwise."""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from deltacells.errors import InvalidValueError, UnmappedOptionError
from deltacells.storage._base import BaseStore
from deltacells.storage._fsspec import FsspecStore
from deltacells.storage._obstore import ObstoreStore
from deltacells.storage._obstore_options import OBSTORE_PROTOCOLS

__all__ = ["STORAGE_CLIENT_VARIABLE", "open_store"]

#: The environment variable that chooses the client of ``s3://``, ``gs://`` and ``az://`` URLs: ``obstore``
#: (always: an error if it is not installed or an option does not map), ``fsspec`` (always), or ``auto`` (the
#: default: obstore when it is installed and every option maps, else fsspec).
STORAGE_CLIENT_VARIABLE = "DELTACELLS_STORAGE_CLIENT"

_CLIENTS = ("auto", "obstore", "fsspec")


@functools.cache
def _obstore_installed() -> bool:
    return importlib.util.find_spec("obstore") is not None


def _client() -> str:
    chosen = os.environ.get(STORAGE_CLIENT_VARIABLE, "auto").strip().lower() or "auto"
    if chosen not in _CLIENTS:
        msg = f"{STORAGE_CLIENT_VARIABLE}={chosen!r}: give one of {', '.join(_CLIENTS)}"
        raise InvalidValueError(msg)
    return chosen


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
        ``url_or_store`` itself if it is a store; for an ``s3://``, ``s3a://``, ``gs://``, ``gcs://`` or ``az://``
        URL an :class:`ObstoreStore` when obstore is installed and every storage option maps to its
        configuration; else an :class:`FsspecStore`. The environment variable ``DELTACELLS_STORAGE_CLIENT``
        (``fsspec``, ``obstore``, ``auto``) forces one client.

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
    url = os.fspath(url_or_store)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    client = _client() if scheme in OBSTORE_PROTOCOLS else "fsspec"
    if client == "obstore" and not _obstore_installed():
        msg = f"{STORAGE_CLIENT_VARIABLE}=obstore, but obstore is not installed: pip install obstore"
        raise InvalidValueError(msg)
    if client == "obstore" or (client == "auto" and _obstore_installed()):
        try:
            return ObstoreStore(url, storage_options, io_concurrency=io_concurrency)
        except UnmappedOptionError:
            if client == "obstore":
                raise
    return FsspecStore(url, storage_options, io_concurrency=io_concurrency)
