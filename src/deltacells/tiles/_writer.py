"""Writing tiles: consecutive rows of a count matrix in, encoded tiles stored, a bounded number in flight.

Encoding and storing overlap: each encoded tile is handed to ``BaseStore.submit_write`` (a PUT on object
storage, a thread of the store's on a local disk) and the encoder goes on with the next tile. The uploads not
yet finished are a :class:`PendingWrites`, bounded by count and by bytes: when uploads lag behind, the
encoding threads wait there (back-pressure), so memory stays bounded whatever the size of the matrix.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from deltacells._checks import check_integer
from deltacells._kernel_loading import kernels_loaded
from deltacells._sparse import csr_rows
from deltacells._threads import default_threads
from deltacells.codec import DEFAULT_LEVEL, DEFAULT_N_CHUNKS, Level, encode_tile, read_only, resolve_level, sort_rows
from deltacells.errors import InvalidValueError
from deltacells.format import tile_path
from deltacells.tiles._counts import to_count_csr

if TYPE_CHECKING:
    from deltacells.storage import BaseStore

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_MAX_PENDING_BYTES",
    "DEFAULT_N_CHUNKS",
    "DEFAULT_TILE_SIZE",
    "PendingWrites",
    "TileList",
    "TileWriter",
    "check_tile_settings",
    "permute_columns",
]

#: Cells per tile unless the caller says otherwise.
DEFAULT_TILE_SIZE = 2048

#: Bytes of submitted writes not yet finished that a writer lets pile up before the encoder waits (256 MiB).
DEFAULT_MAX_PENDING_BYTES = 256 * 2**20


class PendingWrites:
    """Writes submitted to a store and not finished yet, with a bound on their number and their bytes.

    :meth:`submit` hands an object to :meth:`BaseStore.submit_write
    <deltacells.storage.BaseStore.submit_write>` and returns at once, unless ``max_count`` writes or
    ``max_bytes`` bytes are pending already: then it waits for some to finish (the back-pressure that keeps a
    writer's memory bounded when the store is slower than the encoder). A single object larger than
    ``max_bytes`` is still written, alone. The first write that fails is kept: :meth:`submit`, :meth:`check`
    and :meth:`wait` raise it from then on, so a failure surfaces at the next submission, not only at the
    end. Thread-safe: several encoding threads may submit at once.

    Parameters
    ----------
    store
        Where the objects go.
    max_bytes
        The most bytes pending at once (default :data:`DEFAULT_MAX_PENDING_BYTES`).
    max_count
        The most writes pending at once (default twice the store's
        :attr:`~deltacells.storage.BaseStore.io_concurrency`).

    Attributes
    ----------
    submitted
        Writes submitted so far.
    peak_count, peak_bytes
        The most writes, and bytes, that were pending at once.
    """

    def __init__(self, store: BaseStore, *, max_bytes: int | None = None, max_count: int | None = None) -> None:
        self.store = store
        self.max_bytes = DEFAULT_MAX_PENDING_BYTES if max_bytes is None else int(max_bytes)
        self.max_count = 2 * max(1, int(store.io_concurrency)) if max_count is None else int(max_count)
        if self.max_bytes < 1 or self.max_count < 1:
            msg = f"max_bytes and max_count must be at least 1, got {self.max_bytes} and {self.max_count}"
            raise InvalidValueError(msg)
        self._cond = threading.Condition()
        self._futures: set[Future[None]] = set()
        self._count = 0
        self._bytes = 0
        self._error: BaseException | None = None
        self._closed = False
        self.submitted = 0
        self.peak_count = 0
        self.peak_bytes = 0

    @property
    def pending(self) -> int:
        """Writes submitted and not finished yet."""
        with self._cond:
            return self._count

    def submit(self, path: str, data: bytes) -> None:
        """Start writing object ``path``; wait first while the bounds are reached.

        Raises
        ------
        Exception
            The first write of this set that failed (its message names the object).
        InvalidValueError
            After :meth:`abort`.
        """
        size = len(data)
        with self._cond:
            while True:
                self._raise_failure()
                if self._closed:
                    msg = f"the writes to {self.store.url} were aborted; {path} is not written"
                    raise InvalidValueError(msg)
                if not self._count or (self._count < self.max_count and self._bytes + size <= self.max_bytes):
                    break
                self._cond.wait()
            self._count += 1
            self._bytes += size
            self.submitted += 1
            self.peak_count = max(self.peak_count, self._count)
            self.peak_bytes = max(self.peak_bytes, self._bytes)
        try:
            future = self.store.submit_write(path, data)
        except BaseException as exc:
            self._finished(path, size, None, exc)
            raise
        with self._cond:
            self._futures.add(future)
        future.add_done_callback(lambda done: self._finished(path, size, done, None))

    def check(self) -> None:
        """Raise the first failed write, if any (without waiting for the others)."""
        with self._cond:
            self._raise_failure()

    def wait(self) -> None:
        """Wait until every write submitted has finished.

        Raises
        ------
        Exception
            The first write that failed (as soon as it fails; the others may still be running: :meth:`abort`).
        """
        with self._cond:
            while self._count and self._error is None:
                self._cond.wait()
            self._raise_failure()

    def abort(self) -> None:
        """Refuse new writes, cancel those not started and wait for the others (what they wrote stays)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        while True:
            with self._cond:
                if not self._count:
                    return
                futures = [future for future in self._futures if not future.done()]
                if not futures:  # done callbacks about to run, or a submission between reservation and start
                    self._cond.wait(timeout=0.05)
                    continue
            for future in futures:
                future.cancel()
            wait_futures(futures)

    def _finished(self, path: str, size: int, future: Future[None] | None, error: BaseException | None) -> None:
        if future is not None and not future.cancelled():
            error = future.exception()
        with self._cond:
            if future is not None:
                self._futures.discard(future)
            self._count -= 1
            self._bytes -= size
            if error is not None and self._error is None:
                self._error = _naming(error, self.store, path)
            self._cond.notify_all()

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error


def _naming(error: BaseException, store: BaseStore, path: str) -> BaseException:
    """``error``, with a note naming the object when its message does not (store errors already do)."""
    if path not in str(error):
        error.add_note(f"while writing {store.url.rstrip('/')}/{path}")
    return error


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
    check_integer("n_genes", n_genes, minimum=1, maximum=2**31, hint="a dataset needs at least one gene")
    check_integer("tile_size", tile_size, minimum=1, hint="cells per tile")
    check_integer("n_chunks", n_chunks, minimum=1, hint="chunks per tile")


class TileWriter:
    """Encode consecutive rows of a count matrix as tiles and store them, nothing else.

    Rows arrive in blocks of any size (:meth:`write`); each full tile is put in tile column order and encoded
    on a thread pool while more rows arrive (at most twice the threads in flight), and each encoded tile is
    uploaded with the store's ``submit_write`` while encoding goes on. The uploads pending are
    bounded by count and bytes (``uploads``, a ``PendingWrites``): when the store is slower than the
    encoder, the encoding threads wait, so memory stays at a few tiles plus ``max_pending_bytes`` whatever
    the size of the matrix. A failed upload fails the next tile submitted (or :meth:`finish`).
    :meth:`finish` writes the last, partial tile, waits for every upload and returns the :class:`TileList`
    that the manifest records. The dataset around the tiles (sidecars, obs, the manifest) is
    :class:`~deltacells.core.DatasetWriter`'s job; it submits its other objects through ``uploads``
    too, so that one bound covers them all.

    Parameters
    ----------
    store
        Where the tiles go (``tiles/tile_000000.dct``...).
    n_genes
        Columns of the matrix.
    tile_size, n_chunks
        Cells per tile, chunks per tile.
    level
        zstd level ``1 .. 22``, or ``"default"`` or ``"archive"`` (see
        ``deltacells.codec._encode.resolve_level``); ``level`` is the integer.
    columns
        ``columns[j]`` is the tile column of source column ``j`` (a permutation), applied to every block;
        ``None`` keeps the columns as they are.
    threads
        Tiles encoded at once (default: the usable CPUs).
    first_tile
        The index of the first tile written (an append continues a dataset's tiles).
    max_pending_bytes
        The most bytes uploading at once (default ``DEFAULT_MAX_PENDING_BYTES``, 256 MiB); a single tile
        larger than that is still uploaded, alone.
    max_pending_uploads
        The most uploads pending at once (default twice the store's ``io_concurrency``).
    """

    def __init__(
        self,
        store: BaseStore,
        n_genes: int,
        *,
        tile_size: int = DEFAULT_TILE_SIZE,
        n_chunks: int = DEFAULT_N_CHUNKS,
        level: Level = DEFAULT_LEVEL,
        columns: np.ndarray | None = None,
        threads: int | None = None,
        first_tile: int = 0,
        max_pending_bytes: int | None = None,
        max_pending_uploads: int | None = None,
    ) -> None:
        check_tile_settings(n_genes, tile_size=tile_size, n_chunks=n_chunks)
        self.store = store
        self.first_tile = int(first_tile)
        self.n_genes = int(n_genes)
        self.tile_size = int(tile_size)
        self.n_chunks = int(n_chunks)
        self.level = resolve_level(level)
        self._columns = columns
        self.uploads = PendingWrites(store, max_bytes=max_pending_bytes, max_count=max_pending_uploads)
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
        """Rows received so far (stored, being encoded or uploaded, or waiting for their tile to fill)."""
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
        """Check a block of counts: a canonical int32 CSR matrix, still in source columns; the writer is not changed.

        The columns are put in tile order later, tile by tile, on the encoding threads.

        Raises
        ------
        InvalidValueError, InvalidTypeError
            For values that are not counts (see :func:`~deltacells.tiles.to_count_csr`).
        """
        return to_count_csr(block, first_row=self.n_cells, n_genes=self.n_genes)

    def append(self, csr: sparse.csr_matrix) -> None:
        """Append rows made by :meth:`prepare`; each tile that fills is encoded and uploaded.

        Raises
        ------
        Exception
            What a tile's encoding or an earlier upload raised (an upload error names the object).
        """
        self._pending.append(csr)
        self._pending_rows += csr.shape[0]
        self._rows_received += csr.shape[0]
        while self._pending_rows >= self.tile_size:
            self._emit_tile(self.tile_size)

    def finish(self) -> TileList:
        """Write the last tile, wait for every tile to be encoded and stored, and return what was written.

        Every write submitted through ``uploads`` is waited for, not only the tiles.

        Raises
        ------
        Exception
            The first encoding or upload that failed (an upload error names the object).
        """
        if self._pending_rows:
            self._emit_tile(self._pending_rows)
        while self._in_flight:
            self._collect_one()
        self.uploads.wait()
        self._done = True
        self._pool.shutdown()
        return TileList(
            np.asarray(self._tile_cells, dtype=np.int64),
            np.asarray(self._tile_nnz, dtype=np.int64),
            np.asarray(self._tile_bytes, dtype=np.int64),
        )

    def abort(self) -> None:
        """Stop: cancel the tiles and uploads not started and wait for the others (what they wrote stays)."""
        self._done = True
        self.uploads.abort()  # first: encoding threads waiting to submit are let go (refused)
        for future in self._in_flight:
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._in_flight.clear()

    def _emit_tile(self, n_rows: int) -> None:
        self.uploads.check()  # an upload failed: stop now, not at the end
        block = self._take_rows(n_rows)
        index = self.first_tile + len(self._tile_cells) + len(self._in_flight)
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
            else:  # views: the blocks are the writer's own (prepare), never written
                taken.append(csr_rows(head, 0, need))
                self._pending[0] = csr_rows(head, need, head.shape[0])
                need = 0
        self._pending_rows -= n_rows
        return taken[0] if len(taken) == 1 else sparse.vstack(taken, format="csr")

    def _encode_and_store(self, index: int, block: sparse.csr_matrix) -> tuple[int, int, int]:
        """Encode one tile and submit its upload (waiting while the pending uploads are at their bounds)."""
        name = tile_path(index)
        if self._columns is not None and block.nnz:
            block = permute_columns(block, self._columns)
        blob = encode_tile(
            block.indptr, block.indices, block.data, self.n_genes, n_chunks=self.n_chunks, level=self.level,
            threads=1, name=f"{self.store.url}/{name}",
        )  # fmt: skip
        self.uploads.submit(name, blob)
        return block.shape[0], block.nnz, len(blob)

    def _collect_one(self) -> None:
        cells, nnz, size = self._in_flight.popleft().result()
        self._tile_cells.append(cells)
        self._tile_nnz.append(nnz)
        self._tile_bytes.append(size)


def permute_columns(csr: sparse.csr_matrix, columns: np.ndarray) -> sparse.csr_matrix:
    """``csr`` with column ``j`` moved to ``columns[j]``, indices sorted within each row; ``csr`` is not changed.

    Once numba's kernels are loaded (``deltacells._kernel_loading``; a large ``write_deltacells`` starts their
    loading), each row's mapped columns are sorted by the decoder's radix sort (``sort_rows``), in cache.
    Until then, two transpositions sort the indices (each a counting sort, linear in the nonzeros, but
    scattered over the tile): several times faster than sorting every row (``sort_indices``), which took most
    of a conversion's time at fast levels, and 2.5 times slower than the radix sort.

    Parameters
    ----------
    csr
        A canonical CSR matrix (sorted indices, no duplicates).
    columns
        A permutation of ``0 .. n_columns - 1``.

    Returns
    -------
    scipy.sparse.csr_matrix
        The same values, in the new columns, with sorted indices.
    """
    if kernels_loaded() and csr.data.dtype == np.int32:  # (the signature the loading thread loads)
        # A radix sort of each row, in cache: 6.6 ms a tile of 2,048 Visium cells, against 16.8 below.
        indices, data = columns[csr.indices].astype(np.int32, copy=False), csr.data.copy()
        indptr = read_only(csr.indptr.astype(np.int64, copy=False))
        sort_rows(indptr, 0, csr.shape[0], 0, indices, data, int(columns.shape[0]))
        return sparse.csr_matrix((data, indices, indptr), shape=csr.shape, copy=False)
    moved = sparse.csr_matrix((csr.data, columns[csr.indices], csr.indptr), shape=csr.shape, copy=False)
    return moved.tocsc().tocsr()
