"""Conversion on a dask cluster: the tiles of a dask-backed matrix encoded and stored by dask tasks.

``write_deltacells`` comes here when the matrix is a :class:`dask.array.Array` (``read_lazy``'s X, a dask
AnnData, ``read_deltacells(..., chunks=...)``). Two passes run under the scheduler in effect: the workers
of the active ``dask.distributed`` client, or dask's local scheduler when there is none.

1. **Gene totals**: one task per block of the matrix checks its values and sums its columns; the client adds
   the sums up as they arrive (:func:`dask_gene_totals`).
2. **Tiles**: one task per run of whole tiles gathers the blocks it overlaps, puts the genes in their
   order, encodes its tiles and stores them in the destination itself (a bucket or a disk the workers
   see); it returns only the cells, nonzeros and bytes of each tile (:func:`store_dask_tiles`).

The client then writes the sidecars, obs and, last of all, the manifest
(:class:`~deltacells.core.DatasetWriter`). A task holds the destination store (which pickles to its URL
and options) and the gene permutation (one shared key): never a file handle or the whole matrix.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from deltacells import _internals
from deltacells._threads import default_threads
from deltacells.codec import encode_tile
from deltacells.format import tile_path
from deltacells.tiles import TileList, column_totals, permute_columns, to_count_csr

if TYPE_CHECKING:
    from deltacells.io._sources import MatrixSource
    from deltacells.storage import BaseStore

__all__ = ["dask_gene_totals", "dask_matrix", "store_dask_tiles", "task_rows"]

#: Tasks a local (non-distributed) scheduler runs per batch, per thread: results are gathered batch by batch.
_BATCH_PER_THREAD = 4

#: Seconds to wait, after an error on a cluster, for the tasks still running to end.
_SETTLE_SECONDS = 60.0


def dask_matrix(source: MatrixSource) -> Any:
    """The rows and columns of ``source`` that are wanted, as a dask array with one block across the columns."""
    matrix = source.matrix
    n_rows, n_cols = matrix.shape
    if not (isinstance(source.rows, slice) and source.rows == slice(0, n_rows, 1)):
        matrix = matrix[source.rows]
    if not (isinstance(source.cols, slice) and source.cols == slice(0, n_cols, 1)):
        matrix = matrix[:, source.cols]
    if matrix.numblocks[1] > 1:
        matrix = matrix.rechunk({1: -1})
    return matrix


def task_rows(row_chunks: Sequence[int], tile_size: int) -> list[tuple[int, int]]:
    """The rows of each tile-encoding task: runs of whole tiles, about as many cells as a block of the input.

    Parameters
    ----------
    row_chunks
        Rows of each block of the input.
    tile_size
        Cells per tile.

    Returns
    -------
    list of (int, int)
        ``[start, stop)`` of each task; every task but the last starts and ends at a tile boundary.
    """
    n_rows = int(sum(row_chunks))
    sizes = [int(n) for n in row_chunks if n]
    typical = int(np.median(sizes)) if sizes else tile_size
    per_task = tile_size * max(1, round(typical / tile_size))
    return [(start, min(start + per_task, n_rows)) for start in range(0, n_rows, per_task)]


def dask_gene_totals(matrix: Any, bar: Any = None) -> np.ndarray:
    """Every gene's total count, the values checked on the way: one dask task per block of ``matrix``.

    Parameters
    ----------
    matrix
        A dask array of counts, one block across the columns (:func:`dask_matrix`).
    bar
        A progress bar to advance by each block's rows (``None``: none).

    Returns
    -------
    numpy.ndarray
        ``float64[n_genes]``.

    Raises
    ------
    InvalidValueError, InvalidTypeError
        For values that are not counts, naming the cell (counted from the first row written) and gene.
    """
    from dask.delayed import delayed

    n_genes = int(matrix.shape[1])
    starts = np.concatenate(([0], np.cumsum(matrix.chunks[0])[:-1])).astype(np.int64)
    blocks = matrix.to_delayed().ravel()
    sums = delayed(column_totals, pure=True)
    tasks = [sums(block, first_row=int(start), n_genes=n_genes) for block, start in zip(blocks, starts, strict=True)]
    totals = np.zeros(n_genes, dtype=np.float64)

    def add(index: int, result: np.ndarray) -> None:
        np.add(totals, result, out=totals)
        if bar is not None:
            bar.update(int(matrix.chunks[0][index]))

    run_tasks(tasks, add)
    return totals


def store_dask_tiles(
    matrix: Any,
    store: BaseStore,
    *,
    tile_size: int,
    n_chunks: int,
    level: int,
    gene_order: np.ndarray | None,
    bar: Any = None,
) -> TileList:
    """Encode and store the tiles of ``matrix`` in dask tasks; what the manifest records of them.

    Parameters
    ----------
    matrix
        A dask array of counts, one block across the columns (:func:`dask_matrix`).
    store
        Where the tiles go (``tiles/tile_000000.dct``...): the tasks write there themselves.
    tile_size, n_chunks, level
        The tiles' settings.
    gene_order
        ``gene_order[j]`` is the source column stored as column ``j`` (``None``: as they are).
    bar
        A progress bar to advance by each task's rows (``None``: none).

    Raises
    ------
    InvalidValueError, InvalidTypeError
        For values that are not counts (see :func:`~deltacells.tiles.to_count_csr`).
    Exception
        What a task's read, encoding or write raised (a write error names the object).
    """
    from dask.delayed import delayed

    n_genes = int(matrix.shape[1])
    columns = None
    if gene_order is not None:
        columns = np.empty(n_genes, dtype=np.int32)
        columns[gene_order] = np.arange(n_genes, dtype=np.int32)
    shared_columns = delayed(columns, pure=True) if columns is not None else None  # one key, not one copy per task
    spans = task_rows(matrix.chunks[0], tile_size)
    settings = {"n_genes": n_genes, "tile_size": tile_size, "n_chunks": n_chunks, "level": level}
    tasks = []
    for start, stop in spans:
        pieces = list(matrix[start:stop].to_delayed().ravel())
        first_tile = start // tile_size
        tasks.append(delayed(_encode_and_store, pure=True)(pieces, start, first_tile, shared_columns, store, settings))
    per_task: list[np.ndarray | None] = [None] * len(tasks)

    def keep(index: int, result: np.ndarray) -> None:
        per_task[index] = result
        if bar is not None:
            bar.update(spans[index][1] - spans[index][0])

    run_tasks(tasks, keep)
    stats = np.concatenate([r for r in per_task if r is not None]) if tasks else np.zeros((0, 3), dtype=np.int64)
    return TileList(stats[:, 0].copy(), stats[:, 1].copy(), stats[:, 2].copy())


def run_tasks(tasks: Sequence[Any], on_result: Callable[[int, Any], None]) -> None:
    """Compute dask ``tasks`` under the scheduler in effect, calling ``on_result(index, result)`` as they finish.

    With a ``dask.distributed`` client as the scheduler, every task is submitted at once and results are
    gathered as they complete. With a local scheduler, tasks run in batches (a few per thread), so that the
    client holds one batch of results at a time.

    An error comes back only once no task is running any more: the tasks not started are cancelled and those
    running are waited for, so that none stores a tile after the caller has cleared the destination. (dask's
    schedulers raise at the first error and leave running tasks to finish on their own.)
    """
    client = _distributed_client()
    if client is not None:
        _run_on_cluster(client, tasks, on_result)
        return
    import dask.config
    from dask.base import compute
    from dask.threaded import get as threaded_get

    threads = int(dask.config.get("num_workers", None) or default_threads())
    batch = max(1, _BATCH_PER_THREAD * threads)
    own_pool = _internals.dask_scheduler(list(tasks[:1])) is threaded_get and dask.config.get("pool", None) is None
    pool = ThreadPoolExecutor(threads, thread_name_prefix="deltacells-dask") if own_pool else None
    try:
        for first in range(0, len(tasks), batch):
            results = compute(*tasks[first : first + batch], **({"pool": pool} if pool else {}))
            for offset, result in enumerate(results):
                on_result(first + offset, result)
    finally:
        if pool is not None:  # after an error: the queued tasks cancelled, the running ones waited for
            pool.shutdown(wait=True, cancel_futures=True)


def _run_on_cluster(client: Any, tasks: Sequence[Any], on_result: Callable[[int, Any], None]) -> None:
    """:func:`run_tasks` on a ``dask.distributed`` client: at an error, cancel and wait out the running tasks."""
    from distributed import as_completed

    futures = client.compute(list(tasks))
    index_of = {future.key: i for i, future in enumerate(futures)}
    try:
        for future in as_completed(futures):
            on_result(index_of[future.key], future.result())
            future.release()
    except BaseException as exc:
        client.cancel(futures)
        if not _wait_until_not_running(client, set(index_of)):
            exc.add_note(
                f"tasks were still running on the workers {_SETTLE_SECONDS:g} s after this error; "
                "what they store may remain at the destination"
            )
        raise


def _wait_until_not_running(client: Any, keys: set[Any]) -> bool:
    """Wait until no worker runs a task of ``keys`` (a cancelled task runs on to its end).

    Returns
    -------
    bool
        ``True`` once none runs (or the workers are gone), ``False`` if some still did after
        :data:`_SETTLE_SECONDS`.
    """
    deadline = time.monotonic() + _SETTLE_SECONDS
    while True:
        try:
            running = client.run(_running_keys, keys)
        except Exception:  # the workers are gone or cannot be reached: none of them runs a task of ours
            return True
        if not any(running.values()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _running_keys(keys: set[Any], dask_worker: Any = None) -> list[Any]:
    """On a worker (``client.run``): which of ``keys`` its threads are running, cancelled or not."""
    state = dask_worker.state
    return [task.key for task in (*state.executing, *state.long_running) if task.key in keys]


def _distributed_client() -> Any:
    """The ``distributed.Client`` that dask would compute with now, or ``None`` (a local scheduler)."""
    return _internals.dask_distributed_client()


# ---------------------------------------------------------------------- what the tasks run


def _encode_and_store(
    pieces: list[Any],
    first_row: int,
    first_tile: int,
    columns: np.ndarray | None,
    store: BaseStore,
    settings: dict[str, int],
) -> np.ndarray:
    """Encode rows ``first_row ..`` (the ``pieces`` of the input in order) as tiles ``first_tile ..`` and store them.

    Returns
    -------
    numpy.ndarray
        ``int64[n_tiles, 3]``: cells, stored nonzeros and bytes of each tile.
    """
    n_genes, tile_size = settings["n_genes"], settings["tile_size"]
    counts = []
    row = first_row
    for piece in pieces:
        counts.append(to_count_csr(piece, first_row=row, n_genes=n_genes))
        row += counts[-1].shape[0]
    rows = counts[0] if len(counts) == 1 else sparse.vstack(counts, format="csr")
    stats = []
    for offset in range(0, rows.shape[0], tile_size):
        tile = rows[offset : offset + tile_size]
        if columns is not None and tile.nnz:
            tile = permute_columns(tile, columns)
        name = tile_path(first_tile + offset // tile_size)
        blob = encode_tile(
            tile.indptr, tile.indices, tile.data, n_genes, n_chunks=settings["n_chunks"], level=settings["level"],
            threads=1, name=f"{store.url}/{name}",
        )  # fmt: skip
        try:
            store.write(name, blob)
        except Exception as exc:
            exc.add_note(f"while writing {store.url.rstrip('/')}/{name}")
            raise
        stats.append((tile.shape[0], tile.nnz, len(blob)))
    return np.asarray(stats, dtype=np.int64).reshape(-1, 3)
