"""``TileFetches``: each tile fetched once for the windows of a stream, started ahead, dropped after its last."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from deltacells.loader._fetch import TileFetches


class Submitted:
    """A stand-in for ``Dataset.submit_tile_fetch``: records the tiles asked for; their futures never run."""

    def __init__(self) -> None:
        self.tiles: list[int] = []

    def __call__(self, tile: int) -> Future[bytes]:
        self.tiles.append(tile)
        return Future()


def test_each_tile_is_fetched_once_and_dropped_after_its_last_window():
    submit = Submitted()
    windows = [np.array([0, 1]), np.array([1, 2]), np.array([3]), np.array([0, 3])]
    fetches = TileFetches(submit, windows)
    assert fetches.fetched(0) is None  # nothing started yet
    fetches.start(2)  # windows 0 and 1
    assert submit.tiles == [0, 1, 2]
    fetches.start(2)  # again: nothing new
    assert submit.tiles == [0, 1, 2]
    first = fetches.fetched(1)
    assert first is not None
    fetches.done(0)
    assert fetches.fetched(1) is first  # window 1 reads it too
    fetches.done(1)
    assert fetches.fetched(1) is None and fetches.fetched(2) is None  # no later window reads them
    assert fetches.fetched(0) is not None  # window 3 does
    fetches.start(10)
    assert submit.tiles == [0, 1, 2, 3]
    assert fetches.held == 2
    fetches.done(2)
    fetches.done(3)
    assert fetches.held == 0


def test_close_cancels_what_has_not_run():
    submit = Submitted()
    fetches = TileFetches(submit, [np.array([5, 6]), np.array([7])])
    fetches.start(1)
    futures = [fetches.fetched(5), fetches.fetched(6)]
    fetches.close()
    assert all(future is not None and future.cancelled() for future in futures)
    assert fetches.held == 0
    fetches.start(2)  # after close nothing is fetched
    assert submit.tiles == [5, 6] and fetches.held == 0


def test_the_peak_of_tiles_held():
    submit = Submitted()
    fetches = TileFetches(submit, [np.array([0, 1]), np.array([2]), np.array([3, 4, 5])])
    fetches.start(2)
    fetches.done(0)
    fetches.start(3)
    assert fetches.held == 4 and fetches.peak == 4  # 2 and 3 .. 5: tiles 0 and 1 were dropped first
