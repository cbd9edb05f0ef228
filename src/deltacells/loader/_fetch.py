"""Whole tiles fetched once for the windows of a stream that read them, and kept until the last one has.

On object storage a request costs a round trip, and a window reads a chunk or two of each of dozens of tiles:
read in ranges, that is a request per chunk, every window. With tile groups (see
:mod:`deltacells.loader._plan`), a group's tiles are read by a few consecutive windows only; each tile is then
fetched whole with one request, a window or more before the first window that reads it, and its bytes are
kept (compressed) until the last window of the stream that reads it is decoded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from deltacells.storage import ReadBuffer

__all__ = ["TileFetches"]


class TileFetches:
    """The whole-tile fetches of one stream of windows, shared by the windows that read each tile.

    Parameters
    ----------
    submit
        Starts fetching a tile whole (:meth:`deltacells.Dataset.submit_tile_fetch`).
    window_tiles
        The tiles each window of the stream reads (sorted, each once), in stream order.
    """

    def __init__(self, submit: Callable[[int], Future[ReadBuffer]], window_tiles: list[np.ndarray]) -> None:
        self._submit = submit
        self._window_tiles = [tiles.tolist() for tiles in window_tiles]
        self._uses: dict[int, int] = {}
        for tiles in self._window_tiles:
            for tile in tiles:
                self._uses[tile] = self._uses.get(tile, 0) + 1
        self._futures: dict[int, Future[ReadBuffer]] = {}
        self._started = 0  # windows whose tiles' fetches have started
        self._lock = threading.Lock()
        self.peak = 0  # the most tiles held at once

    @property
    def held(self) -> int:
        """Tiles fetched or being fetched, not yet dropped."""
        with self._lock:
            return len(self._futures)

    def start(self, end: int) -> None:
        """Start fetching the tiles of windows up to ``end - 1`` not fetched yet (many requests in flight)."""
        with self._lock:
            while self._started < min(end, len(self._window_tiles)):
                for tile in self._window_tiles[self._started]:
                    if tile not in self._futures and self._uses.get(tile, 0) > 0:
                        self._futures[tile] = self._submit(tile)
                self._started += 1
            self.peak = max(self.peak, len(self._futures))

    def fetched(self, tile: int) -> Future[ReadBuffer] | None:
        """The fetch of tile ``tile``'s bytes, or None if it was not started (the reader then reads it itself)."""
        with self._lock:
            return self._futures.get(tile)

    def done(self, window: int) -> None:
        """Window ``window`` has read its tiles: drop those that no later window reads."""
        with self._lock:
            for tile in self._window_tiles[window]:
                left = self._uses[tile] = self._uses[tile] - 1
                if left <= 0:
                    self._futures.pop(tile, None)

    def close(self) -> None:
        """Cancel the fetches not yet running and drop every tile."""
        with self._lock:
            futures, self._futures = list(self._futures.values()), {}
            self._uses.clear()
        for future in futures:
            future.cancel()
