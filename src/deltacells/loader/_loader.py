"""``CellLoader``: shuffled minibatches of cells straight from the tiles, sharded and resumable."""

from __future__ import annotations

import hashlib
import os
import sys
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
from numpy.typing import DTypeLike
from scipy import sparse

from deltacells._checks import check_integer, check_names
from deltacells._threads import default_threads
from deltacells.core import Collection, CollectionObs, Dataset
from deltacells.errors import InvalidValueError
from deltacells.loader._fetch import TileFetches
from deltacells.loader._order import Stream, part_of_order
from deltacells.loader._output import SPARSE_OUTPUTS, check_output, convert
from deltacells.loader._plan import EpochPlan, blocks_between, make_blocks
from deltacells.loader._source import LoaderSource, resolve_source
from deltacells.obs import ObsStore

if TYPE_CHECKING:
    import pandas as pd

    from deltacells.core import RowSource
    from deltacells.storage import ReadBuffer

__all__ = ["Batch", "CellLoader"]

#: ``block_size`` for blocks that follow the tiles' chunks (the default).
CHUNK_BLOCKS = "chunk"

#: Cells per window unless the caller says: this many batches' worth, and at least DEFAULT_MIN_BUFFER.
DEFAULT_BUFFER_BATCHES = 16
DEFAULT_MIN_BUFFER = 16384

#: Tiles per group on object storage unless the caller says (on a local disk: no groups), and the most bytes of
#: tiles such a group may hold (fewer tiles per group when 64 average tiles hold more).
DEFAULT_REMOTE_GROUP_TILES = 64
DEFAULT_REMOTE_GROUP_BYTES = 256 * 2**20


@dataclass
class Batch:
    """One minibatch.

    Attributes
    ----------
    X
        The cells' counts, ``len(index) x n_genes``, of the loader's ``output`` type.
    index
        ``int64``: the cells' numbers in the dataset (rows of ``read_deltacells(path)``).
    obs
        The obs columns asked for, one numpy array per column aligned with the rows: the integer codes of a
        categorical column (its categories are the loader's ``obs_categories[name]``; a collection's
        ``"dataset"`` column is one, of the datasets' names), the values of others. The loader's
        ``obs_frame(batch)`` gives them as a pandas DataFrame, categorical columns by their names.
    """

    X: Any
    index: np.ndarray
    obs: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def pin_memory(self) -> Batch:
        """The batch with ``X`` in pinned memory when it is a torch tensor; ``index`` and ``obs`` stay numpy arrays.

        A ``DataLoader`` with ``pin_memory=True`` calls it.
        """
        pin = getattr(self.X, "pin_memory", None)
        return Batch(pin() if pin is not None else self.X, self.index, self.obs)


class CellLoader:
    """Shuffled minibatches of cells, read straight from a dataset's tiles.

    No pre-shuffled copy is needed: each epoch, the selected cells are cut into blocks (runs of consecutive
    cells within a tile), the blocks are put in a random order, consecutive blocks are read together into a
    window of about ``buffer_size`` cells and shuffled there, and the stream of shuffled cells is cut into
    batches. Windows are read and decoded ahead of the consumer on background threads. The whole order is
    drawn from ``(seed, epoch)``: the same in every process, so that ranks and workers share the cells
    without talking to each other, and a run can resume mid-epoch from :meth:`state_dict`.

    Parameters
    ----------
    source
        A dataset path or fsspec URL, a :class:`~deltacells.Dataset`, or an AnnData from
        :func:`~deltacells.read_deltacells` (read with its lazy X); a view of one selects its cells and genes.
        A list of datasets (paths, URLs or Datasets) is a collection, read as one (as
        ``read_deltacells([...])`` reads it: ``join``, ``var_key``, ``keys``, ``label``): blocks of all the
        datasets are shuffled together, and a batch mixes cells of several.
    batch_size
        Cells per batch.
    shuffle
        Shuffle (else the cells come in dataset order, in batches of consecutive cells).
    seed
        Seed of every random order; with the epoch, it fixes the batches entirely.
    drop_last
        Drop the last, short batch; across ranks, every rank then has the same number of batches.
    cells
        Cells to load (an index into the source's cells: integers, a boolean mask or a slice); ``None``: all.
        They are a set: each comes once per epoch, whatever their order or repeats.
    obs_columns
        obs columns to give with each batch (``Batch.obs``: a categorical column as its integer codes, see
        :attr:`obs_categories` and :meth:`obs_frame`), read from the local obs cache (copied there when the loader
        is made); ``()``: none, and obs is never read. For a collection, ``"dataset"`` (its ``label``) gives
        each cell's dataset.
    output
        ``"scipy"`` (CSR matrices), ``"numpy"`` (dense arrays), ``"torch"`` (dense tensors) or
        ``"torch_sparse"`` (sparse CSR tensors); torch is needed only for the last two.
    dtype
        dtype of the values.
    gene_order
        ``"original"`` (the genes in the order they were written, as ``read_deltacells`` gives them) or
        ``"stored"`` (by decreasing total counts, as stored: a little cheaper); default: the AnnData's, or
        ``"original"``.
    block_size
        ``"chunk"`` (or ``None``, the default): a block is the cells of one chunk of a tile (the unit of
        decoding: about ``tile_size / n_chunks`` cells, read from the tiles' chunk tables when the loader is
        made), so each chunk is decoded once per epoch. An int: blocks of that many consecutive cells
        within a tile; smaller than a chunk, they mix cells from more tiles into each batch, at the cost of
        decoding each chunk several times per epoch (and a block across two chunks decodes both).
    buffer_size
        Cells per window, shuffled together (default: 16 batches, at least 16,384 cells). Larger windows give
        batches closer to uniform random sampling, for more memory. The sparse batches of a window share two
        arrays (each batch's ``indices`` and ``data`` are slices of them: one allocation per window, not one
        per batch, whose fresh pages would each cost a fault): a batch kept after the loop keeps its window's
        arrays in memory; ``batch.X.copy()`` keeps its rows alone.
    group_tiles
        Tiles whose blocks are shuffled together, each read once per epoch: every epoch the tiles are put in a
        random order and cut into groups of this many, and the blocks come group after group, each group's in
        a random order (then windows and batches, as above). On object storage each tile of a group is then
        fetched whole with one request, ahead of the first window that reads it, and kept (compressed) until
        the last one has: one request per tile and epoch instead of one per chunk, for a little less mixing
        (a window's cells come from fewer tiles) and compressed tiles in memory (those of the group being
        read, and those of the next ``prefetch + 1`` windows, fetched ahead). ``0``: no
        groups, every block of the epoch shuffled together (each window reads its chunks in byte ranges).
        Default: on object storage 64, or fewer if 64 tiles of the dataset's average size hold more than
        256 MiB; on a local disk 0 (a ranged read there costs no round trip).
    prefetch
        Windows read ahead of the consumer (each holds ``buffer_size`` decoded cells).
    rank, world_size
        This process's shard and the number of shards (default: from :mod:`torch.distributed` when it is
        initialised, else 0 and 1). Each rank gets a disjoint share of the cells every epoch.
    storage_options
        fsspec options for a path or URL.
    cache_dir, verify_obs
        The obs cache, and whether obs shards are checked as they are copied into it, as for
        :func:`~deltacells.read_deltacells` (default: the AnnData's cache).
    threads
        Threads decoding tiles (default: the usable CPUs).
    join, var_key, keys, label
        For a collection, as for :func:`~deltacells.read_deltacells`: how the genes are joined, the datasets'
        names, and the obs column (which ``obs_columns`` may name) giving each cell's dataset.
    weights
        For a collection: each dataset's share of an epoch's cells (any non-negative numbers, one per
        dataset, normalised). An epoch still has as many cells as are selected, but a dataset's come in
        proportion to its weight: a subset of its blocks drawn at random every epoch, or all of them again
        and again, so that one huge study does not dominate. ``None`` (default): every cell once per epoch.

    Notes
    -----
    In a :class:`torch.utils.data.DataLoader` (``batch_size=None``, any ``num_workers``), each worker process
    takes a contiguous share of the rank's batches, so that together they yield each batch once, and torch
    gives them in turn; :meth:`dataloader` counts them as they are given, so :meth:`state_dict` resumes an
    epoch with workers as without. The loader pickles to its settings, never to decoded data.
    :meth:`set_epoch` changes the order, as with torch's ``DistributedSampler``: call it at the start of every
    epoch.

    Examples
    --------
    >>> loader = deltacells.CellLoader("atlas.deltacells", batch_size=256, obs_columns=["cell_type"])  # doctest: +SKIP
    >>> for epoch in range(3):  # doctest: +SKIP
    ...     loader.set_epoch(epoch)
    ...     for batch in loader:
    ...         train_step(batch.X, batch.obs["cell_type"])
    """

    #: The epoch, the position to start from and the order's shares, in memory shared with ``DataLoader`` workers
    #: (a ``multiprocessing.RawArray``); set by ``deltacells.loader._torch.CellDataset``, absent until then.
    _shared: Any

    def __init__(
        self,
        source: Any,
        batch_size: int = 256,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        cells: Any = None,
        obs_columns: Sequence[str] = (),
        output: str = "scipy",
        dtype: DTypeLike = np.float32,
        gene_order: Literal["original", "stored"] | None = None,
        block_size: int | str | None = None,
        buffer_size: int | None = None,
        group_tiles: int | None = None,
        prefetch: int = 2,
        rank: int | None = None,
        world_size: int | None = None,
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        verify_obs: bool = True,
        threads: int | None = None,
        join: Literal["inner", "outer"] = "inner",
        var_key: str | None = None,
        keys: Sequence[str] | None = None,
        label: str | None = "dataset",
        weights: Sequence[float] | None = None,
    ) -> None:
        self.batch_size = check_integer("batch_size", batch_size, minimum=1)
        check_output(output)
        self.output = output
        self.dtype = np.dtype(dtype)
        self.shuffle = bool(shuffle)
        self.seed = check_integer("seed", seed, minimum=0)
        self.drop_last = bool(drop_last)
        self.prefetch = check_integer("prefetch", prefetch, minimum=1)
        self._source: LoaderSource = resolve_source(
            source, cells=cells, gene_order=gene_order, storage_options=storage_options, cache_dir=cache_dir,
            verify=verify_obs, threads=threads, join=join, var_key=var_key, keys=keys, label=label,
        )  # fmt: skip
        self.block_size: int | str = _block_size(block_size)
        default_buffer = max(DEFAULT_BUFFER_BATCHES * self.batch_size, DEFAULT_MIN_BUFFER)
        self.buffer_size = check_integer(
            "buffer_size", default_buffer if buffer_size is None else buffer_size, minimum=1
        )
        group_tiles = _default_group_tiles(self.dataset) if group_tiles is None else group_tiles
        self.group_tiles = check_integer("group_tiles", group_tiles, minimum=0)
        self.rank, self.world_size = _rank_and_world_size(rank, world_size)
        self.obs_columns = check_names("obs_columns", obs_columns, of="column names")
        self._obs_store = self._open_obs() if self.obs_columns else None
        if self.block_size == CHUNK_BLOCKS:
            self._blocks = blocks_between(self._source.chunk_bounds(), self._source.tile_bounds())
        else:
            self._blocks = make_blocks(self._source.tile_bounds(), int(self.block_size))
        self.weights = self._source.block_weights(weights, self._blocks)
        self.epoch = 0
        self._batches_done = 0  # positions of this epoch's order given (by this object's iteration)
        self._resume_at = 0  # where the next iteration starts (set by load_state_dict)
        self._order_shares = 0  # shares of this epoch's order (workers it was started with); 0: not started
        self._tiles_held_peak = 0  # the most whole tiles held at once by tile groups' fetches (a statistic)

    # ------------------------------------------------------------------ properties

    @property
    def dataset(self) -> RowSource:
        """The dataset read, in the gene order of the batches (or the collection of datasets)."""
        return self._source.dataset

    @property
    def n_cells(self) -> int:
        """Cells selected (over all ranks)."""
        return self._source.n_cells

    @property
    def n_genes(self) -> int:
        """Columns of each batch's X."""
        genes = self._source.genes
        return self.dataset.n_genes if genes is None else int(genes.shape[0])

    @property
    def obs_categories(self) -> dict[str, tuple[Any, ...]]:
        """The categories of each categorical obs column asked for (``Batch.obs`` holds their codes).

        A collection's ``"dataset"`` column has the datasets' names (``keys``) for categories. :meth:`obs_frame`
        turns a batch's codes into these names.
        """
        if self._obs_store is None:
            return {}
        if isinstance(self._obs_store, CollectionObs):
            return {
                name: self._obs_store.categories[name]
                for name in self.obs_columns
                if name in self._obs_store.categories
            }
        schema = self._obs_store.schema
        return {
            name: tuple(schema.column(name).categories or ())
            for name in self.obs_columns
            if schema.column(name).kind == "category"
        }

    def obs_frame(self, batch: Batch) -> pd.DataFrame:
        """A batch's obs as a pandas DataFrame, categorical columns by their names: to read, count or print.

        ``batch.obs`` holds the integer codes of a categorical column (what a model's labels want); here each
        one is a ``pandas.Categorical`` of the categories :attr:`obs_categories` lists; the other columns are as in
        ``batch.obs``. For a collection, ``obs_frame(batch)["dataset"]`` names each cell's dataset.

        Parameters
        ----------
        batch
            A batch of this loader.

        Returns
        -------
        pandas.DataFrame
            One row per cell of the batch, indexed by the cells' numbers (``batch.index``), one column per obs
            column asked for (``obs_columns``), in that order.
        """
        import pandas as pd

        categories = self.obs_categories
        columns = {
            name: pd.Categorical.from_codes(values, dtype=pd.CategoricalDtype(list(categories[name])))
            if name in categories
            else values
            for name, values in batch.obs.items()
        }
        return pd.DataFrame(columns, index=pd.Index(batch.index, name="cell"))

    def __len__(self) -> int:
        """Batches this rank gets per epoch."""
        return self._plan().n_batches

    def __repr__(self) -> str:
        return (
            f"CellLoader({self.dataset.url!r}, n_cells={self.n_cells}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, output={self.output!r}, rank={self.rank}/{self.world_size})"
        )

    # ------------------------------------------------------------------ epochs and state

    def set_epoch(self, epoch: int) -> None:
        """Use the order of epoch ``epoch`` from the next iteration on (and start it from its first batch).

        It reaches the ``DataLoader`` workers of :meth:`dataloader` too, those started for the next
        iteration and those kept from earlier ones (``persistent_workers=True``).
        """
        self.epoch = check_integer("epoch", epoch, minimum=0)
        self._batches_done = 0
        self._resume_at = 0
        self._order_shares = 0
        self._publish()

    def _publish(self) -> None:
        """Tell this loader's ``DataLoader`` workers where the next iteration starts (through shared memory).

        The epoch, the position to start from and the shares of the epoch's order (0: the workers' number).
        """
        shared = self.__dict__.get("_shared")
        if shared is not None:
            shared[:] = [self.epoch, self._resume_at, self._order_shares]

    def _follow(self) -> tuple[int, int]:
        """In a ``DataLoader`` worker: take up the epoch the main process published; the start and the shares."""
        shared = self.__dict__.get("_shared")
        if shared is None:
            return self._resume_at, self._order_shares
        self.epoch, start, shares = (int(value) for value in shared[:])
        return start, shares

    def _begin(self, n_parts: int) -> int:
        """Start an iteration in this process, given by ``n_parts`` in turn; the position it starts from.

        An iteration from the epoch's first batch fixes the epoch's order to ``n_parts`` shares; one resumed
        keeps the order of the state it resumes.
        """
        start = self._resume_at
        if start == 0:
            self._order_shares = max(1, n_parts)
        self._publish()
        self._resume_at = 0
        self._batches_done = start
        return start

    def __getstate__(self) -> dict[str, Any]:
        """The loader's settings; the state shared with ``DataLoader`` workers only to a process being started."""
        import multiprocessing.context

        state = self.__dict__.copy()
        if state.get("_shared") is not None and multiprocessing.context.get_spawning_popen() is None:
            state["_shared"] = None  # a shared value can only go to a process as it starts
        return state

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: its epoch and the batches given in it, with what identifies its plan.

        Load it into a new loader made with the same arguments (:meth:`load_state_dict`): its next iteration
        yields exactly the batches that this one had not yet given in the epoch, in the same order. The
        batches are counted as the training loop gets them, from the loader itself or from its
        :meth:`dataloader` (with or without workers); ``workers`` is the number of shares of the epoch's
        order (the ``DataLoader`` workers it started with, or 1), which the resumed run keeps whatever its own.
        """
        return {
            "epoch": self.epoch,
            "batches_done": self._batches_done,
            "workers": max(1, self._order_shares),
            "plan": self._plan_digest(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next iteration starts after the batches it had yielded.

        Raises
        ------
        ValueError
            If the state comes from a loader with other cells, batches, seed or sharding.
        """
        if not isinstance(state, dict) or not {"epoch", "batches_done", "plan"} <= set(state):
            msg = "state must be a dict from CellLoader.state_dict() (with epoch, batches_done and plan)"
            raise InvalidValueError(msg)
        if state["plan"] != self._plan_digest():
            msg = (
                "this state comes from a loader with other settings (cells, batch_size, seed, block_size, "
                "buffer_size, group_tiles, drop_last, shuffle or rank/world_size): make the loader as before to "
                "resume"
            )
            raise InvalidValueError(msg)
        done = int(state["batches_done"])
        if not 0 <= done <= len(self):
            msg = f"batches_done must be 0 .. {len(self)}, got {done}"
            raise InvalidValueError(msg)
        shares = check_integer(
            "workers", state.get("workers", 1), minimum=1
        )  # states without it: one share (no workers)
        self.epoch = check_integer("epoch", state["epoch"], minimum=0)
        self._batches_done = self._resume_at = done
        self._order_shares = shares if done else 0
        self._publish()

    # ------------------------------------------------------------------ iterating

    def __iter__(self) -> Iterator[Batch]:
        worker = _torch_worker()
        if worker is None:  # iterated in this process: every position left, counted here
            part, n_parts = 0, 1
            start, shares = self._begin(1), self._order_shares
        else:  # a DataLoader worker: every n-th position left (the DataLoader counts them, in the main process)
            part, n_parts = worker
            start, shares = self._follow()
            shares = shares if start else n_parts  # from the epoch's start: one share per worker
        plan = self._plan()
        streams, turns = part_of_order(plan.n_batches, shares, start, part, n_parts)
        if not streams:  # no batch left: no cells selected, or a state saved after the epoch's last batch
            return
        # Windows read at once share the decoding threads (and DataLoader workers share the CPUs): on few cores
        # each window is read on its own thread (measured on 2 cores: 1.3x the cells/s of two windows each
        # fanning out to the shared pool).
        threads = max(1, (self.dataset.threads or default_threads()) // (self.prefetch * n_parts * len(streams)))
        for batch in self._in_turns(plan, streams, turns, threads):
            self._batches_done += 1
            yield batch

    def _in_turns(self, plan: EpochPlan, streams: list[Stream], turns: np.ndarray, threads: int) -> Iterator[Batch]:
        """The streams' batches, taken in ``turns``: each stream read ahead on its own."""
        runs = [self._stream(plan, stream, threads) for stream in streams]
        try:
            for turn in turns.tolist():
                yield next(runs[turn])
        finally:
            for run in runs:
                run.close()

    def _stream(self, plan: EpochPlan, stream: Stream, threads: int) -> Generator[Batch, None, None]:
        """A stream's batches: its run's windows read through, only the cells of the stream's batches decoded."""
        wanted = np.zeros(stream.end - stream.first, dtype=bool)
        wanted[stream.batches - stream.first] = True
        yield from self._batches(plan, stream.first, stream.end, threads, None if wanted.all() else wanted)

    def _batches(
        self, plan: EpochPlan, first: int, end: int, threads: int, wanted: np.ndarray | None = None
    ) -> Iterator[Batch]:
        """Batches ``first .. end - 1`` of ``plan``, windows read ahead on background threads (``threads`` each).

        ``wanted``: which of them to give (``wanted[b - first]``), the cells of the others neither decoded nor
        given (a process resuming an epoch with other ``DataLoader`` workers than it was started with takes
        every few batches of a share); None: all.
        """
        if end <= first:
            return
        start_cell, stop_cell = first * self.batch_size, min(end * self.batch_size, plan.n_yielded_cells)
        windows = plan.windows(start_cell)
        fetches = self._tile_fetches(plan, windows)
        pool = ThreadPoolExecutor(max_workers=min(self.prefetch, len(windows)), thread_name_prefix="deltacells-load")
        ahead: deque[Future[list[_Piece]]] = deque()
        todo = iter(enumerate(windows))

        def read(k: int, span: tuple[int, int]) -> list[_Piece]:
            if fetches is None:
                return self._read_window(plan, *span, start_cell, stop_cell, threads, wanted)
            try:
                return self._read_window(plan, *span, start_cell, stop_cell, threads, wanted, fetches.fetched)
            finally:
                fetches.done(k)

        def submit(k: int, span: tuple[int, int]) -> Future[list[_Piece]]:
            if fetches is not None:  # the tiles of this window and of the next few are fetched (or on their way)
                fetches.start(k + 1 + self.prefetch)
            return pool.submit(read, k, span)

        try:
            for k, span in todo:
                ahead.append(submit(k, span))
                if len(ahead) >= self.prefetch:
                    break
            pending = _Pending()
            while ahead:
                pieces = ahead.popleft().result()
                upcoming = next(todo, None)
                if upcoming is not None:
                    ahead.append(submit(*upcoming))
                pending.extend(pieces)
                while pending.n_cells >= self.batch_size or (not ahead and pending.n_cells):
                    yield self._finish(*pending.take(self.batch_size))
        finally:
            for future in ahead:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            if fetches is not None:
                fetches.close()
                self._tiles_held_peak = max(self._tiles_held_peak, fetches.peak)

    def _tile_fetches(self, plan: EpochPlan, windows: list[tuple[int, int]]) -> TileFetches | None:
        """Whole-tile fetches shared by the windows, with tile groups on object storage; else None.

        None too when no tile is read by two windows (blocks of whole tiles): each window fetches its own.
        """
        if not plan.group_tiles or not plan.shuffle or self.dataset.is_local or not windows:
            return None
        window_tiles = [plan.window_tiles(*span) for span in windows]
        reads = sum(tiles.shape[0] for tiles in window_tiles)
        if reads == np.unique(np.concatenate(window_tiles)).shape[0]:  # no tile shared
            return None
        return TileFetches(self.dataset.submit_tile_fetch, window_tiles)

    def _read_window(
        self,
        plan: EpochPlan,
        first_range: int,
        end_range: int,
        start_cell: int,
        stop_cell: int,
        threads: int,
        wanted: np.ndarray | None = None,
        fetched: Callable[[int], Future[ReadBuffer] | None] | None = None,
    ) -> list[_Piece]:
        """Read and decode one window's cells of stream cells ``start_cell .. stop_cell - 1``, shuffled.

        ``threads`` decode it (the CPUs shared among the windows read at once, see :meth:`__iter__`);
        ``wanted`` says which batches from ``start_cell`` on are read (see :meth:`_batches`; None: all);
        ``fetched`` gives the fetches of tiles being read whole (:class:`TileFetches`), if any.

        They come as pieces that never cross a batch's edge in the stream (each its own matrix, so a
        batch is a piece, or a few joined), with their cell numbers and obs values.
        """
        window = plan.window(first_range, end_range)
        n = window.positions.shape[0]
        lo, hi = max(start_cell - window.offset, 0), min(stop_cell - window.offset, n)
        if hi <= lo:
            return []
        batch_of = (window.offset + np.arange(lo, hi, dtype=np.int64)) // self.batch_size  # in the stream
        positions = window.positions[lo:hi]
        if wanted is not None:
            kept = wanted[batch_of - start_cell // self.batch_size]
            positions, batch_of = positions[kept], batch_of[kept]
            if positions.shape[0] == 0:
                return []
        cells = self._source.cell_numbers(positions)
        # Where the stream's batches start: one piece per batch (or part of one, at the window's edges).
        cuts = np.concatenate(([0], np.flatnonzero(batch_of[1:] != batch_of[:-1]) + 1, [cells.shape[0]]))
        # Each chunk is read once per epoch: past the tile cache, decoded straight into each batch's arrays.
        # Rows made dense next need not have their columns sorted.
        sort = self.output in SPARSE_OUTPUTS or self._source.genes is not None
        matrices = self.dataset.read_row_batches(
            cells, cuts, dtype=self.dtype, sort_columns=sort, threads=threads, fetched=fetched
        )
        if self._source.genes is not None:
            matrices = [matrix[:, self._source.genes] for matrix in matrices]
        obs = {}
        if self._obs_store is not None:
            for name in self.obs_columns:
                values = self._obs_store.take(name, cells)
                obs[name] = np.array(values.codes) if hasattr(values, "codes") else np.asarray(values)  # writable
        return [
            _Piece(matrix, cells[a:b], {k: v[a:b] for k, v in obs.items()})
            for matrix, a, b in zip(matrices, cuts[:-1].tolist(), cuts[1:].tolist(), strict=True)
        ]

    def _finish(self, matrix: sparse.csr_matrix, index: np.ndarray, obs: dict[str, np.ndarray]) -> Batch:
        return Batch(convert(matrix, self.output), index, obs)

    # ------------------------------------------------------------------ torch

    def to_torch(self) -> Any:
        """The loader as a torch ``IterableDataset`` (``deltacells.loader.CellDataset``) yielding its batches.

        torch's ``DataLoader`` takes a dataset that is not an ``IterableDataset`` for a map-style one; this one
        iterates the loader (not a copy of it), and its length is ``len(self)``. It pickles to the loader's
        settings, so it also serves ``DataLoader`` workers started with ``multiprocessing_context="spawn"``.
        torch must be installed (else an ``ImportError``).
        """
        try:
            from deltacells.loader._torch import CellDataset
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != "torch":
                raise
            msg = "CellLoader.to_torch() and .dataloader() need torch, which is not installed: pip install torch"
            raise ImportError(msg) from exc
        return CellDataset(self)

    def dataloader(self, **kwargs: Any) -> Any:
        """A torch ``DataLoader`` over the loader's batches: ``DataLoader(self.to_torch(), batch_size=None)``.

        Each worker process takes a contiguous share of the rank's batches: together they yield each batch
        once per epoch, each a :class:`~deltacells.Batch` as this loader makes it (the ``DataLoader``
        interleaves the workers' batches). Its length is ``len(self)``. Call :meth:`set_epoch` before each
        epoch's ``iter()``: it reaches the workers, also those kept between epochs (``persistent_workers``),
        as does :meth:`load_state_dict`. The ``DataLoader`` (a ``deltacells.loader.CellDataLoader``) counts
        the batches as it gives them, so :meth:`state_dict` says where the epoch is. torch must be
        installed (else an ``ImportError``).

        Parameters
        ----------
        **kwargs
            Other arguments of ``DataLoader`` (``num_workers``, ``multiprocessing_context``, ``pin_memory``,
            ``persistent_workers``, ``prefetch_factor``...); not ``batch_size``, ``sampler`` or ``shuffle``,
            which the loader's own settings replace. Not ``in_order=False`` with workers either: batches
            would come in the order the workers finish them, which no state could resume.

        Raises
        ------
        InvalidValueError
            For ``in_order=False`` with ``num_workers`` above 0.

        Examples
        --------
        >>> loader = deltacells.CellLoader("atlas.deltacells", batch_size=256, output="torch")  # doctest: +SKIP
        >>> batches = loader.dataloader(num_workers=2, multiprocessing_context="spawn")  # doctest: +SKIP
        >>> for epoch in range(3):  # doctest: +SKIP
        ...     loader.set_epoch(epoch)
        ...     for batch in batches:
        ...         train_step(batch.X)
        """
        if kwargs.get("num_workers", 0) > 0 and not kwargs.get("in_order", True):
            msg = (
                "in_order=False gives the workers' batches in the order they finish, not in an order the loader "
                "knows: the epoch would differ from run to run and state_dict() could not resume it; leave "
                "in_order at True (raise prefetch_factor or prefetch if workers wait on each other)"
            )
            raise InvalidValueError(msg)
        dataset = self.to_torch()
        from deltacells.loader._torch import CellDataLoader

        return CellDataLoader(dataset, batch_size=None, **kwargs)

    # ------------------------------------------------------------------ internals

    def _plan(self) -> EpochPlan:
        return EpochPlan(
            self._blocks, epoch=self.epoch, seed=self.seed, shuffle=self.shuffle, batch_size=self.batch_size,
            buffer_size=self.buffer_size, drop_last=self.drop_last, shard=self.rank, n_shards=self.world_size,
            group_tiles=self.group_tiles, weights=self.weights,
        )  # fmt: skip

    def _plan_digest(self) -> str:
        """What fixes the batches, apart from the epoch: cells, sizes, seed, sharding."""
        digest = hashlib.sha256()
        digest.update(repr((self.dataset.n_cells, self.dataset.tile_cells.tobytes())).encode())
        digest.update(b"all" if self._source.cells is None else self._source.cells.tobytes())
        digest.update(self._blocks.starts.tobytes())  # chunk blocks follow the tiles' chunk tables
        settings = (self.batch_size, self.seed, self.block_size, self.buffer_size, self.drop_last, self.shuffle)
        groups = (self.group_tiles,) if self.group_tiles else ()  # states from before groups stay valid
        digest.update(repr((*settings, self.rank, self.world_size, *groups)).encode())
        if self.weights is not None:
            digest.update(self.weights.group_of_block.tobytes() + self.weights.shares.tobytes())
        return digest.hexdigest()

    def _open_obs(self) -> Any:
        dataset = self.dataset
        if isinstance(dataset, Collection):
            source = self._source
            return CollectionObs(
                dataset, source.keys or [], label=source.label, columns=self.obs_columns, names=False,
                cache_dir=source.cache_dir, verify=source.verify,
            )  # fmt: skip
        assert isinstance(dataset, Dataset)  # the two kinds of row source
        if dataset.manifest.n_obs_shards == 0:
            msg = f"obs_columns {list(self.obs_columns)} were asked for, but {dataset.store.url} has no obs"
            raise InvalidValueError(msg)
        store = ObsStore(dataset.store, dataset.manifest, cache_dir=self._source.cache_dir, verify=self._source.verify)
        store.localize(self.obs_columns)  # copied into the cache now, not during training
        return store


class _Piece(NamedTuple):
    """Consecutive cells of the stream, within one batch: their rows, cell numbers and obs values."""

    matrix: sparse.csr_matrix
    cells: np.ndarray
    obs: dict[str, np.ndarray]


class _Pending:
    """Pieces of decoded windows waiting to be made into batches (a batch is one piece, or a few joined)."""

    def __init__(self) -> None:
        self._pieces: deque[_Piece] = deque()
        self.n_cells = 0

    def extend(self, pieces: list[_Piece]) -> None:
        """Queue a window's pieces."""
        for piece in pieces:
            self._pieces.append(piece)
            self.n_cells += piece.cells.shape[0]

    def take(self, size: int) -> tuple[sparse.csr_matrix, np.ndarray, dict[str, np.ndarray]]:
        """The first ``size`` cells queued (or all of them): a batch's rows, cell numbers and obs values."""
        parts: list[_Piece] = []
        need = size
        while self._pieces and need:
            piece = self._pieces.popleft()
            n = piece.cells.shape[0]
            if n > need:  # pieces end at the stream's batch edges; kept for any other cut
                rest = _Piece(piece.matrix[need:n], piece.cells[need:], _rows(piece.obs, need, n))
                self._pieces.appendleft(rest)
                piece = _Piece(piece.matrix[:need], piece.cells[:need], _rows(piece.obs, 0, need))
                n = need
            parts.append(piece)
            need -= n
            self.n_cells -= n
        if len(parts) == 1:
            return parts[0]
        matrix = sparse.vstack([part.matrix for part in parts], format="csr")
        if all(part.matrix.has_sorted_indices for part in parts):
            matrix.has_sorted_indices = True  # vstack keeps each row as it was
        cells = np.concatenate([part.cells for part in parts])
        obs = {k: np.concatenate([part.obs[k] for part in parts]) for k in parts[0].obs}
        return matrix, cells, obs


def _rows(obs: dict[str, np.ndarray], lo: int, hi: int) -> dict[str, np.ndarray]:
    return {k: v[lo:hi] for k, v in obs.items()}


def _torch_worker() -> tuple[int, int] | None:
    """``(id, num_workers)`` inside a torch DataLoader worker process, else ``None`` (torch is never imported)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    info = torch.utils.data.get_worker_info()
    return None if info is None else (int(info.id), int(info.num_workers))


def _rank_and_world_size(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """The shard of this process: as given, else torch.distributed's when initialised, else ``(0, 1)``."""
    if rank is None and world_size is None:
        torch = sys.modules.get("torch")
        distributed = getattr(torch, "distributed", None) if torch is not None else None
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            return int(distributed.get_rank()), int(distributed.get_world_size())
        return 0, 1
    if rank is None or world_size is None:
        msg = "pass both rank and world_size, or neither (then torch.distributed's, if initialised, are used)"
        raise InvalidValueError(msg)
    world_size = check_integer("world_size", world_size, minimum=1)
    rank = check_integer("rank", rank, minimum=0)
    if rank >= world_size:
        msg = f"rank must be 0 .. world_size - 1 ({world_size - 1}), got {rank}"
        raise InvalidValueError(msg)
    return rank, world_size


def _default_group_tiles(dataset: RowSource) -> int:
    """Tiles per group by default: none on a local disk; on object storage 64, or as many as 256 MiB hold."""
    if dataset.is_local:
        return 0
    tile_bytes = np.asarray(dataset.tile_bytes, dtype=np.float64)
    mean = float(tile_bytes.mean()) if tile_bytes.shape[0] else 1.0
    return int(min(DEFAULT_REMOTE_GROUP_TILES, max(1, DEFAULT_REMOTE_GROUP_BYTES // max(mean, 1.0))))


def _block_size(value: Any) -> int | str:
    """``"chunk"`` (from None or ``"chunk"``) or a positive int."""
    if value is None or value == CHUNK_BLOCKS:
        return CHUNK_BLOCKS
    if isinstance(value, str):
        msg = f"block_size must be 'chunk' (blocks of one chunk of a tile) or a positive int, got {value!r}"
        raise InvalidValueError(msg)
    return check_integer("block_size", value, minimum=1)
