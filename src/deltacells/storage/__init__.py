"""Where a dataset's objects live: a local directory or a bucket prefix, behind one small interface.

:class:`BaseStore` is the interface (ranged and concurrent reads, atomic writes, listing, deletion,
moves), :class:`FsspecStore` implements it for any fsspec URL, :class:`ObstoreStore` through obstore for
``s3://``, ``gs://`` and ``az://`` buckets (the default there when obstore is installed),
:class:`PrefixStore` is a view of one prefix of another store, ``OverlayStore`` one with a few objects
held in memory in front of it (a reader's copy of what an append rewrote), :class:`StoreFile` is a seekable file made of
ranged reads (for parquet) from anything with ``read`` and ``size`` (:class:`RangeReader`), and
:func:`open_store` turns a path, URL or store into a store;
:func:`zarr_store` opens a location of one as a zarr store (for anndata's elements).
Every store pickles to its URL and options (never an open handle or cached
data), so that dask workers and data-loader processes can each open their own.
"""

from __future__ import annotations

from deltacells.storage._base import BaseStore, ByteRequest, ReadBuffer
from deltacells.storage._durable import fsync_path
from deltacells.storage._faults import RetryPolicy
from deltacells.storage._file import RangeReader, StoreFile
from deltacells.storage._fsspec import FsspecStore
from deltacells.storage._obstore import ObstoreStore
from deltacells.storage._open import STORAGE_CLIENT_VARIABLE, open_store
from deltacells.storage._overlay import OverlayStore
from deltacells.storage._prefix import PrefixStore
from deltacells.storage._zarr import zarr_store

__all__ = [
    "BaseStore",
    "ByteRequest",
    "FsspecStore",
    "ObstoreStore",
    "OverlayStore",
    "PrefixStore",
    "RangeReader",
    "ReadBuffer",
    "RetryPolicy",
    "StoreFile",
    "open_store",
    "STORAGE_CLIENT_VARIABLE",
    "zarr_store",
    # a local file or folder flushed to the device
    "fsync_path",
]
