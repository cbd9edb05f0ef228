"""Opening a dataset: its manifest read and checked, and the optional files it promises present."""

from __future__ import annotations

import os
from typing import Any

from deltacells._kernel_loading import prepare_kernels
from deltacells.core._commit import reading_store
from deltacells.core._dataset import Dataset
from deltacells.errors import DatasetNotFoundError, MissingObjectError
from deltacells.format import MANIFEST_NAME, Manifest, check_manifest_text, first_problem_raises
from deltacells.storage import BaseStore, open_store
from deltacells.tiles import DEFAULT_TILE_CACHE_BYTES

__all__ = ["dataset_of_manifest", "not_a_dataset", "open_dataset"]


def open_dataset(
    path: str | os.PathLike[str] | BaseStore,
    *,
    storage_options: dict[str, Any] | None = None,
    tile_cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
    threads: int | None = None,
    io_concurrency: int | None = None,
) -> Dataset:
    """Open a deltacells dataset: read and check its manifest (one request), nothing else.

    Parameters
    ----------
    path
        Local directory, fsspec URL (``s3://bucket/prefix``...) or :class:`~deltacells.storage.BaseStore`.
    storage_options
        fsspec options for ``path`` (ignored when ``path`` is a store).
    tile_cache_bytes
        Bound on the memory held by recently decoded tiles (0 disables the cache).
    threads
        Threads decoding tiles; ``None`` means the usable CPUs.
    io_concurrency
        The most requests in flight at once (default: 32 remote, 8 local; ignored when ``path`` is a store).

    Returns
    -------
    Dataset

    Raises
    ------
    DatasetNotFoundError
        If ``path`` has no ``manifest.json`` (no dataset, or an incomplete one).
    FormatError
        If the manifest breaks a rule of the format.
    """
    prepare_kernels()  # numba's kernels load in the background while the manifest is read (and the caller goes on)
    store = open_store(path, storage_options, io_concurrency=io_concurrency)
    try:
        text = store.read(MANIFEST_NAME)
    except (MissingObjectError, NotADirectoryError) as exc:
        raise not_a_dataset(store, exc) from exc
    return dataset_of_manifest(store, text, tile_cache_bytes=tile_cache_bytes, threads=threads)


def not_a_dataset(store: BaseStore, exc: MissingObjectError | NotADirectoryError) -> DatasetNotFoundError:
    """The error of a store whose manifest could not be read (``exc``: no manifest, or a file, not a folder)."""
    if isinstance(exc, NotADirectoryError):
        msg = f"{store.url} is a file, not a deltacells dataset (a directory with a {MANIFEST_NAME})"
    else:
        msg = (
            f"{store.url}: no {MANIFEST_NAME}; this is not a deltacells dataset, or one whose writing did not "
            "finish (the manifest is written last)"
        )
    return DatasetNotFoundError(msg)


def dataset_of_manifest(
    store: BaseStore, text: bytes, *, tile_cache_bytes: int = DEFAULT_TILE_CACHE_BYTES, threads: int | None = None
) -> Dataset:
    """The dataset of ``store`` whose manifest is ``text`` (read already): checked, and opened as ``open_dataset``.

    Raises
    ------
    FormatError
        If the manifest breaks a rule of the format.
    """
    fields = first_problem_raises(check_manifest_text(text), store.url)
    assert fields is not None
    # No listing: on object storage a LIST costs a request per 1,000 objects. An object the manifest
    # promises (a tile, gene_order.npy, an obs shard) and that is missing is reported when it is read;
    # ``deltacells validate`` checks the flags against the listing.
    manifest = Manifest.from_fields(fields)
    # An append killed between its commit and the end of its roll-forward: its objects are read where they are.
    store = reading_store(store, manifest)
    return Dataset(store, manifest, tile_cache_bytes=tile_cache_bytes, threads=threads)
