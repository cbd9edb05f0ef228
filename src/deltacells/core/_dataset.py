"""An open dataset: its manifest, and any set of its cells read as CSR, decoding only the tiles (and chunks) needed."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from scipy import sparse

from deltacells._checks import check_choice
from deltacells._kernel_loading import prepare_kernels
from deltacells._memory import empty, populate
from deltacells._threads import shared_pool
from deltacells.codec import read_only
from deltacells.core._dtypes import UNRECORDED_DTYPE, decoded_dtype
from deltacells.core._follow import STALE_ERRORS, follow_append, retried_after_appends
from deltacells.core._indexing import expected_nnz, normalize_rows
from deltacells.core._sidecars import read_gene_order, read_var_names, read_var_table
from deltacells.errors import InvalidValueError, warn
from deltacells.format import Manifest, counts_dtype_of, first_problem_raises
from deltacells.tiles import (
    DEFAULT_TILE_CACHE_BYTES,
    DIRECT_DTYPES,
    TileCache,
    TileReader,
    drop_dropped_columns,
    gather_rows,
    gather_rows_mapped,
    sort_output_rows,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    import pyarrow as pa
    from numpy.typing import DTypeLike

    from deltacells.codec import DecodedTile
    from deltacells.storage import BaseStore

__all__ = ["Dataset"]

T = TypeVar("T")


class Dataset:
    """An open dataset: its manifest, and cells read on demand, tile by tile.

    Cheap to pickle: it pickles to its store (URL and options) and manifest, never
    to decoded data. Use :func:`open_dataset` to create one.
    """

    def __init__(
        self,
        store: BaseStore,
        manifest: Manifest,
        *,
        tile_cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
        threads: int | None = None,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.threads = threads
        #: The dtype of the counts written, as the manifest records it (``None`` when it records none).
        self.recorded_dtype = first_problem_raises(counts_dtype_of(manifest.metadata), store.url)
        self._tiles = TileReader(store, manifest, cache_bytes=tile_cache_bytes, threads=threads)
        prepare_kernels()  # numba's kernels load in the background while the caller gets on
        self._limits = manifest.limits
        self._starts = manifest.starts
        self._warned_precision = False
        self._columns: np.ndarray | None = None  # stored column j -> output column (the kernels' map)
        self._n_columns = manifest.n_genes  # output columns
        self._joined: np.ndarray | None = None  # with_columns's map (-1: left out), or None
        self._gene_order: np.ndarray | None = None  # gene_order.npy, read once (read-only)
        self.gene_order_mode = "stored"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                self.store,
                self.manifest.to_dict(),
                self.cache.max_bytes,
                self.threads,
                self.gene_order_mode,
                None if self._joined is None else (self._joined, self._n_columns),
            ),
        )

    def with_gene_order(self, gene_order: str) -> Dataset:
        """The same dataset with its columns in the source's order (``"original"``) or as stored (``"stored"``).

        The writer sorts genes by decreasing total counts (``gene_order.npy``). With ``"original"``, every
        read maps the stored column numbers back through it while copying rows (one gather per nonzero),
        so that column ``j`` is column ``j`` of the matrix that was written. Datasets written without
        reordering are the same either way. The result shares this dataset's tile cache.

        Raises
        ------
        InvalidValueError
            For a ``gene_order`` other than ``"original"`` and ``"stored"``.
        FormatError
            If ``gene_order.npy`` is malformed.
        """
        check_choice("gene_order", gene_order, ("original", "stored"))
        if self._joined is not None:
            msg = "this dataset's columns are a collection's genes (with_columns): its gene order cannot change"
            raise InvalidValueError(msg)
        if gene_order == self.gene_order_mode:
            return self
        order = self.gene_order() if gene_order == "original" else None  # read before sharing the state
        other = object.__new__(Dataset)
        other.__dict__.update(self.__dict__)
        other.gene_order_mode = gene_order
        other._columns = None if order is None else read_only(order)  # a copy of its own, int32 (read-only: one
        # type of argument for the kernels, see deltacells.codec.read_only)
        return other

    def with_columns(self, columns: np.ndarray, n_columns: int) -> Dataset:
        """The same dataset read into another set of genes: stored gene ``g`` becomes column ``columns[g]``.

        What a collection's join needs (:func:`~deltacells.read_deltacells` of several datasets): the
        stored column numbers are mapped while the rows are copied or decoded (as for
        :meth:`with_gene_order`), each row is sorted, and a gene mapped to ``-1`` is left out (an inner
        join's genes this dataset has but others lack: removed from each row in place, after the sort
        that puts them last). Output columns no gene maps to are empty (an outer join's genes this dataset
        lacks). The result shares this dataset's tile cache; its :attr:`n_genes` is ``n_columns``.

        Parameters
        ----------
        columns
            ``int[manifest.n_genes]``: the output column of each stored gene, below ``n_columns`` and unique,
            or -1.
        n_columns
            Columns of the output.

        Raises
        ------
        InvalidValueError
            If ``columns`` has another length, or a column out of range or taken twice.
        """
        n_genes = self.manifest.n_genes
        columns = np.asarray(columns)
        if columns.shape != (n_genes,) or columns.dtype.kind not in "iu":
            msg = f"columns must be {n_genes} integers (one per stored gene), got {columns.dtype} {columns.shape}"
            raise InvalidValueError(msg)
        kept = columns[columns >= 0]
        if n_columns < 0 or (columns < -1).any() or (kept >= n_columns).any() or np.unique(kept).size != kept.size:
            msg = f"columns must be -1 or unique columns below n_columns={n_columns}"
            raise InvalidValueError(msg)
        # The kernels' map: a left-out gene goes to n_columns, sorted last. Its length also bounds the sorts'
        # columns (the radix passes): at least n_columns + 1; the entries past n_genes are never read.
        kernel_map = np.full(max(n_genes, n_columns + 1), n_columns, dtype=np.int32)
        kernel_map[:n_genes] = np.where(columns < 0, n_columns, columns)
        other = object.__new__(Dataset)
        other.__dict__.update(self.__dict__)
        other.gene_order_mode = "joined"
        other._columns = read_only(kernel_map)
        other._n_columns = int(n_columns)
        other._joined = columns.astype(np.int32)
        other._joined.flags.writeable = False
        return other

    def joined_columns(self) -> tuple[np.ndarray, int] | None:
        """The arguments of :meth:`with_columns` that made this dataset (read-only), or None."""
        return None if self._joined is None else (self._joined, self._n_columns)

    @property
    def drops_genes(self) -> bool:
        """Whether some stored genes are left out of the rows read (:meth:`with_columns`)."""
        return self._joined is not None and bool((self._joined < 0).any())

    def __repr__(self) -> str:
        m = self.manifest
        return f"Dataset({self.store.url!r}, n_cells={m.n_cells}, n_genes={m.n_genes}, n_tiles={m.n_tiles})"

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_cells, n_genes)``."""
        return (self.manifest.n_cells, self.n_genes)

    @property
    def n_cells(self) -> int:
        """Number of cells (rows)."""
        return self.manifest.n_cells

    @property
    def n_genes(self) -> int:
        """Number of genes (columns) of the rows read (the stored ones, or those of :meth:`with_columns`)."""
        return self._n_columns

    @property
    def dtype(self) -> np.dtype:
        """The dtype reads give unless asked for another (the counts' as written, float32 if none is recorded).

        docs/format.md, decision 9: the writer records the dtype of the counts it was given in the manifest's
        ``metadata`` (:attr:`recorded_dtype`).
        """
        return UNRECORDED_DTYPE if self.recorded_dtype is None else self.recorded_dtype

    @property
    def n_tiles(self) -> int:
        """Number of tiles."""
        return self.manifest.n_tiles

    @property
    def nnz(self) -> int:
        """Nonzeros stored in the tiles (the manifest's; a read leaving genes out holds fewer)."""
        return self.manifest.nnz

    @property
    def url(self) -> str:
        """Where the dataset is (its store's URL)."""
        return self.store.url

    @property
    def tile_size(self) -> int:
        """Cells per tile (the last may hold fewer)."""
        return self.manifest.tile_size

    @property
    def is_local(self) -> bool:
        """Whether the dataset is on a local disk."""
        return self.store.is_local

    @property
    def tile_starts(self) -> np.ndarray:
        """``int64[n_tiles]``: the first cell of each tile."""
        return np.asarray(self.manifest.starts, dtype=np.int64)

    @property
    def tile_cells(self) -> np.ndarray:
        """``int64[n_tiles]``: the cells of each tile."""
        return np.asarray(self.manifest.tile_cells, dtype=np.int64)

    @property
    def tile_bytes(self) -> np.ndarray:
        """``int64[n_tiles]``: the bytes of each tile."""
        return np.asarray(self.manifest.tile_bytes, dtype=np.int64)

    @property
    def cache(self) -> TileCache:
        """The cache of recently decoded tiles."""
        return self._tiles.cache

    @property
    def tiles_decoded(self) -> int:
        """Tiles read whole and decoded so far, every chunk or only some (cache hits not counted).

        A read of a few cells of a tile decodes only the chunks holding them; a later read needing other
        chunks of that tile decodes those, and counts the tile again. Tiles of remote storage read in
        byte ranges are not counted here (see ``TileReader.tiles_read_ranged``).
        """
        return self._tiles.tiles_decoded

    @property
    def chunks_decoded(self) -> int:
        """Chunks decompressed so far (cache hits not counted).

        Each tile is cut in ``manifest.n_chunks`` chunks (fewer when it has fewer cells) that decode
        independently. Reading whole tiles decodes all their chunks; reading a few cells of a tile decodes
        only the chunks holding them, and the chunks the tile cache already holds are not decoded again.
        """
        return self._tiles.chunks_decoded

    def chunk_starts(self, cache_dir: str | os.PathLike[str] | None = None) -> np.ndarray:
        """The first cell of each chunk of each tile, then ``n_cells``: where the units of decoding start.

        Read from the tiles' headers and chunk tables on the first call (a ranged request of under a
        kilobyte per tile, many in flight), then kept. Chunks hold about equal nonzeros, so their cells
        are not known from the manifest alone. A training loader cuts its blocks there, so that each
        chunk is decoded once per epoch.

        Parameters
        ----------
        cache_dir
            A local directory where they are also kept between processes (under ``chunk-starts/``, one file
            per dataset layout), and read from when they are there: for an atlas on object storage, tens of
            thousands of requests made once instead of by every process. None: not kept.

        Returns
        -------
        numpy.ndarray
            ``int64``, increasing (read-only); every tile's first cell is among them.

        Raises
        ------
        FormatError
            If a tile's header or chunk table breaks a rule of the format or disagrees with the manifest.
        MissingObjectError
            If a tile is not there.
        """
        starts = self.__dict__.get("_chunk_starts")
        if starts is None:
            from deltacells.tiles import kept_chunk_starts, read_chunk_starts

            if cache_dir is None:
                starts = self._surviving_appends(lambda: read_chunk_starts(self._tiles))
            else:
                kept = Path(cache_dir).expanduser().absolute()
                starts = self._surviving_appends(lambda: kept_chunk_starts(self._tiles, kept))
            starts.flags.writeable = False
            self._chunk_starts = starts
        return starts

    def tile_of(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tile and local row of each global cell index (``searchsorted`` on the limits)."""
        cells = np.asarray(cells, dtype=np.int64)
        tiles = np.searchsorted(self._limits, cells, side="right")
        return tiles, cells - self._starts[tiles]

    def tile_range(self, tile: int) -> tuple[int, int]:
        """Global cell range ``[start, stop)`` of ``tile``."""
        return int(self._starts[tile]), int(self._limits[tile])

    # ------------------------------------------------------------------ tiles

    def read_tile(self, tile: int) -> DecodedTile:
        """Tile ``tile`` decoded, in writable arrays of its own (the cache keeps its own copy).

        Raises
        ------
        IndexError
            For a tile number out of range.
        MissingObjectError
            If the tile's object is missing.
        FormatError
            If the tile breaks a rule of the format or disagrees with the manifest.
        """
        return self._surviving_appends(lambda: self._tiles.get(tile)).copy()

    def iter_tiles(
        self, tiles: np.ndarray | list[int] | None = None, *, decode_ahead: int | None = None
    ) -> Iterator[tuple[int, DecodedTile]]:
        """Yield ``(index, tile)`` for ``tiles`` (default: all), decoding a few at once in parallel.

        The tiles' arrays are read-only: they are shared with the cache (``tile.copy()`` gives writable
        ones). At most ``decode_ahead`` decoded tiles (default: twice the threads) are held beyond the cache at
        any time, so a loop over a whole dataset runs in flat memory.
        """
        order = np.arange(self.n_tiles) if tiles is None else np.asarray(tiles, dtype=np.int64)
        held = self._tiles.holds_in_memory(self.n_tiles - 1)
        done = 0
        try:
            for index, tile in self._tiles.iter_tiles(order, decode_ahead=decode_ahead):
                yield index, tile
                done += 1
        except STALE_ERRORS:
            if held or not follow_append(self._tiles, self.manifest):
                raise
            yield from self._tiles.iter_tiles(order[done:], decode_ahead=decode_ahead)

    def _surviving_appends(self, read: Callable[[], T]) -> T:
        """``read()``, tried again if an append since the dataset was opened explains its failure.

        An append rewrites the last tile when it was partial; the reader then keeps its own version of that
        tile in memory and goes on (``deltacells.core._follow``), with the same answers for the cells it knew.
        """
        return retried_after_appends(read, self._tiles, self.manifest)

    # ------------------------------------------------------------------ rows

    def read_rows(self, index: Any = slice(None), *, dtype: DTypeLike | None = None) -> sparse.csr_matrix:
        """Read the cells selected by ``index`` as a CSR matrix, in the requested order.

        Parameters
        ----------
        index
            A slice (any step), an integer, an integer array in any order with repeats
            and negative values, or a boolean mask over all cells.
        dtype
            Dtype of the values (default: :attr:`dtype`, the counts' as written; the counts are exact up to 2^24
            in float32).

        Returns
        -------
        scipy.sparse.csr_matrix
            ``len(rows) x n_genes``.

        Notes
        -----
        Only the tiles holding the rows are read, and of a tile needed for fewer rows than it has cells,
        only the chunks holding them are decoded (:attr:`chunks_decoded`); the tile is still read and
        checked whole (on remote storage it may be read in byte ranges instead). Decoded tiles, whole or
        partial, are kept in the tile cache (:attr:`cache`, scan-resistant: tiles read again are kept
        over those of a scan).

        A range of consecutive cells (a slice of step 1, a full read) is read faster: the tiles it wants
        whole, unless the cache holds them, are decoded straight into the output, in ``dtype``, each
        nonzero written once, and are not cached (a full read leaves the cache as it was). Small tiles (an
        atlas of a few nonzeros a cell) are read, checked and decoded in groups of consecutive ones, a task
        of the decoding threads each, so that such a read costs its nonzeros rather than its tiles.
        """
        return self._surviving_appends(lambda: self._read_rows(index, dtype))

    def _read_rows(self, index: Any, dtype: DTypeLike | None) -> sparse.csr_matrix:
        """:meth:`read_rows`, once."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        if decoded_dtype(dtype) != dtype:  # decoded in one of the decoders' dtypes, then cast
            decoded = self._read_rows(index, decoded_dtype(dtype))
            decoded.data = decoded.data.astype(dtype)
            return decoded
        rows = normalize_rows(index, self.n_cells)
        span = _as_range(rows)
        if span is not None and dtype in DIRECT_DTYPES:
            matrix = self._read_range(*span, dtype)  # waits for the kernels once its output is allocated
            if matrix is not None:
                return matrix
        prepare_kernels(expected_nnz(rows, self.nnz, self.n_cells))
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, dtype=np.int64)
        n_out = rows.shape[0]
        tiles, local = self.tile_of(rows)
        order = np.argsort(tiles, kind="stable")
        sorted_tiles = tiles[order]
        needed, first = np.unique(sorted_tiles, return_index=True)
        bounds = np.append(first, n_out)

        if needed.shape[0] <= self._batch_size():
            return self._gather_direct(needed, order, bounds, local, n_out, dtype)
        increasing = n_out < 2 or bool(np.all(rows[1:] > rows[:-1]))
        if increasing:
            # Rows in tile order, no repeats: the output holds at most what the needed tiles hold.
            # When the request covers most of them, allocate that and fill tile by tile (then trim).
            capacity = int(self.manifest.tile_nnz[needed].sum())
            expected = float(
                (self.manifest.tile_nnz[needed] * np.diff(bounds) / self.manifest.tile_cells[needed]).sum()
            )
            if capacity <= 2 * expected + 1024:
                return self._gather_ascending(needed, order, bounds, local, n_out, dtype, capacity)
        return self._gather_compact(needed, order, bounds, local, n_out, dtype)

    def read_rows_uncached(
        self, index: Any = slice(None), *, dtype: DTypeLike | None = None, sort_columns: bool = True
    ) -> sparse.csr_matrix:
        """Read the cells selected by ``index`` as a CSR matrix, in the requested order, past the tile cache.

        For reads that do not come back to the same tiles soon, as a training loader's windows (runs of
        cells from many tiles, each chunk read once per epoch): each tile holding a wanted cell is read
        once, and each of its chunks holding one decodes straight into one array of the output's dtype
        (genes mapped, and rows sorted, as it decodes); the rows are then copied out in the order asked.
        Nothing decoded is kept, and the tile cache is neither used nor changed.

        Parameters
        ----------
        index
            As for :meth:`read_rows`.
        dtype
            Dtype of the values (default: :attr:`dtype`).
        sort_columns
            In the original gene order (:meth:`with_gene_order`), sort each row's columns (a canonical CSR,
            the default); ``False`` leaves them in stored order (the matrix's ``has_sorted_indices`` is
            then false), which is cheaper when the rows are made dense next.

        Returns
        -------
        scipy.sparse.csr_matrix
            ``len(rows) x n_genes``.
        """
        (matrix,) = self.read_row_batches(index, None, dtype=dtype, sort_columns=sort_columns)
        return matrix

    def read_row_batches(
        self,
        index: Any,
        cuts: Any,
        *,
        dtype: DTypeLike | None = None,
        sort_columns: bool = True,
        threads: int | None = None,
        fetched: Callable[[int], Future[bytes] | None] | None = None,
    ) -> list[sparse.csr_matrix]:
        """:meth:`~deltacells.Dataset.read_rows_uncached`, cut into matrices of their own (a loader's batches).

        Parameters
        ----------
        index
            As for :meth:`read_rows`.
        cuts
            Increasing row numbers from 0 to the number of rows: matrix ``k`` holds rows
            ``cuts[k] .. cuts[k + 1] - 1`` (``None``: one matrix). Each row is written once, into its
            matrix, whose ``indices`` and ``data`` are slices of two arrays shared by all the matrices (one
            allocation, not one per matrix); keeping one matrix keeps
            them all in memory.
        dtype, sort_columns
            As for :meth:`read_rows_uncached`.
        threads
            Threads reading and decoding (default: the dataset's); 1 reads on the calling thread alone, for a
            caller reading several sets of rows at once on threads of its own.
        fetched
            For tiles being fetched whole already (:meth:`submit_tile_fetch`): ``fetched(tile)`` is the fetch
            of ``tile``, or None for a tile to read as usual. Such a tile is checked whole (its CRC-32 too).

        Raises
        ------
        InvalidValueError
            If ``cuts`` do not go from 0 to the number of rows, increasing.
        """
        from deltacells.tiles import read_rows_by_chunk

        rows = normalize_rows(index, self.n_cells)
        prepare_kernels(expected_nnz(rows, self.nnz, self.n_cells))
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, rows.step, dtype=np.int64)
        n = rows.shape[0]
        cuts = np.array([0, n], dtype=np.int64) if cuts is None else np.asarray(cuts, dtype=np.int64)
        if cuts.ndim != 1 or cuts.shape[0] < 2 or cuts[0] != 0 or cuts[-1] != n or np.any(np.diff(cuts) < 0):
            msg = f"cuts must be increasing row numbers from 0 to the number of rows ({n}), got {cuts!r}"
            raise InvalidValueError(msg)
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        decoded = decoded_dtype(dtype)
        sort_columns = sort_columns or self.drops_genes  # the genes left out are found at the end of sorted rows
        given = [fetched]  # the fetches of a first try; a second (after an append) reads the tiles again

        def read() -> tuple[list[sparse.csr_matrix], bool]:
            return read_rows_by_chunk(
                self._tiles, rows, dtype=decoded, columns=self._columns, sort=sort_columns, cuts=cuts,
                threads=threads, fetched=given.pop() if given else None, n_columns=self.n_genes,
            )  # fmt: skip

        matrices, large = self._surviving_appends(read)
        self._warn_if_inexact(large, dtype)
        sorted_rows = self._columns is None or sort_columns
        if self.drops_genes:
            matrices = [self._dropped(matrix) for matrix in matrices]
        for matrix in matrices:
            if decoded != dtype:
                matrix.data = matrix.data.astype(dtype)
            matrix.has_sorted_indices = sorted_rows  # set, not computed (see _csr)
            matrix.has_canonical_format = sorted_rows
        return matrices

    def submit_tile_fetch(self, tile: int) -> Future[bytes]:
        """Start fetching tile ``tile`` whole: one request, many in flight at once (the store's I/O threads).

        For a reader that knows which tiles it will read next (a training loader reading tile groups from
        object storage); pass the fetches to :meth:`read_row_batches` (``fetched``).
        """
        return self._tiles._submit_fetch(tile)

    def _read_range(self, start: int, stop: int, dtype: np.dtype) -> sparse.csr_matrix | None:
        """Cells ``start`` to ``stop`` (excluded): tiles wanted whole and not cached decode into the output.

        The tiles at either end, if only part of them is wanted, and tiles the cache holds whole, are copied
        from their decoded arrays; the others are decoded into their slices of the output, in its dtype,
        with no intermediate arrays (:meth:`TileReader.read_into`), and are not cached. Returns None when the
        output needs 64-bit indices (the general path then reads it).
        """
        plan = self._range_plan(start, stop)
        nnz = int(plan[-1][-1])
        if nnz >= 2**31:  # 64-bit indices (scipy's rule): the general path
            return None
        out_indptr = np.empty(stop - start + 1, dtype=np.int64)
        out_indices, out_data = self._empty_output(nnz, dtype)
        # While the decoding threads map the output's pages, the kernels load (in a fresh process).
        prepare_kernels(nnz)
        self._fill_range(plan, dtype, out_indptr, out_indices, out_data)
        return self._csr(out_data, out_indices, out_indptr, sorted_already=True)

    def range_capacity(self, start: int, stop: int) -> int:
        """The most nonzeros cells ``start`` to ``stop`` (excluded) hold, those of their tiles (the manifest's)."""
        first, last = (int(t) for t in np.searchsorted(self._limits, [start, stop - 1], side="right"))
        return int(self.manifest.tile_nnz[first : last + 1].sum())

    def read_range_into(
        self,
        start: int,
        stop: int,
        dtype: DTypeLike,
        out_indptr: np.ndarray,
        out_indices: np.ndarray,
        out_data: np.ndarray,
    ) -> int:
        """Cells ``start`` to ``stop`` (excluded) written into given arrays (as a range is read); the nonzeros written.

        For a reader that puts several datasets' rows into one output (a collection's full read): no array of
        this dataset's own, no copy after. ``out_indptr`` (``int64``, ``stop - start + 1`` entries) gets the
        row pointers counted from the first nonzero written (``out_indptr[0] == 0``); ``out_indices`` and
        ``out_data`` (int32 and ``dtype``, one of the decoder's own) must hold at least
        :meth:`range_capacity` nonzeros, of which the first returned are written (rows sorted, genes left out
        removed).
        """
        plan = self._range_plan(start, stop)
        nnz = int(plan[-1][-1])
        if out_indices.shape[0] < nnz or out_data.shape[0] < nnz or out_indptr.shape[0] != stop - start + 1:
            msg = f"the output holds {out_indices.shape[0]} nonzeros and {out_indptr.shape[0]} row pointers, not enough"
            raise InvalidValueError(msg)
        out_indices, out_data = out_indices[:nnz], out_data[:nnz]
        try:
            self._fill_range(plan, np.dtype(dtype), out_indptr, out_indices, out_data)
        except STALE_ERRORS:  # an append rewrote the last tile: planned again (the plan holds a read under way)
            held = self._tiles.holds_in_memory(self.n_tiles - 1)
            if held or not follow_append(self._tiles, self.manifest):
                raise
            self._fill_range(self._range_plan(start, stop), np.dtype(dtype), out_indptr, out_indices, out_data)
        return self._finish_rows(out_data, out_indices, out_indptr, sorted_already=True)

    def _range_plan(self, start: int, stop: int) -> tuple[Any, ...]:
        """Which tiles a range reads, how (decoded straight into the output, or copied), and where each goes."""
        first, last = (int(t) for t in np.searchsorted(self._limits, [start, stop - 1], side="right"))
        tiles = np.arange(first, last + 1)
        lo = np.maximum(start, self._starts[tiles]) - self._starts[tiles]
        hi = np.minimum(stop, self._limits[tiles]) - self._starts[tiles]
        whole = (lo == 0) & (hi == self.manifest.tile_cells[tiles])
        direct = np.array([w and not self._tiles.holds_whole(int(t)) for t, w in zip(tiles, whole, strict=True)])
        # The end tiles wanted in part (and tiles cached whole) come through iter_tiles: on remote storage a few
        # cells of a tile are read in byte ranges there, as for any other subset, not as the whole tile.
        pending = np.flatnonzero(~direct)
        rows = [None if whole[k] else np.arange(lo[k], hi[k]) for k in pending]
        decoded = (tile for _, tile in self._tiles.iter_tiles(tiles[pending], rows=rows)) if pending.size else ()
        copied = dict(zip(pending.tolist(), decoded, strict=True))
        counts = np.array(
            [
                int(self.manifest.tile_nnz[t]) if direct[k] else int(copied[k].indptr[hi[k]] - copied[k].indptr[lo[k]])
                for k, t in enumerate(tiles)
            ],
            dtype=np.int64,
        )
        nnz_starts = np.zeros(tiles.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=nnz_starts[1:])
        return tiles, lo, hi, direct, copied, nnz_starts

    def _fill_range(
        self,
        plan: tuple[Any, ...],
        dtype: np.dtype,
        out_indptr: np.ndarray,
        out_indices: np.ndarray,
        out_data: np.ndarray,
    ) -> None:
        tiles, lo, hi, direct, copied, nnz_starts = plan
        row_starts = np.concatenate(([0], np.cumsum(hi - lo)))
        out_indptr[row_starts] = nnz_starts  # each tile's first row (what the copies below start from), and the end
        for k, tile in copied.items():
            self._warn_if_inexact(tile.inexact_in_float32, dtype)
            r, m = int(row_starts[k]), int(hi[k] - lo[k])
            ptr = tile.indptr[lo[k] : hi[k] + 1]
            np.add(ptr[1:], nnz_starts[k] - ptr[0], out=out_indptr[r + 1 : r + 1 + m])
            slots = np.arange(r, r + m, dtype=np.int64)
            rows = np.arange(lo[k], hi[k], dtype=np.int64)
            self._copy_rows(tile.indptr, tile.indices, tile.data, rows, out_indptr, slots, out_indices, out_data)
        if copied and self._columns is not None:  # direct tiles are sorted as they decode
            spans = [(int(row_starts[k]), int(row_starts[k + 1])) for k in copied]
            sort_output_rows(out_indptr, out_indices, out_data, self._columns.shape[0], spans)
        if direct.any():
            starts = (row_starts[:-1][direct], nnz_starts[:-1][direct])
            outputs = (out_indptr, out_indices, out_data)
            large = self._tiles.read_into(tiles[direct], *starts, *outputs, columns=self._columns)
            self._warn_if_inexact(large, dtype)

    def _finish_rows(
        self, out_data: np.ndarray, out_indices: np.ndarray, out_indptr: np.ndarray, *, sorted_already: bool = False
    ) -> int:
        """Sort rows mapped to other columns (unless they are already), remove the genes left out; the nonzeros left."""
        if self._columns is not None and not sorted_already:
            sort_output_rows(out_indptr, out_indices, out_data, self._columns.shape[0])
        if self.drops_genes:
            return int(drop_dropped_columns(out_indptr, out_indices, out_data, self.n_genes))
        return int(out_indices.shape[0])

    def _csr(
        self, out_data: np.ndarray, out_indices: np.ndarray, out_indptr: np.ndarray, *, sorted_already: bool = False
    ) -> sparse.csr_matrix:
        """The output arrays as a CSR matrix; rows mapped to the source's gene order are sorted first if asked."""
        nnz = self._finish_rows(out_data, out_indices, out_indptr, sorted_already=sorted_already)
        out_indices, out_data = out_indices[:nnz], out_data[:nnz]
        index_dtype = out_indices.dtype
        matrix = sparse.csr_matrix(
            (out_data, out_indices, out_indptr.astype(index_dtype, copy=False)),
            shape=(out_indptr.shape[0] - 1, self.n_genes),
            copy=False,
        )
        # Set, not computed (a scan of every row): rows are canonical, mapped ones sorted per row (linear), since
        # scipy sorts unsorted rows before its arithmetic (``multiply``...), on every call.
        matrix.has_sorted_indices = True
        matrix.has_canonical_format = True
        return matrix

    def _gather_direct(
        self, needed: np.ndarray, order: np.ndarray, bounds: np.ndarray, local: np.ndarray, n_out: int, dtype: np.dtype
    ) -> sparse.csr_matrix:
        """Few tiles: decode them all, then copy the rows straight into the output."""
        tiles = [tile for _, tile in self._tiles_for(needed, order, bounds, local)]
        for tile in tiles:
            self._warn_if_inexact(tile.inexact_in_float32, dtype)
        lengths = np.zeros(n_out, dtype=np.int64)
        for k, tile in enumerate(tiles):
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            lengths[slots] = tile.indptr[loc + 1] - tile.indptr[loc]
        out_indptr = _indptr_from_lengths(lengths)
        out_indices, out_data = self._empty_output(int(out_indptr[-1]), dtype)
        for k, tile in enumerate(tiles):
            slots = order[bounds[k] : bounds[k + 1]]
            self._copy_rows(
                tile.indptr, tile.indices, tile.data, local[slots], out_indptr, slots, out_indices, out_data
            )
        return self._csr(out_data, out_indices, out_indptr)

    def _gather_ascending(
        self,
        needed: np.ndarray,
        order: np.ndarray,
        bounds: np.ndarray,
        local: np.ndarray,
        n_out: int,
        dtype: np.dtype,
        capacity: int,
    ) -> sparse.csr_matrix:
        """Rows in ascending order: stream the tiles, appending each one's rows to the output."""
        out_indptr = np.zeros(n_out + 1, dtype=np.int64)
        out_indices, out_data = self._empty_output(capacity, dtype)
        for k, (_, tile) in enumerate(self._tiles_for(needed, order, bounds, local)):
            self._warn_if_inexact(tile.inexact_in_float32, dtype)
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            first = int(slots[0])
            np.cumsum(tile.indptr[loc + 1] - tile.indptr[loc], out=out_indptr[first + 1 : first + 1 + slots.shape[0]])
            out_indptr[first + 1 : first + 1 + slots.shape[0]] += out_indptr[first]
            self._copy_rows(tile.indptr, tile.indices, tile.data, loc, out_indptr, slots, out_indices, out_data)
        nnz = int(out_indptr[-1])
        # Views, not resize(): a large output is on a mapping of its own (deltacells._memory), which numpy cannot
        # resize; the capacity is at most about twice the rows' nonzeros, so scipy keeps the views as they are.
        return self._csr(out_data[:nnz], out_indices[:nnz], out_indptr)

    def _gather_compact(
        self, needed: np.ndarray, order: np.ndarray, bounds: np.ndarray, local: np.ndarray, n_out: int, dtype: np.dtype
    ) -> sparse.csr_matrix:
        """Many tiles, any order: keep only each tile's selected rows, then assemble."""
        lengths = np.zeros(n_out, dtype=np.int64)
        parts = []
        for k, (_, tile) in enumerate(self._tiles_for(needed, order, bounds, local)):
            self._warn_if_inexact(tile.inexact_in_float32, dtype)
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            lengths[slots] = tile.indptr[loc + 1] - tile.indptr[loc]
            parts.append((slots, *_select_rows(tile, loc, dtype)))
        out_indptr = _indptr_from_lengths(lengths)
        out_indices, out_data = self._empty_output(int(out_indptr[-1]), dtype)
        for slots, loc, src_indptr, src_indices, src_data in parts:
            self._copy_rows(src_indptr, src_indices, src_data, loc, out_indptr, slots, out_indices, out_data)
        return self._csr(out_data, out_indices, out_indptr)

    def _empty_output(self, nnz: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """Output arrays (int32 indices unless the nonzeros need 64-bit offsets, scipy's rule), pages mapping.

        The pages of new memory are mapped in bulk by the decoding threads (:func:`deltacells._memory.populate`),
        ahead of the decoding, which then writes them without a fault each.
        """
        index_dtype = np.int32 if nnz < 2**31 else np.int64
        arrays = empty(nnz, index_dtype), empty(nnz, dtype)
        threads = self._tiles.n_threads
        populate(arrays, shared_pool() if threads > 1 else None)
        return arrays

    def _dropped(self, matrix: sparse.csr_matrix) -> sparse.csr_matrix:
        """A matrix read with the genes left out (:meth:`with_columns`) still in its rows, without them."""
        indptr = matrix.indptr.astype(np.int64)
        nnz = drop_dropped_columns(indptr, matrix.indices, matrix.data, self.n_genes)
        # The arrays set as they are (slices of the loader's shared arrays): scipy's constructor would copy them.
        matrix.indptr, matrix.indices, matrix.data = (
            indptr.astype(matrix.indices.dtype, copy=False),
            matrix.indices[:nnz],
            matrix.data[:nnz],
        )
        return matrix

    def _copy_rows(self, *arrays: np.ndarray) -> None:
        """Copy rows into the output (the gather kernels), mapping the columns to the source's order if asked."""
        # The source's arrays are read-only in a cached tile and writable in a fresh one: one type for both.
        arrays = (*(read_only(array) for array in arrays[:3]), *arrays[3:])
        if self._columns is None:
            gather_rows(*arrays)
        else:
            gather_rows_mapped(*arrays, self._columns, False)  # rows are sorted once, in _csr

    def _warn_if_inexact(self, inexact: bool, dtype: np.dtype) -> None:
        """Warn once per dataset when float32 (or narrower) values cannot hold the counts (``inexact``) exactly."""
        if inexact and dtype.kind == "f" and dtype.itemsize <= 4 and not self._warned_precision:
            self._warned_precision = True
            warn(
                f"{self.store.url}: some counts are above 2^24 and are not exact as {dtype}; "
                "read with dtype='int32', 'int64' or 'float64' to keep them exact"
            )

    def _batch_size(self) -> int:
        return self._tiles.decode_ahead

    def _tiles_for(
        self, needed: np.ndarray, order: np.ndarray, bounds: np.ndarray, local: np.ndarray
    ) -> Iterator[tuple[int, DecodedTile]]:
        """The decoded tiles ``needed``, in order.

        A tile needed for fewer rows than it has cells may come partial: only the chunks holding those
        cells decoded (and, on remote storage, maybe only their bytes read). A tile needed for at least as
        many rows as it has cells (a slice over it, a full read) is decoded whole.
        """
        counts = np.diff(bounds)
        whole = counts >= self.manifest.tile_cells[needed]
        wanted = [None if whole[k] else local[order[bounds[k] : bounds[k + 1]]] for k in range(needed.shape[0])]
        if needed.shape[0] == 1:
            t, cells = int(needed[0]), wanted[0]
            if cells is None or not self._tiles.reads_ranged(t, len(cells), cells=cells):
                yield t, self._tiles.get(t, cells=cells)
                return
        yield from self._tiles.iter_tiles(needed, rows=None if whole.all() else wanted)

    # ------------------------------------------------------------------ sidecars

    def gene_order(self) -> np.ndarray | None:
        """``int32[n_genes]``: output column ``j`` was source column ``gene_order[j]`` (None without one).

        Raises
        ------
        FormatError
            If ``gene_order.npy`` is not a little-endian int32 permutation of ``0 .. n_genes - 1``.
        """
        if self._gene_order is None and self.manifest.has_gene_order:
            order = read_gene_order(self.store, self.manifest)
            assert order is not None  # the manifest promises it
            order.flags.writeable = False  # read once, shared by the views of this dataset
            self._gene_order = order
        return None if self._gene_order is None else self._gene_order.copy()

    def var_names(self) -> list[str] | None:
        """Gene names in output column order from ``var_names.txt`` (None without one).

        Raises
        ------
        FormatError
            If ``var_names.txt`` is not UTF-8 text with one line per gene.
        """
        return read_var_names(self.store, self.manifest)

    def var_table(self) -> pa.Table | None:
        """The gene table of ``var.parquet`` in output column order (None without one).

        Raises
        ------
        FormatError
            If ``var.parquet`` is not a readable parquet table with one row per gene.
        """
        return read_var_table(self.store, self.manifest)


def _as_range(rows: np.ndarray | slice) -> tuple[int, int] | None:
    """``(start, stop)`` if ``rows`` are consecutive increasing cells (a slice of step 1, or such an array)."""
    if isinstance(rows, slice):
        return (rows.start, rows.stop) if rows.stop > rows.start else None
    n = rows.shape[0]
    if n == 0 or rows[-1] - rows[0] != n - 1:
        return None
    if n > 1 and not bool(np.all(rows[1:] - rows[:-1] == 1)):
        return None
    return int(rows[0]), int(rows[-1]) + 1


def _indptr_from_lengths(lengths: np.ndarray) -> np.ndarray:
    indptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr


def _select_rows(tile: DecodedTile, rows: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """Rows ``rows`` of ``tile`` as compact CSR arrays ``(rows', indptr, indices, data)``."""
    lengths = tile.indptr[rows + 1] - tile.indptr[rows]
    indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    data = np.empty(int(indptr[-1]), dtype=dtype)
    positions = np.arange(rows.shape[0], dtype=np.int64)
    gather_rows(tile.indptr, tile.indices, tile.data, rows, indptr, positions, indices, data)
    return positions, indptr, indices, data


def _rebuild(
    store: BaseStore,
    manifest: dict[str, Any],
    tile_cache_bytes: int,
    threads: int | None,
    gene_order: str = "stored",
    joined: tuple[np.ndarray, int] | None = None,
) -> Dataset:
    dataset = Dataset(store, Manifest.from_dict(manifest), tile_cache_bytes=tile_cache_bytes, threads=threads)
    return dataset.with_columns(*joined) if joined is not None else dataset.with_gene_order(gene_order)
