"""The epoch plan: blocks within tiles, shards that cover every cell once, windows, batches, all from the seed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacells.loader._plan import EpochPlan, make_blocks


def plan(bounds, *, block_size=4, epoch=0, seed=0, shuffle=True, batch_size=5, buffer_size=12, drop_last=False,
         shard=0, n_shards=1, group_tiles=0) -> EpochPlan:  # fmt: skip
    return EpochPlan(
        make_blocks(np.asarray(bounds, dtype=np.int64), block_size), epoch=epoch, seed=seed, shuffle=shuffle,
        batch_size=batch_size, buffer_size=buffer_size, drop_last=drop_last, shard=shard, n_shards=n_shards,
        group_tiles=group_tiles,
    )  # fmt: skip


def stream(p: EpochPlan) -> np.ndarray:
    """The positions the shard yields, in order (the cells of its batches)."""
    windows = [p.window(*span) for span in p.windows()]
    cells = np.concatenate([w.positions for w in windows]) if windows else np.zeros(0, dtype=np.int64)
    offsets = [w.offset for w in windows]
    assert offsets == sorted(offsets)
    return cells[: p.n_yielded_cells]


def test_blocks_stay_within_tiles():
    blocks = make_blocks(np.array([0, 10, 10, 13, 30]), 4)  # tiles of 10, 0, 3 and 17 selected cells
    assert blocks.starts.tolist() == [0, 4, 8, 10, 13, 17, 21, 25, 29]
    assert blocks.stops.tolist() == [4, 8, 10, 13, 17, 21, 25, 29, 30]


def test_without_shuffle_cells_come_in_order():
    p = plan([0, 10, 23, 40], shuffle=False)
    np.testing.assert_array_equal(stream(p), np.arange(40))
    assert p.n_batches == 8


def test_same_seed_and_epoch_same_order_others_differ():
    bounds = [0, 50, 100, 150]
    first = stream(plan(bounds, seed=1, epoch=2))
    np.testing.assert_array_equal(first, stream(plan(bounds, seed=1, epoch=2)))
    assert not np.array_equal(first, stream(plan(bounds, seed=1, epoch=3)))
    assert not np.array_equal(first, stream(plan(bounds, seed=2, epoch=2)))
    np.testing.assert_array_equal(np.sort(first), np.arange(150))


@settings(max_examples=60, deadline=None)
@given(
    tiles=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    block_size=st.integers(1, 9),
    batch_size=st.integers(1, 11),
    buffer_size=st.integers(1, 30),
    n_shards=st.integers(1, 5),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_shards_cover_every_cell_once(tiles, block_size, batch_size, buffer_size, n_shards, drop_last, shuffle, seed):
    bounds = np.concatenate(([0], np.cumsum(tiles)))
    total = int(bounds[-1])
    streams, counts = [], []
    for shard in range(n_shards):
        p = plan(bounds, block_size=block_size, batch_size=batch_size, buffer_size=buffer_size, drop_last=drop_last,
                 shuffle=shuffle, seed=seed, shard=shard, n_shards=n_shards)  # fmt: skip
        cells = stream(p)
        assert cells.shape[0] == p.n_yielded_cells
        assert -(-cells.shape[0] // batch_size) == p.n_batches
        streams.append(cells)
        counts.append(p.n_batches)
    seen = np.concatenate(streams)
    assert np.unique(seen).shape[0] == seen.shape[0]  # disjoint, no repeats
    if drop_last:
        assert len(set(counts)) == 1  # the same number of batches on every shard
        assert seen.shape[0] == counts[0] * batch_size * n_shards
        assert total - seen.shape[0] < n_shards * (batch_size + 1)  # only the tails are dropped
    else:
        np.testing.assert_array_equal(np.sort(seen), np.arange(total))  # every cell exactly once


def test_shards_are_balanced():
    sizes = [plan([0, 1000, 1999], shard=s, n_shards=3).n_cells for s in range(3)]
    assert sum(sizes) == 1999 and max(sizes) - min(sizes) <= 1


def test_windows_after_a_cell_resume_where_asked():
    p = plan([0, 100, 200], batch_size=8, buffer_size=30)
    full = stream(p)
    for first_cell in (0, 8, 40, 96, 192):
        spans = p.windows(first_cell)
        windows = [p.window(*span) for span in spans]
        assert windows[0].offset <= first_cell < windows[0].offset + windows[0].positions.shape[0]
        rest = np.concatenate([w.positions for w in windows])[first_cell - windows[0].offset :]
        np.testing.assert_array_equal(rest, full[first_cell:])


def test_window_cells_mix_several_tiles():
    """With blocks smaller than tiles and a buffer of several blocks, a window holds cells of several tiles."""
    bounds = np.arange(0, 1001, 100)  # 10 tiles of 100 cells
    p = plan(bounds, block_size=10, buffer_size=100, batch_size=20)
    tiles = np.searchsorted(bounds, p.window(*p.windows()[0]).positions, side="right") - 1
    assert np.unique(tiles).shape[0] >= 5


@pytest.mark.parametrize("n_shards", [1, 2, 3])
def test_an_empty_selection_gives_no_batch(n_shards):
    for shard in range(n_shards):
        p = plan([0, 0, 0], shard=shard, n_shards=n_shards)
        assert p.n_batches == 0 and p.windows() == []


@pytest.mark.parametrize("group_tiles", [1, 2, 3])
def test_tile_groups_order_the_blocks_group_by_group(group_tiles):
    """Tiles in a random order, cut into groups; each group's blocks together, in a random order among them."""
    bounds = np.arange(0, 8 * 12 + 1, 12)  # 8 tiles of 12 cells, blocks of 4
    p = plan(bounds, group_tiles=group_tiles, buffer_size=100)
    starts, _, tiles = p._ranges
    n_groups = -(-8 // group_tiles)
    per_group = 3 * group_tiles  # blocks of a whole group
    seen: set[int] = set()
    for g in range(n_groups):
        group = tiles[g * per_group : (g + 1) * per_group]
        assert len(set(group.tolist())) == min(group_tiles, 8 - g * group_tiles)  # whole tiles, each in one group
        assert not seen & set(group.tolist())
        seen |= set(group.tolist())
        assert np.all(np.bincount(group, minlength=8)[list(set(group.tolist()))] == 3)  # every block of each tile
    np.testing.assert_array_equal(np.sort(stream(p)), np.arange(96))
    assert tiles.tolist() != sorted(tiles.tolist())
    np.testing.assert_array_equal(tiles, starts // 12)
    # the order differs by epoch; one group of every tile orders the blocks as no groups
    assert plan(bounds, group_tiles=group_tiles, epoch=1)._ranges[2].tolist() != tiles.tolist()
    np.testing.assert_array_equal(plan(bounds, group_tiles=8)._ranges[0], plan(bounds)._ranges[0])


def test_tile_groups_cut_into_shards_cover_every_cell_once():
    bounds = np.arange(0, 10 * 7 + 1, 7)
    shards = [stream(plan(bounds, group_tiles=3, shard=r, n_shards=3)) for r in range(3)]
    np.testing.assert_array_equal(np.sort(np.concatenate(shards)), np.arange(70))


def test_window_tiles():
    bounds = np.arange(0, 4 * 12 + 1, 12)
    p = plan(bounds, group_tiles=2, buffer_size=24)
    for first, end in p.windows():
        positions = p.window(first, end).positions
        np.testing.assert_array_equal(p.window_tiles(first, end), np.unique(positions // 12))
