"""A small, thread-safe, byte-bounded LRU cache of decoded tiles (shared read-only)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from deltacells.errors import InvalidValueError

if TYPE_CHECKING:
    from deltacells.codec import DecodedTile


class TileCache:
    """Keep the most recently used decoded tiles, up to ``max_bytes`` in all.

    A tile larger than ``max_bytes`` is never kept; ``max_bytes=0`` disables caching.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            msg = f"tile cache size must be >= 0 bytes, got {max_bytes}"
            raise InvalidValueError(msg)
        self.max_bytes = int(max_bytes)
        self._tiles: OrderedDict[int, DecodedTile] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._tiles)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached tiles."""
        return self._bytes

    def get(self, index: int) -> DecodedTile | None:
        """Return tile ``index`` if cached (and mark it as recently used)."""
        with self._lock:
            tile = self._tiles.get(index)
            if tile is not None:
                self._tiles.move_to_end(index)
            return tile

    def put(self, index: int, tile: DecodedTile) -> None:
        """Cache ``tile``, evicting the least recently used ones to stay within the bound."""
        size = tile.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._tiles.pop(index, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._tiles[index] = tile
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._tiles.popitem(last=False)
                self._bytes -= evicted.nbytes

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (one held by a parent thread at the fork would never be released)."""
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Drop every cached tile."""
        with self._lock:
            self._tiles.clear()
            self._bytes = 0
