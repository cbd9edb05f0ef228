"""A thread-safe, byte-bounded, scan-resistant cache of decoded tiles (whole or partial, shared read-only).

The policy is a *segmented LRU* (SLRU). Entries live in one of two LRU lists:

* **probation**, where every newly decoded tile enters (at its most recently used end);
* **protected**, which a tile reaches when it is asked for again while cached: a hit in probation
  promotes it. Protected holds at most ``PROTECTED_SHARE`` of ``max_bytes``; when a promotion
  overflows it, its least recently used entries are demoted to probation's most recently used end (a
  second chance there before they go).

Eviction takes probation's least recently used entries first, and protected's only when probation holds
nothing else. So a scan over more tiles than fit (``for t, tile in dataset.iter_tiles()``, a full
``read_rows()``), whose tiles are each used once, cycles through probation and leaves the protected
tiles, those a workload came back to, in place, where a plain LRU cache would lose them all.

**Partial tiles.** A cached tile may be *partial* (``tile.complete`` false: only some chunks decoded, see
:func:`deltacells.codec.decode_chunks`). :meth:`TileCache.get` finds a tile only when it holds the cells
asked for (every cell when none are given); a request for more chunks of a cached tile is a miss, after
which the reader caches the tile *grown* by the missing chunks. The cache then treats the tile as asked
for again, and the chunks decoded for the first time as new:

* a grown tile replacing a partial one in probation promotes the old entry (the chunks asked for twice)
  and enters probation itself;
* a grown tile of a tile in protected enters probation beside it; the protected entry stays as it was
  until the grown one is hit (which promotes it in its place) or evicted.

So a scan over a tile a workload keeps reading a few cells of does not turn the small protected entry
into a whole tile there (which would crowd the protected segment and demote the others), and a tile is
held twice only while its grown copy is in probation. :meth:`TileCache.peek` returns the largest entry.

``policy="lru"`` is a plain LRU (one list, one entry a tile, the least recently used goes first), kept to
compare the two (``benchmarks/bench_tile_cache.py``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._checks import check_choice, check_integer

if TYPE_CHECKING:
    from deltacells.codec import DecodedTile

__all__ = ["CACHE_POLICIES", "PROTECTED_SHARE", "TileCache"]

#: The policies of :class:`TileCache`: ``"slru"`` (segmented LRU, the default) and ``"lru"`` (plain LRU).
CACHE_POLICIES = ("slru", "lru")

#: The share of ``max_bytes`` that the protected segment of an SLRU cache may hold.
PROTECTED_SHARE = 0.8


def _holds(tile: Any, cells: np.ndarray | None) -> bool:
    """Whether ``tile`` holds ``cells`` (``None``: every cell, i.e. it is complete)."""
    if cells is None:
        return getattr(tile, "complete", True)
    return bool(tile.holds(cells))


def _grows(old: Any, new: Any) -> bool:
    """Whether ``new`` is ``old`` with more chunks decoded (both say which chunks they hold)."""
    before, after = getattr(old, "chunk_mask", None), getattr(new, "chunk_mask", None)
    if before is None or after is None or before.shape != after.shape:
        return False
    return bool(np.all(after >= before)) and bool(np.any(after > before))


class TileCache:
    """Keep decoded tiles a workload comes back to, up to ``max_bytes`` in all (their ``nbytes``).

    A segmented LRU (see the module's documentation): new tiles enter a probation segment, a tile asked
    for again while cached moves to a protected one (at most ``PROTECTED_SHARE`` of ``max_bytes``),
    and tiles are evicted from probation first, so that a scan over more tiles than fit does not evict
    the tiles used more than once. A tile larger than ``max_bytes`` is never kept; ``max_bytes=0``
    disables caching. Safe to use from many threads.

    Parameters
    ----------
    max_bytes
        Bound on the bytes of the cached tiles (``tile.nbytes``).
    policy
        ``"slru"`` (the default) or ``"lru"``: a plain LRU cache, kept to compare the two.

    Attributes
    ----------
    hits
        Lookups (:meth:`get`) that found a tile holding the cells asked for.
    misses
        Lookups that did not (nothing cached, or a partial tile without those cells).

    Raises
    ------
    ValueError
        For a negative ``max_bytes`` or an unknown ``policy``.
    """

    def __init__(self, max_bytes: int, *, policy: str = "slru") -> None:
        self.max_bytes = check_integer("tile_cache_bytes", max_bytes, minimum=0)
        check_choice("cache_policy", policy, CACHE_POLICIES)
        self.policy = policy
        self.hits = 0
        self.misses = 0
        self._probation: OrderedDict[int, DecodedTile] = OrderedDict()  # also the one list of "lru"
        self._protected: OrderedDict[int, DecodedTile] = OrderedDict()
        self._probation_bytes = 0
        self._protected_bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """The tiles cached (a tile held in both segments counts once)."""
        with self._lock:
            return len(self._probation.keys() | self._protected.keys())

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached tiles."""
        with self._lock:
            return self._probation_bytes + self._protected_bytes

    @property
    def protected_max_bytes(self) -> int:
        """Bound on the bytes of the protected segment (0 for a plain LRU cache)."""
        return int(PROTECTED_SHARE * self.max_bytes) if self.policy == "slru" else 0

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)`` (0 before any lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def get(self, index: int, cells: np.ndarray | None = None) -> DecodedTile | None:
        """Return tile ``index`` if cached holding ``cells``, marking it used; count a hit or a miss.

        Parameters
        ----------
        index
            The tile number.
        cells
            Tile-local cell numbers wanted; ``None`` (the default): the whole tile, so a partial tile is
            not returned.
        """
        with self._lock:
            tile = self._protected.get(index)  # first: a grown copy in probation is not needed for these
            if tile is not None and _holds(tile, cells):
                self.hits += 1
                self._protected.move_to_end(index)
                return tile
            tile = self._probation.get(index)
            if tile is None or not _holds(tile, cells):
                self.misses += 1
                return None
            self.hits += 1
            if self.policy == "lru":
                self._probation.move_to_end(index)
            else:
                self._unlink_probation(index)
                self._protect(index, tile)
            return tile

    def peek(self, index: int) -> DecodedTile | None:
        """Return tile ``index`` as cached (its largest entry, complete or partial), or None.

        Neither counted nor marked used.
        """
        with self._lock:
            tile = self._probation.get(index)  # a tile in both segments: the grown copy is in probation
            return self._protected.get(index) if tile is None else tile

    def put(self, index: int, tile: DecodedTile) -> None:
        """Cache ``tile`` (a new entry of ``index``), evicting others to stay within ``max_bytes``.

        A new tile enters probation. A tile grown from a cached partial one (more chunks) makes the old
        entry count as used again: in probation it is promoted, in protected it stays, and the grown tile
        enters probation beside it (see the module's documentation); any other entry of ``index`` is
        replaced. A tile larger than ``max_bytes`` is not kept (the entries of ``index`` stay).
        """
        size = tile.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            if self.policy == "lru":
                self._unlink_probation(index)
            else:
                old = self._unlink_probation(index)
                kept = self._protected.get(index)
                if old is not None and kept is None and _grows(old, tile):
                    self._protect(index, old)  # asked for again; the chunks new to it are in probation
                elif kept is not None:
                    if _grows(kept, tile):
                        self._protected.move_to_end(index)
                    else:  # not a grown copy of it: replaced
                        del self._protected[index]
                        self._protected_bytes -= kept.nbytes
            self._probation[index] = tile
            self._probation_bytes += size
            self._evict(index)

    def _unlink_probation(self, index: int) -> DecodedTile | None:
        """Take tile ``index`` out of probation (lock held)."""
        old = self._probation.pop(index, None)
        if old is not None:
            self._probation_bytes -= old.nbytes
        return old

    def _protect(self, index: int, tile: DecodedTile) -> None:
        """Put ``tile`` at protected's most recently used end, demoting its overflow to probation (lock held)."""
        old = self._protected.pop(index, None)
        if old is not None:
            self._protected_bytes -= old.nbytes
        self._protected[index] = tile
        self._protected_bytes += tile.nbytes
        limit = self.protected_max_bytes
        while self._protected_bytes > limit and len(self._protected) > 1:
            demoted, moved = self._protected.popitem(last=False)
            self._protected_bytes -= moved.nbytes
            if demoted not in self._probation:  # else probation holds a grown copy of it already
                self._probation[demoted] = moved  # probation's most recently used end: a second chance
                self._probation_bytes += moved.nbytes

    def _evict(self, keep: int) -> None:
        """Evict down to ``max_bytes``: probation's least recently used first, never ``keep`` while others are left."""
        while self._probation_bytes + self._protected_bytes > self.max_bytes:
            if self._probation and (len(self._probation) > 1 or keep not in self._probation):
                _, evicted = self._probation.popitem(last=False)
                self._probation_bytes -= evicted.nbytes
            elif self._protected:
                _, evicted = self._protected.popitem(last=False)
                self._protected_bytes -= evicted.nbytes
            else:  # pragma: no cover - the tile alone fits
                break

    def segment(self, index: int) -> str | None:
        """Where tile ``index`` is: ``"protected"`` (maybe with a grown copy in probation), ``"probation"`` or None."""
        with self._lock:
            if index in self._protected:
                return "protected"
            return "probation" if index in self._probation else None

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (one held by a parent thread at the fork would never be released)."""
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Drop every cached tile (the hit and miss counts stay)."""
        with self._lock:
            self._probation.clear()
            self._protected.clear()
            self._probation_bytes = 0
            self._protected_bytes = 0
