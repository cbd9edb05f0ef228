"""X as a :class:`dask.array.Array` of CSR blocks, a tile or a run of whole tiles each (docs/format.md, decision 14).

Blocks hold whole tiles: one each (``chunks="tiles"``), about a number of cells (an int), or, with
``chunks="auto"`` (the default of ``X.to_dask()``), about dask's ``array.chunk-size`` of decoded CSR
(:func:`auto_row_chunks`), as dask's own ``chunks="auto"`` sizes blocks: an atlas of thousands of small tiles
then makes a few blocks of many tiles, each read by one task with the path of whole tiles
(``Dataset.read_rows`` of a range), rather than a task per tile.

The array is made with :func:`dask.array.map_blocks` and no input array (dask's documented way to make an
array from scratch): each block's task holds a :class:`BlockSource` (the dataset's store, which pickles to
its URL and options, and the reader's settings) and learns its rows from ``block_info``; it never holds
an open file or decoded data. A process running blocks opens the dataset once (one manifest read) and keeps
it for the blocks that follow (:func:`dataset_for`); the process that made the array starts with the
dataset it was made from.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import numpy as np
from scipy import sparse

from deltacells._checks import is_integer
from deltacells.errors import FormatError, InvalidTypeError, InvalidValueError
from deltacells.io._dask_blocks import block_class, register_with_dask
from deltacells.io._read_options import DEFAULT_READ_OPTIONS, ReadOptions

if TYPE_CHECKING:
    from deltacells.core import Dataset, RowSource
    from deltacells.format import Manifest
    from deltacells.storage import BaseStore

__all__ = [
    "BlockSource",
    "Chunks",
    "auto_row_chunks",
    "dask_chunk_bytes",
    "dask_array",
    "dataset_for",
    "parse_chunks",
    "row_chunks",
    "source_of",
    "tiles_per_block",
]

#: Opened datasets a process keeps for the blocks it runs (a worker usually needs one or two).
MAX_OPEN_DATASETS = 8

_CHUNKS_HELP = (
    "None (the lazy X, a TiledCSRDataset), 'auto' (blocks of whole tiles of about dask's array.chunk-size), "
    "'tiles' (one dask block per tile) or a number of cells per block (a positive int, rounded to whole tiles)"
)

#: What ``chunks=`` takes besides ``None``.
Chunks = Literal["auto", "tiles"] | int

#: Bytes of a decoded nonzero's column index (int32) and of a row pointer (int64, as reads fill it).
_INDEX_BYTES, _INDPTR_BYTES = 4, 8


@overload
def parse_chunks(chunks: Any, *, allow_none: Literal[False]) -> Chunks: ...
@overload
def parse_chunks(chunks: Any, *, allow_none: bool = True) -> Chunks | None: ...
def parse_chunks(chunks: Any, *, allow_none: bool = True) -> Chunks | None:
    """Check a ``chunks=`` value: ``None``, ``"auto"``, ``"tiles"`` or a positive int (a number of cells per block).

    Raises
    ------
    InvalidTypeError
        For a value of another type (a float, a bool, a tuple or dict of chunk sizes...).
    InvalidValueError
        For another string, an int below 1, or ``None`` where a dask array is asked for.
    """
    accepted = _CHUNKS_HELP if allow_none else _CHUNKS_HELP.split(", ", 1)[1]
    if chunks is None:
        if allow_none:
            return None
        msg = f"chunks must be {accepted}; None gives no dask array (use the lazy X itself)"
        raise InvalidValueError(msg)
    if isinstance(chunks, str):
        if chunks in ("auto", "tiles"):
            return cast("Literal['auto', 'tiles']", chunks)
        msg = f"chunks must be {accepted}; got the string {chunks!r}"
        raise InvalidValueError(msg)
    if not is_integer(chunks):
        msg = f"chunks must be {accepted}; got {chunks!r} ({type(chunks).__name__})"
        raise InvalidTypeError(msg)
    if chunks < 1:
        msg = f"chunks must be {accepted}; got {int(chunks)} (a block holds at least one tile)"
        raise InvalidValueError(msg)
    return int(chunks)


def row_chunks(manifest: Manifest, chunks: Chunks, dtype: np.dtype | None = None) -> tuple[int, ...]:
    """The cells of each row block, in whole tiles: one tile (``"tiles"``), about ``chunks`` cells, or ``"auto"``.

    An int becomes ``max(1, round(chunks / tile_size))`` tiles per block (the last block may hold fewer);
    ``"auto"`` blocks of about dask's ``array.chunk-size`` of decoded CSR in ``dtype``
    (:func:`auto_row_chunks`). A dataset without cells has one empty block.
    """
    tile_cells = np.asarray(manifest.tile_cells, dtype=np.int64)
    if tile_cells.shape[0] == 0:
        return (0,)
    if chunks == "auto":
        return auto_row_chunks(manifest, np.dtype(np.float32 if dtype is None else dtype))
    per_block = tiles_per_block(manifest, chunks)
    if per_block == 1:
        return tuple(int(n) for n in tile_cells)
    return tuple(int(n) for n in np.add.reduceat(tile_cells, np.arange(0, tile_cells.shape[0], per_block)))


def tiles_per_block(manifest: Manifest, chunks: Literal["tiles"] | int) -> int:
    """Whole tiles in each block: 1 for ``"tiles"``, else ``chunks / tile_size`` rounded (half up), at least 1."""
    if chunks == "tiles":
        return 1
    tile_size = max(1, int(manifest.tile_size))
    return max(1, (int(chunks) + tile_size // 2) // tile_size)


def auto_row_chunks(manifest: Manifest, dtype: np.dtype, target_bytes: int | None = None) -> tuple[int, ...]:
    """Blocks of whole tiles holding about ``target_bytes`` of decoded CSR each: ``chunks="auto"``.

    A tile decodes to ``tile_nnz * (4 + dtype.itemsize) + 8 * tile_cells`` bytes (int32 column indices, the
    values, int64 row pointers). The blocks are as many as ``target_bytes`` (default: dask's
    ``array.chunk-size``, 128 MiB unless configured, as dask's ``chunks="auto"`` takes it) fits in the whole,
    rounded up, and as equal as whole tiles allow: each ends at the tile boundary nearest its share of the
    running total of bytes. A block holds at least one tile.

    Examples
    --------
    >>> from deltacells.format import Manifest
    >>> m = Manifest(12, 5, 2, [2] * 6, [4] * 6, [1] * 6, n_chunks=1, zstd_level=1)  # 6 tiles of 2 cells, 4 nonzeros
    >>> auto_row_chunks(m, np.dtype(np.float32), target_bytes=100)  # 48 bytes a tile, 288 in all: 3 blocks
    (4, 4, 4)
    """
    tile_cells = np.asarray(manifest.tile_cells, dtype=np.int64)
    n_tiles = tile_cells.shape[0]
    if n_tiles == 0:
        return (0,)
    if target_bytes is None:
        target_bytes = dask_chunk_bytes()
    sizes = np.asarray(manifest.tile_nnz, dtype=np.int64) * (_INDEX_BYTES + dtype.itemsize)
    sizes += _INDPTR_BYTES * tile_cells
    ends = np.cumsum(sizes)
    total = int(ends[-1])
    n_blocks = max(1, min(n_tiles, -(-total // max(1, int(target_bytes)))))
    shares = total * np.arange(1, n_blocks, dtype=np.float64) / n_blocks
    cuts = np.unique(np.searchsorted(ends - sizes / 2, shares))  # the boundary nearest each share (tile midpoints)
    bounds = np.concatenate(([0], cuts[(cuts > 0) & (cuts < n_tiles)], [n_tiles]))
    return tuple(int(n) for n in np.add.reduceat(tile_cells, bounds[:-1]))


def dask_chunk_bytes() -> int:
    """The bytes of dask's ``array.chunk-size`` (``dask.config``; 128 MiB by default)."""
    import dask
    from dask.utils import parse_bytes

    return int(parse_bytes(dask.config.get("array.chunk-size")))


@dataclass(frozen=True)
class BlockSource:
    """What a block's task needs to read its rows: small to pickle, never an open file or decoded data.

    Attributes
    ----------
    store
        The dataset's store (it pickles to its URL and options).
    key
        Names the opened dataset in a process's cache: a digest of the store, the manifest and the settings.
    fingerprint
        SHA-256 of the manifest the array was made from; a process that opens another raises.
    gene_order
        ``"original"`` or ``"stored"``, as the reader chose, or ``"joined"`` (a collection's member).
    joined
        A collection's member: the int32 bytes of its map from stored genes to the join's columns, and their
        number (:meth:`~deltacells.Dataset.with_columns`); else None.
    dtype
        dtype of the values.
    sparse_array
        Blocks are ``csr_array`` (else ``csr_matrix``), as ``TiledCSRDataset.to_memory()`` returned; both of
        the classes of :mod:`deltacells.io._dask_blocks`, whose reductions dask can call.
    tile_cache_bytes, threads
        The dataset's tile cache bound and decoding threads. A process that opens the dataset for blocks
        (a worker) keeps no tile cache: a block's tiles are read once per computation.
    read_options
        What ``read_deltacells`` was given that later reads of the AnnData use (``read_obs``'s cache); not
        part of :attr:`key` (it changes no block).
    """

    store: BaseStore
    key: str
    fingerprint: str
    gene_order: str
    joined: tuple[bytes, int] | None
    dtype: np.dtype
    sparse_array: bool
    tile_cache_bytes: int
    threads: int | None
    read_options: ReadOptions = DEFAULT_READ_OPTIONS

    @classmethod
    def of(
        cls, dataset: Dataset, dtype: np.dtype, *, sparse_array: bool, read_options: ReadOptions = DEFAULT_READ_OPTIONS
    ) -> BlockSource:
        """The source of ``dataset``'s blocks, read in ``dtype``."""
        fingerprint = manifest_fingerprint(dataset.manifest)
        joined = dataset.joined_columns()
        joined_bytes = None if joined is None else (joined[0].astype("<i4").tobytes(), joined[1])
        settings = (dataset.gene_order, dataset.cache.max_bytes, dataset.threads, fingerprint)
        digest = hashlib.sha256(pickle.dumps(dataset.store, protocol=4))
        digest.update(repr(settings).encode())
        if joined_bytes is not None:
            digest.update(joined_bytes[0] + str(joined_bytes[1]).encode())
        return cls(
            store=dataset.store,
            key=digest.hexdigest(),
            fingerprint=fingerprint,
            gene_order=dataset.gene_order,
            joined=joined_bytes,
            dtype=np.dtype(dtype),
            sparse_array=bool(sparse_array),
            tile_cache_bytes=int(dataset.cache.max_bytes),
            threads=dataset.threads,
            read_options=read_options,
        )

    def meta(self) -> sparse.csr_matrix | sparse.csr_array:
        """An empty ``(0, 0)`` matrix of the blocks' class and dtype (dask's ``meta``)."""
        return block_class(sparse_array=self.sparse_array)((0, 0), dtype=self.dtype)


def manifest_fingerprint(manifest: Manifest) -> str:
    """SHA-256 of the manifest's text."""
    return hashlib.sha256(manifest.to_json().encode()).hexdigest()


def dask_array(
    dataset: RowSource,
    dtype: np.dtype,
    chunks: Chunks,
    *,
    sparse_array: bool,
    read_options: ReadOptions = DEFAULT_READ_OPTIONS,
) -> Any:
    """``dataset`` as a :class:`dask.array.Array` of CSR blocks of whole tiles (``chunks`` checked here).

    Parameters
    ----------
    dataset
        The open dataset, in the gene order the blocks follow; or a collection: its members' arrays one
        after the other (no block holds cells of two datasets).
    dtype
        dtype of the values.
    chunks
        ``"auto"``, ``"tiles"`` or a number of cells per block (:func:`row_chunks`).
    sparse_array
        Blocks (and ``meta``) are ``csr_array`` rather than ``csr_matrix``.
    read_options
        What the AnnData was read with, kept by each block's source (:attr:`BlockSource.read_options`).
    """
    try:
        import dask.array as da
    except ImportError as exc:
        msg = "X as a dask array (chunks=...) needs dask: pip install 'deltacells[dask]' (or 'dask[array]')"
        raise ImportError(msg) from exc

    chunks = parse_chunks(chunks, allow_none=False)
    from deltacells.core import Collection, Dataset

    if isinstance(dataset, Collection):
        members = [
            dask_array(member, dtype, chunks, sparse_array=sparse_array, read_options=read_options)
            for member in dataset.members
        ]
        return members[0] if len(members) == 1 else da.concatenate(members, axis=0)
    assert isinstance(dataset, Dataset)  # the two kinds of row source
    register_with_dask()
    source = BlockSource.of(dataset, dtype, sparse_array=sparse_array, read_options=read_options)
    rows = row_chunks(dataset.manifest, chunks, source.dtype)
    # The same dataset, settings and blocks give the same name (and so the same keys: dask reads them once).
    blocks = hashlib.sha256(np.asarray(rows, dtype=np.int64).tobytes()).hexdigest()
    token = repr((source.key, source.dtype.str, source.sparse_array, blocks))
    name = "read-deltacells-" + hashlib.sha256(token.encode()).hexdigest()[:32]
    _remember(source.key, dataset)  # blocks run here use the dataset already open
    return da.map_blocks(
        read_block,
        source,
        name=name,
        chunks=(rows, (dataset.n_genes,)),
        dtype=source.dtype,
        meta=source.meta(),
    )


def source_of(array: Any) -> BlockSource | None:
    """The :class:`BlockSource` of the one dataset a dask array reads (made here, or computed from such an array).

    ``None`` for any other array, or one that reads several datasets (or the same one with other settings).
    """
    graph = array.__dask_graph__() if hasattr(array, "__dask_graph__") else None
    sources = {}
    for layer in getattr(graph, "layers", {}).values():
        for value, _ in getattr(layer, "indices", ()):  # a Blockwise layer: (argument, its index or None)
            if isinstance(value, BlockSource):
                sources[value.key] = value
    return next(iter(sources.values())) if len(sources) == 1 else None


def read_block(source: BlockSource, block_info: dict[Any, Any] | None = None) -> sparse.csr_matrix | sparse.csr_array:
    """The rows of one block (``block_info[None]["array-location"]``), read with the fast path of whole tiles."""
    assert block_info is not None, "dask passes block_info to map_blocks functions that take it"
    (start, stop), _ = block_info[None]["array-location"]
    register_with_dask()  # in a worker too: the blocks it stacks keep their class
    dataset = dataset_for(source)
    if stop > start:
        matrix = dataset.read_rows(slice(start, stop), dtype=source.dtype)
    else:
        matrix = sparse.csr_matrix((0, dataset.n_genes), dtype=source.dtype)
    return block_class(sparse_array=source.sparse_array)(matrix)


# ---------------------------------------------------------------------- the datasets open in this process

_lock = threading.Lock()
_open: OrderedDict[str, Dataset] = OrderedDict()


def dataset_for(source: BlockSource) -> Dataset:
    """The dataset ``source`` names, opened once per process (the last :data:`MAX_OPEN_DATASETS` are kept).

    Raises
    ------
    FormatError
        If the dataset's manifest is not the one the array was made from (it was overwritten since).
    """
    with _lock:
        dataset = _open.get(source.key)
        if dataset is not None:
            _open.move_to_end(source.key)
            return dataset
    from deltacells.core import open_dataset

    # No tile cache: a block's tiles are read once per computation, and a worker's memory is the cluster's.
    opened = open_dataset(source.store, tile_cache_bytes=0, threads=source.threads)
    if manifest_fingerprint(opened.manifest) != source.fingerprint:
        msg = (
            f"{source.store.url}/manifest.json is not the one this dask array was made from: the dataset was "
            "overwritten since; read it again with read_deltacells"
        )
        raise FormatError(msg)
    if source.joined is not None:
        columns, n_columns = source.joined
        return _remember(source.key, opened.with_columns(np.frombuffer(columns, dtype="<i4"), n_columns))
    return _remember(source.key, opened.with_gene_order(source.gene_order))


def _remember(key: str, dataset: Dataset) -> Dataset:
    """Keep ``dataset`` under ``key`` (or the one already kept), dropping the least recently used beyond the bound."""
    with _lock:
        dataset = _open.setdefault(key, dataset)
        _open.move_to_end(key)
        while len(_open) > MAX_OPEN_DATASETS:
            _open.popitem(last=False)
    return dataset


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a parent's thread may have held it at the fork
    _open.clear()  # the parent's datasets hold its locks and threads: open afresh


os.register_at_fork(after_in_child=_after_fork_in_child)
