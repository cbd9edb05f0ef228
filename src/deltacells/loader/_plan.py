"""An epoch's plan: which cells each batch of each shard holds, computed from the seed and epoch alone.

No data is read to make a plan, and the plan is the same in every process, which is what makes the loader
deterministic, shardable and resumable:

1. **Blocks.** The selected cells are cut into blocks: the selected cells of each chunk of each tile (so
   that a block decodes one chunk, and each chunk is decoded once per epoch), or runs of at most
   ``block_size`` consecutive selected cells within one tile.
2. **Epoch order.** The blocks are put in a random order drawn from ``(seed, epoch)`` (or kept in order
   without shuffling), and the resulting stream of cells is cut into ``world_size`` shards of equal numbers of
   cells (a block on a boundary is split); rank ``r`` takes shard ``r``. With tile groups, the tiles are
   put in a random order and cut into groups of ``group_tiles``, and the blocks come group after group, each
   group's in a random order: a group's tiles are read by a few consecutive windows only, so that each can
   be fetched whole once and kept while they read it (on object storage, one request per tile and epoch).
3. **Windows.** Within a shard, consecutive blocks are grouped into equal windows of at most about
   ``buffer_size`` cells; the cells of a window are shuffled together (read at once, they mix cells of many
   tiles).
4. **Batches.** The shard's stream of shuffled cells is cut into batches of ``batch_size`` (a batch may
   span two windows); the last one is short, or dropped with ``drop_last``, which also makes every
   rank's number of batches the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["BlockWeights", "Blocks", "EpochPlan", "Window", "blocks_between", "make_blocks"]


@dataclass(frozen=True)
class Blocks:
    """Runs of selected cells, each within one tile: positions ``[starts[i], stops[i])`` in the selection.

    ``tiles[i]`` is the tile of block ``i``.
    """

    starts: np.ndarray
    stops: np.ndarray
    tiles: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        """Cells in each block."""
        lengths: np.ndarray = self.stops - self.starts
        return lengths

    def __len__(self) -> int:
        return int(self.starts.shape[0])


def make_blocks(tile_bounds: np.ndarray, block_size: int) -> Blocks:
    """Cut each tile's run of selected cells into blocks of at most ``block_size``.

    Parameters
    ----------
    tile_bounds
        ``int64[n_tiles + 1]``: tile ``t``'s selected cells are positions ``tile_bounds[t] .. tile_bounds[t + 1]``
        of the selection (for a selection of all cells, the tiles' first cells and the number of cells).
    block_size
        The most cells in a block (at least 1).
    """
    lo = np.asarray(tile_bounds[:-1], dtype=np.int64)
    hi = np.asarray(tile_bounds[1:], dtype=np.int64)
    per_tile = -(-(hi - lo) // block_size)  # ceil; 0 for a tile with no selected cell
    tile = np.repeat(np.arange(lo.shape[0]), per_tile)
    first_block = np.cumsum(per_tile) - per_tile
    within = np.arange(tile.shape[0], dtype=np.int64) - np.repeat(first_block, per_tile)
    starts = lo[tile] + within * block_size
    return Blocks(starts, np.minimum(starts + block_size, hi[tile]), tile.astype(np.int64))


def blocks_between(bounds: np.ndarray, tile_bounds: np.ndarray) -> Blocks:
    """Blocks from consecutive ``bounds`` (increasing selection positions, repeats allowed): one per run.

    For blocks that follow the tiles' chunks (the bounds of :meth:`LoaderSource.chunk_bounds`), so that
    each block decodes one chunk; bounds with no cell between them make no block. ``tile_bounds`` are the
    tiles' (as for :func:`make_blocks`; each among ``bounds``), which tell each block's tile.
    """
    bounds = np.asarray(bounds, dtype=np.int64)
    keep = bounds[1:] > bounds[:-1]
    starts = bounds[:-1][keep]
    tiles = np.searchsorted(np.asarray(tile_bounds, dtype=np.int64), starts, side="right") - 1
    return Blocks(starts, bounds[1:][keep], tiles.astype(np.int64))


@dataclass(frozen=True)
class BlockWeights:
    """A collection's weights: the dataset of each block, and each dataset's share of an epoch (summing to 1)."""

    group_of_block: np.ndarray
    shares: np.ndarray


@dataclass(frozen=True)
class Window:
    """Cells read at once and shuffled together: selection positions, and where they start in the shard."""

    positions: np.ndarray
    offset: int


@dataclass(frozen=True)
class EpochPlan:
    """The batches of one shard in one epoch (see the module's description).

    Parameters
    ----------
    blocks
        The selection's blocks, in selection order.
    epoch, seed
        What the random orders are drawn from.
    shuffle
        Shuffle blocks and the cells within each window (else every cell comes in selection order).
    batch_size, buffer_size
        Cells per batch; cells per window (about: whole blocks).
    drop_last
        Drop each shard's last, short batch, and give every shard the same number of batches.
    shard, n_shards
        Which shard this plan is for, and how many there are.
    group_tiles
        Tiles per group (0: no groups, every block of the epoch shuffled together; see the module's
        description). With ``shuffle`` only; one group holding every tile orders the blocks as no groups.
    weights
        A collection's weights (None: every cell once). The epoch then holds as many cells as the selection,
        dataset ``g``'s ``shares[g]`` of them (rounded to whole cells, largest remainders first): its blocks
        in a random order, repeated in new random orders as often as needed, the last one cut; the runs of
        all datasets are then put in one random order (tile groups do not apply).
    """

    blocks: Blocks
    epoch: int
    seed: int
    shuffle: bool
    batch_size: int
    buffer_size: int
    drop_last: bool
    shard: int
    n_shards: int
    group_tiles: int = 0
    weights: BlockWeights | None = None

    def _weighted_stream(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The runs of an epoch drawn by the weights (see the class's description): starts, stops, tiles."""
        weights, blocks = self.weights, self.blocks
        assert weights is not None
        lengths = blocks.lengths
        total = int(lengths.sum())
        raw = weights.shares * total
        quotas = np.floor(raw).astype(np.int64)
        extra = total - int(quotas.sum())
        quotas[np.argsort(-(raw - quotas), kind="stable")[:extra]] += 1
        rng = self._rng(0)
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for group in np.flatnonzero(quotas).tolist():
            quota = int(quotas[group])
            mine = np.flatnonzero(weights.group_of_block == group)
            if not self.shuffle:
                rounds = [mine] * -(-quota // int(lengths[mine].sum()))
            else:
                rounds = [rng.permutation(mine) for _ in range(-(-quota // int(lengths[mine].sum())))]
            order = np.concatenate(rounds)
            ends = np.cumsum(lengths[order])
            last = int(np.searchsorted(ends, quota, side="left"))
            chosen = order[: last + 1]
            stops = blocks.stops[chosen].copy()
            stops[-1] -= int(ends[last]) - quota  # the last block cut to the quota
            parts.append((blocks.starts[chosen], stops, blocks.tiles[chosen]))
        starts, stops, tiles = (np.concatenate(arrays) for arrays in zip(*parts, strict=True))
        if self.shuffle:
            mixed = rng.permutation(starts.shape[0])
            starts, stops, tiles = starts[mixed], stops[mixed], tiles[mixed]
        return starts, stops, tiles

    def _block_order(self) -> np.ndarray:
        """The blocks in the epoch's order: random (by tile groups), or as they are without shuffling."""
        n = len(self.blocks)
        if not self.shuffle:
            return np.arange(n)
        rng = self._rng(0)
        tiles = self.blocks.tiles
        n_tiles = int(tiles.max()) + 1 if n else 0
        if not self.group_tiles or n_tiles <= self.group_tiles:  # one group: as without groups
            return rng.permutation(n)
        group_of_tile = rng.permutation(n_tiles) // self.group_tiles
        order = rng.permutation(n)
        return order[np.argsort(group_of_tile[tiles[order]], kind="stable")]

    @cached_property
    def _ranges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The runs of selection positions of this shard, in stream order (blocks cut at the shard's edges).

        Their starts, stops and tiles.
        """
        if self.weights is not None and len(self.blocks):
            starts, stops, tiles = self._weighted_stream()
        else:
            order = self._block_order()
            starts, stops, tiles = self.blocks.starts[order], self.blocks.stops[order], self.blocks.tiles[order]
        ends = np.cumsum(stops - starts)
        total = int(ends[-1]) if ends.shape[0] else 0
        lo, hi = total * self.shard // self.n_shards, total * (self.shard + 1) // self.n_shards
        first = int(np.searchsorted(ends, lo, side="right"))
        last = int(np.searchsorted(ends, hi, side="left")) + 1 if hi > lo else first
        starts, stops, ends = starts[first:last].copy(), stops[first:last].copy(), ends[first:last]
        if starts.shape[0]:
            starts[0] += lo - (ends[0] - (stops[0] - starts[0]))  # cut the first block at the shard's start
            stops[-1] -= ends[-1] - hi  # and the last at its end
        return starts, stops, tiles[first:last]

    @property
    def n_cells(self) -> int:
        """Cells in this shard."""
        starts, stops, _ = self._ranges
        return int((stops - starts).sum())

    @property
    def n_batches(self) -> int:
        """Batches this shard yields."""
        if self.drop_last:
            total = int(self.blocks.lengths.sum())
            return (total // self.n_shards) // self.batch_size  # the smallest shard's full batches
        return -(-self.n_cells // self.batch_size)

    @property
    def n_yielded_cells(self) -> int:
        """Cells in this shard's batches (fewer than :attr:`n_cells` with ``drop_last``)."""
        return min(self.n_cells, self.n_batches * self.batch_size)

    @cached_property
    def _window_of_range(self) -> np.ndarray:
        """The window of each range: the shard's stream cut into ``ceil(n_cells / buffer_size)`` equal windows.

        A range belongs to the window its first cell falls in; windows are of about equal sizes (at most
        ``buffer_size`` cells, plus the rest of a range), so that the last one is not a small remainder whose
        batches would mix fewer blocks.
        """
        starts, stops, _ = self._ranges
        lengths = stops - starts
        offsets = np.cumsum(lengths) - lengths
        total = int(lengths.sum())
        n_windows = max(1, -(-total // self.buffer_size))
        windows: np.ndarray = offsets * n_windows // max(total, 1)
        return windows

    def windows(self, first_cell: int = 0) -> list[tuple[int, int]]:
        """The windows holding stream cells ``first_cell ..`` of the batches: ``(first range, end range)`` each."""
        starts, stops, _ = self._ranges
        if not starts.shape[0]:
            return []
        window = self._window_of_range
        bounds = np.flatnonzero(np.diff(window)) + 1
        edges = np.concatenate(([0], bounds, [starts.shape[0]]))
        lengths = stops - starts
        cell_edges = np.concatenate(([0], np.cumsum(lengths)[edges[1:] - 1]))
        wanted = self.n_yielded_cells
        keep = (cell_edges[1:] > first_cell) & (cell_edges[:-1] < wanted)
        return [(int(edges[i]), int(edges[i + 1])) for i in np.flatnonzero(keep)]

    def window(self, first_range: int, end_range: int) -> Window:
        """The selection positions of a window, in the order they are yielded (shuffled with ``shuffle``)."""
        starts, stops, _ = self._ranges
        lengths = stops[first_range:end_range] - starts[first_range:end_range]
        offset = int((stops[:first_range] - starts[:first_range]).sum())
        positions = np.repeat(starts[first_range:end_range] - np.cumsum(lengths) + lengths, lengths) + np.arange(
            int(lengths.sum()), dtype=np.int64
        )
        if self.shuffle:
            positions = positions[self._rng(1, int(self._window_of_range[first_range])).permutation(positions.shape[0])]
        return Window(positions, offset)

    def window_tiles(self, first_range: int, end_range: int) -> np.ndarray:
        """The tiles a window reads (sorted, each once)."""
        return np.unique(self._ranges[2][first_range:end_range])

    def _rng(self, *stream: int) -> np.random.Generator:
        """A generator drawn from the seed, the epoch and ``stream`` (the same in every process).

        Stream ``(0,)`` orders the blocks (the same for every shard); ``(1, window)`` shuffles one of this
        shard's windows.
        """
        parts = (
            (self.seed, self.epoch, *stream)
            if stream == (0,)
            else (self.seed, self.epoch, *stream, self.shard, self.n_shards)
        )
        return np.random.default_rng(parts)
