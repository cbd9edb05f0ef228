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
from deltacells.codec import read_only
from deltacells.core._dtypes import UNRECORDED_DTYPE, decoded_dtype
from deltacells.core._follow import STALE_ERRORS, follow_append, retried_after_appends
from deltacells.core._indexing import expected_nnz, normalize_rows
from deltacells.core._range_reads import RangeReads, as_range
from deltacells.core._row_gathers import RowGathers
from deltacells.core._row_output import RowOutput
from deltacells.core._sidecars import read_gene_order, read_var_names, read_var_table
from deltacells.errors import InvalidValueError
from deltacells.format import Manifest, counts_dtype_of, first_problem_raises
from deltacells.tiles import (
    DEFAULT_TILE_CACHE_BYTES,
    DIRECT_DTYPES,
    TileCache,
    TileReader,
    kept_chunk_starts,
    read_chunk_starts,
    read_rows_by_chunk,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    import pyarrow as pa
    from numpy.typing import DTypeLike

    from deltacells.codec import DecodedTile
    from deltacells.storage import BaseStore, ReadBuffer

__all__ = ["Dataset"]

T = TypeVar("T")


class Dataset:
    """An open dataset: its manifest, and cells read on demand, tile by tile.

    Cheap to pickle: it pickles to its store (URL and options) and manifest, never
    to decoded data. Use :func:`open_dataset` to create one.

    Its reads are carried out by the objects of ``deltacells.core``'s reading modules: the output arrays in the
    columns it reads into (``RowOutput``), ranges of consecutive cells (``RangeReads``) and any other rows
    (``RowGathers``).
    """

    #: The dtype of the counts written, as the manifest records it (``None`` when it records none).
    recorded_dtype: np.dtype | None
    #: The columns of the rows read, as ``read_deltacells(gene_order=)`` names them: ``"stored"``, ``"original"``
    #: (:meth:`with_gene_order`), or ``"joined"`` for a collection's dataset (:meth:`with_columns`).
    gene_order: str

    def __init__(
        self,
        store: BaseStore,
        manifest: Manifest,
        *,
        tile_cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
        threads: int | None = None,
    ) -> None:
        recorded_dtype = first_problem_raises(counts_dtype_of(manifest.metadata), store.url)
        tiles = TileReader(store, manifest, cache_bytes=tile_cache_bytes, threads=threads)
        prepare_kernels()  # numba's kernels load in the background while the caller gets on
        self._assign(
            store=store,
            manifest=manifest,
            threads=threads,
            recorded_dtype=recorded_dtype,
            tiles=tiles,
            limits=manifest.limits,
            starts=manifest.starts,
            gene_permutation=None,
            chunk_starts=None,
            warned_precision=False,
            gene_order="stored",
            columns=None,
            n_columns=manifest.n_genes,
            joined=None,
        )

    def _assign(
        self,
        *,
        store: BaseStore,
        manifest: Manifest,
        threads: int | None,
        recorded_dtype: np.dtype | None,
        tiles: TileReader,
        limits: np.ndarray,
        starts: np.ndarray,
        gene_permutation: np.ndarray | None,
        chunk_starts: np.ndarray | None,
        warned_precision: bool,
        gene_order: str,
        columns: np.ndarray | None,
        n_columns: int,
        joined: np.ndarray | None,
    ) -> None:
        """Set every attribute of the dataset: the one place they are set, for :meth:`__init__` and :meth:`_view_of`.

        Every argument is required (keyword-only, no defaults), so that an attribute added here must be given
        by both: a derived dataset cannot leave one out.

        Parameters
        ----------
        store, manifest, threads, recorded_dtype
            As the public attributes of the same names.
        tiles
            The tiles' reader (and their cache), shared by the views of a dataset.
        limits, starts
            ``int64[n_tiles]``: the end (excluded) and the first cell of each tile (the manifest's, computed once).
        gene_permutation
            ``gene_order.npy`` once read (read-only), or None.
        chunk_starts
            :meth:`chunk_starts` once read (read-only), or None.
        warned_precision
            Whether the warning about counts float32 cannot hold was given already.
        gene_order
            As the public attribute.
        columns
            The kernels' column map (stored column ``j`` -> output column), read-only ``int32``, or None.
        n_columns
            Columns of the rows read.
        joined
            :meth:`with_columns`'s map (-1: left out, read-only ``int32``), or None.
        """
        self.store = store
        self.manifest = manifest
        self.threads = threads
        self.recorded_dtype = recorded_dtype
        self.gene_order = gene_order
        self._tiles = tiles
        self._limits = limits
        self._starts = starts
        self._gene_permutation = gene_permutation
        self._chunk_starts = chunk_starts
        self._joined = joined
        drops_genes = joined is not None and bool((joined < 0).any())
        self._output = RowOutput(
            tiles, store.url, columns, n_columns, drops_genes=drops_genes, warned_precision=warned_precision
        )
        self._ranges = RangeReads(tiles, manifest, limits, starts, self._output)
        self._gathers = RowGathers(tiles, manifest, self._output)

    @classmethod
    def _view_of(
        cls,
        source: Dataset,
        *,
        gene_order: str,
        columns: np.ndarray | None,
        n_columns: int,
        joined: np.ndarray | None,
    ) -> Dataset:
        """``source`` read into other columns: its store, manifest, tiles (and tile cache), and what it read once.

        The one way a dataset derived from another is made (:meth:`with_gene_order`, :meth:`with_columns`).

        Parameters
        ----------
        source
            The dataset it derives from.
        gene_order, columns, n_columns, joined
            The columns of the view (see :meth:`_assign`).
        """
        view = cls.__new__(cls)
        view._assign(
            store=source.store,
            manifest=source.manifest,
            threads=source.threads,
            recorded_dtype=source.recorded_dtype,
            tiles=source._tiles,
            limits=source._limits,
            starts=source._starts,
            gene_permutation=source._gene_permutation,
            chunk_starts=source._chunk_starts,
            warned_precision=source._output.warned_precision,
            gene_order=gene_order,
            columns=columns,
            n_columns=n_columns,
            joined=joined,
        )
        return view

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                self.store,
                self.manifest.to_dict(),
                self.cache.max_bytes,
                self.threads,
                self.gene_order,
                self.joined_columns(),
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
        if gene_order == self.gene_order:
            return self
        order = self.gene_permutation() if gene_order == "original" else None  # read before sharing the state
        return Dataset._view_of(
            self,
            gene_order=gene_order,
            # a copy of its own, int32 (read-only: one type of argument for the kernels, see deltacells.codec.read_only)
            columns=None if order is None else read_only(order),
            n_columns=self.n_genes,
            joined=None,
        )

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
        joined = columns.astype(np.int32)
        joined.flags.writeable = False
        return Dataset._view_of(
            self, gene_order="joined", columns=read_only(kernel_map), n_columns=int(n_columns), joined=joined
        )

    def joined_columns(self) -> tuple[np.ndarray, int] | None:
        """The arguments of :meth:`with_columns` that made this dataset (read-only), or None."""
        return None if self._joined is None else (self._joined, self.n_genes)

    @property
    def drops_genes(self) -> bool:
        """Whether some stored genes are left out of the rows read (:meth:`with_columns`)."""
        return self._output.drops_genes

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
        return self._output.n_columns

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
        starts = self._chunk_starts
        if starts is None:
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
        span = as_range(rows)
        if span is not None and dtype in DIRECT_DTYPES:
            matrix = self._ranges.read(*span, dtype)  # waits for the kernels once its output is allocated
            if matrix is not None:
                return matrix
        prepare_kernels(expected_nnz(rows, self.nnz, self.n_cells))
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, dtype=np.int64)
        return self._gathers.read(rows, *self.tile_of(rows), dtype)

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
        fetched: Callable[[int], Future[ReadBuffer] | None] | None = None,
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
        output = self._output

        def read() -> tuple[list[sparse.csr_matrix], bool]:
            return read_rows_by_chunk(
                self._tiles, rows, dtype=decoded, columns=output.columns, sort=sort_columns, cuts=cuts,
                threads=threads, fetched=given.pop() if given else None, n_columns=output.n_columns,
            )  # fmt: skip

        matrices, large = self._surviving_appends(read)
        output.warn_if_inexact(large, dtype)
        sorted_rows = output.columns is None or sort_columns
        return output.finished_batches(matrices, dtype, decoded, sorted_rows=sorted_rows)

    def submit_tile_fetch(self, tile: int) -> Future[ReadBuffer]:
        """Start fetching tile ``tile`` whole: one request, many in flight at once (the store's I/O threads).

        For a reader that knows which tiles it will read next (a training loader reading tile groups from
        object storage); pass the fetches to :meth:`read_row_batches` (``fetched``).
        """
        return self._tiles._submit_fetch(tile)

    def range_capacity(self, start: int, stop: int) -> int:
        """The most nonzeros cells ``start`` to ``stop`` (excluded) hold, those of their tiles (the manifest's)."""
        return self._ranges.capacity(start, stop)

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
        return self._ranges.read_into(start, stop, np.dtype(dtype), out_indptr, out_indices, out_data)

    # ------------------------------------------------------------------ sidecars

    def gene_permutation(self) -> np.ndarray | None:
        """``gene_order.npy`` as ``int32[n_genes]``: stored column ``j`` is original column ``p[j]`` (None without one).

        Raises
        ------
        FormatError
            If ``gene_order.npy`` is not a little-endian int32 permutation of ``0 .. n_genes - 1``.
        """
        if self._gene_permutation is None and self.manifest.has_gene_order:
            order = read_gene_order(self.store, self.manifest)
            assert order is not None  # the manifest promises it
            order.flags.writeable = False  # read once, shared by the views of this dataset
            self._gene_permutation = order
        return None if self._gene_permutation is None else self._gene_permutation.copy()

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


def _rebuild(
    store: BaseStore,
    manifest: dict[str, Any],
    tile_cache_bytes: int,
    threads: int | None,
    gene_order: str = "stored",
    joined: tuple[np.ndarray, int] | None = None,
) -> Dataset:
    """A pickled dataset opened again (:meth:`Dataset.__reduce__`), in the columns it was read into."""
    dataset = Dataset(store, Manifest.from_dict(manifest), tile_cache_bytes=tile_cache_bytes, threads=threads)
    return dataset.with_columns(*joined) if joined is not None else dataset.with_gene_order(gene_order)
