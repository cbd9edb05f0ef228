"""Writing tiles: consecutive rows of a count matrix in, encoded tiles stored, a bounded number in flight."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from deltacells._threads import default_threads
from deltacells.codec._encode import DEFAULT_LEVEL, DEFAULT_N_CHUNKS
from deltacells.errors import InvalidValueError
from deltacells.format import tile_path
from deltacells.tiles._counts import to_count_csr

if TYPE_CHECKING:
    from deltacells.storage import BaseStore

__all__ = ["DEFAULT_LEVEL", "DEFAULT_N_CHUNKS", "DEFAULT_TILE_SIZE", "TileList", "TileWriter", "check_tile_settings"]

#: Cells per tile unless the caller says otherwise.
DEFAULT_TILE_SIZE = 2048


@dataclass(frozen=True)
class TileList:
    """The tiles written, in order: cells, stored nonzeros and bytes of each (the manifest's per-tile lists)."""

    tile_cells: np.ndarray
    tile_nnz: np.ndarray
    tile_bytes: np.ndarray

    @property
    def n_cells(self) -> int:
        """Cells in all the tiles."""
        return int(self.tile_cells.sum())


def check_tile_settings(n_genes: int, *, tile_size: int, n_chunks: int) -> None:
    """Raise :class:`ValueError` for settings no tile can have (no gene, no cell per tile, no chunk)."""
    if not 1 <= int(n_genes) <= 2**31:
        msg = f"n_genes must be 1 .. 2^31, got {n_genes} (a dataset needs at least one gene)"
        raise InvalidValueError(msg)
    if int(tile_size) < 1:
        msg = f"tile_size must be a positive number of cells, got {tile_size}"
        raise InvalidValueError(msg)
    if int(n_chunks) < 1:
        msg = f"n_chunks must be at least 1, got {n_chunks}"
        raise InvalidValueError(msg)


class TileWriter:
    """Encode consecutive rows of a count matrix as tiles and store them, nothing else.

    Rows arrive in blocks of any size (:meth:`write`); each full tile is encoded and stored on a thread pool
    while more rows arrive, with at most twice the threads in flight, so memory stays at a few tiles whatever
    the size of the matrix. :meth:`finish` writes the last, partial tile and returns the :class:`TileList`
    that the manifest records. The dataset around the tiles (sidecars, obs, the manifest) is
    :class:`~deltacells.dataset.DatasetWriter`'s job.

    Parameters
    ----------
    store
        Where the tiles go (``tiles/tile_000000.dct``...).
    n_genes
        Columns of the matrix.
    tile_size, n_chunks, level
        Cells per tile, chunks per tile, zstd level.
    columns
        ``columns[j]`` is the tile column of source column ``j`` (a permutation), applied to every block;
        ``None`` keeps the columns as they are.
    threads
        Tiles encoded at once (default: the usable CPUs).
    """

    def __init__(
        self,
        store: BaseStore,
        n_genes: int,
        *,
        tile_size: int = DEFAULT_TILE_SIZE,
        n_chunks: int = DEFAULT_N_CHUNKS,
        level: int = DEFAULT_LEVEL,
        columns: np.ndarray | None = None,
        threads: int | None = None,
    ) -> None:
        check_tile_settings(n_genes, tile_size=tile_size, n_chunks=n_chunks)
        self.store = store
        self.n_genes = int(n_genes)
        self.tile_size = int(tile_size)
        self.n_chunks = int(n_chunks)
        self.level = int(level)
        self._columns = columns
        n_threads = default_threads() if threads is None else max(1, int(threads))
        self._pool = ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="deltacells-write")
        self._max_in_flight = 2 * n_threads
        self._in_flight: deque[Future[tuple[int, int, int]]] = deque()
        self._pending: list[sparse.csr_matrix] = []
        self._pending_rows = 0
        self._rows_received = 0
        self._tile_cells: list[int] = []
        self._tile_nnz: list[int] = []
        self._tile_bytes: list[int] = []
        self._done = False

    @property
    def n_cells(self) -> int:
        """Rows received so far (stored, being encoded, or waiting for their tile to fill)."""
        return self._rows_received

    def write(self, block: Any) -> None:
        """Append rows: a scipy sparse matrix (any format) or a dense 2-D array of counts, in source columns.

        Raises
        ------
        InvalidValueError, InvalidTypeError
            For values that are not counts (see :func:`~deltacells.tiles.to_count_csr`); nothing was added.
        """
        self.append(self.prepare(block))

    def prepare(self, block: Any) -> sparse.csr_matrix:
        """Check a block of counts and put its columns in tile order; the writer is not changed.

        Raises
        ------
        InvalidValueError, InvalidTypeError
            For values that are not counts (see :func:`~deltacells.tiles.to_count_csr`).
        """
        csr = to_count_csr(block, first_row=self.n_cells, n_genes=self.n_genes)
        if self._columns is not None and csr.nnz:
            csr = sparse.csr_matrix((csr.data, self._columns[csr.indices], csr.indptr), shape=csr.shape)
            csr.has_sorted_indices = False
            csr.sort_indices()
        return csr

    def append(self, csr: sparse.csr_matrix) -> None:
        """Append rows made by :meth:`prepare`; each tile that fills is encoded and stored."""
        self._pending.append(csr)
        self._pending_rows += csr.shape[0]
        self._rows_received += csr.shape[0]
        while self._pending_rows >= self.tile_size:
            self._emit_tile(self.tile_size)

    def finish(self) -> TileList:
        """Write the last tile, wait for every tile to be stored, and return what was written."""
        if self._pending_rows:
            self._emit_tile(self._pending_rows)
        while self._in_flight:
            self._collect_one()
        self._done = True
        self._pool.shutdown()
        return TileList(
            np.asarray(self._tile_cells, dtype=np.int64),
            np.asarray(self._tile_nnz, dtype=np.int64),
            np.asarray(self._tile_bytes, dtype=np.int64),
        )

    def abort(self) -> None:
        """Stop: cancel the tiles not started and wait for the others (what they wrote stays)."""
        self._done = True
        for future in self._in_flight:
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._in_flight.clear()

    def _emit_tile(self, n_rows: int) -> None:
        block = self._take_rows(n_rows)
        index = len(self._tile_cells) + len(self._in_flight)
        while len(self._in_flight) >= self._max_in_flight:
            self._collect_one()
        self._in_flight.append(self._pool.submit(self._encode_and_store, index, block))

    def _take_rows(self, n_rows: int) -> sparse.csr_matrix:
        taken: list[sparse.csr_matrix] = []
        need = n_rows
        while need:
            head = self._pending[0]
            if head.shape[0] <= need:
                taken.append(self._pending.pop(0))
                need -= head.shape[0]
            else:
                taken.append(head[:need])
                self._pending[0] = head[need:]
                need = 0
        self._pending_rows -= n_rows
        return taken[0] if len(taken) == 1 else sparse.vstack(taken, format="csr")

    def _encode_and_store(self, index: int, block: sparse.csr_matrix) -> tuple[int, int, int]:
        from deltacells.codec import encode_tile

        name = tile_path(index)
        blob = encode_tile(
            block.indptr, block.indices, block.data, self.n_genes, n_chunks=self.n_chunks, level=self.level,
            threads=1, name=f"{self.store.url}/{name}",
        )  # fmt: skip
        self.store.write(name, blob)
        return block.shape[0], block.nnz, len(blob)

    def _collect_one(self) -> None:
        cells, nnz, size = self._in_flight.popleft().result()
        self._tile_cells.append(cells)
        self._tile_nnz.append(nnz)
        self._tile_bytes.append(size)
