"""The tile cache: a segmented LRU (scan-resistant), plain LRU for comparison, partial tiles, counters, threads."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells.codec import DecodedTile, decode_chunks, parse_tile
from deltacells.core import DatasetWriter
from deltacells.tiles import TileCache
from deltacells.tiles._cache import PROTECTED_SHARE


class FakeTile:
    """Only what the cache looks at: its bytes, whether it is complete, which cells it holds."""

    def __init__(self, nbytes: int, *, complete: bool = True, cells: range | None = None) -> None:
        self.nbytes = nbytes
        self.complete = complete
        self.cells = cells

    def holds(self, cells: np.ndarray | None) -> bool:
        if self.complete:
            return True
        return cells is not None and self.cells is not None and all(int(c) in self.cells for c in cells)


def _scan(cache: TileCache, tiles: range, size: int = 10) -> None:
    """What a loop over tiles does to the cache: look each up, put it when missed."""
    for t in tiles:
        if cache.get(t) is None:
            cache.put(t, FakeTile(size))


@pytest.mark.parametrize("policy", ["slru", "lru"])
def test_scan_larger_than_the_cache(policy: str) -> None:
    """SLRU keeps a tile used twice through a scan of more tiles than fit; LRU loses it."""
    cache = TileCache(100, policy=policy)  # ten tiles
    hot = FakeTile(10)
    cache.put(0, hot)
    assert cache.get(0) is hot  # used twice: protected
    _scan(cache, range(100, 130))
    assert cache.nbytes <= 100
    if policy == "slru":
        assert cache.get(0) is hot and cache.segment(0) == "protected"
    else:
        assert cache.get(0) is None and cache.segment(0) is None


def test_protected_share_and_demotion() -> None:
    """Protected holds at most 80% of the bytes; its overflow goes back to probation's most recent end."""
    cache = TileCache(100)
    assert cache.protected_max_bytes == int(PROTECTED_SHARE * 100) == 80
    for t in range(10):
        cache.put(t, FakeTile(10))
    for t in range(10):  # all used again: protected takes 8, the two used first are demoted
        assert cache.get(t) is not None
    assert [cache.segment(t) for t in range(10)] == ["probation"] * 2 + ["protected"] * 8
    cache.put(10, FakeTile(10))  # evicts probation's least recently used: 0 (demoted first)
    assert cache.segment(0) is None and cache.segment(1) == "probation" and cache.segment(10) == "probation"
    assert cache.nbytes == 100 and len(cache) == 10
    assert cache.get(1) is not None  # promoted again: 2, protected's least recent, is demoted
    assert cache.segment(1) == "protected" and cache.segment(2) == "probation"


def test_new_tile_evicts_protected_only_when_probation_is_empty() -> None:
    cache = TileCache(100)
    cache.put(0, FakeTile(50))
    cache.get(0)
    cache.put(1, FakeTile(30))
    assert cache.segment(0) == "protected" and cache.segment(1) == "probation"
    cache.put(2, FakeTile(40))  # 120 > 100: 1 goes (probation), 0 stays
    assert cache.segment(1) is None and cache.segment(0) == "protected" and cache.segment(2) == "probation"
    cache.put(3, FakeTile(60))  # probation holds only the new tile after 2 goes: 0 goes too
    assert cache.segment(2) is None and cache.segment(0) is None and cache.segment(3) == "probation"
    assert cache.nbytes == 60


def test_replacing_an_entry() -> None:
    """Another tile for a cached one (not a grown copy of it) replaces it where it is."""
    cache = TileCache(100)
    cache.put(0, FakeTile(10, complete=False, cells=range(5)))
    cache.put(0, FakeTile(20))
    assert cache.segment(0) == "probation" and cache.nbytes == 20 and len(cache) == 1
    cache.get(0)
    cache.put(0, FakeTile(30))  # replaces the protected entry (the new one enters probation)
    assert cache.segment(0) == "probation" and cache.nbytes == 30 and len(cache) == 1
    lru = TileCache(100, policy="lru")
    lru.put(0, FakeTile(10))
    lru.put(0, FakeTile(20))
    assert lru.segment(0) == "probation" and lru.nbytes == 20 and lru.protected_max_bytes == 0


def _chunks(blob: bytes, chunks: list[int]) -> DecodedTile:
    return decode_chunks(parse_tile(blob), [(0, blob)], chunks).freeze()


@pytest.fixture(scope="module")
def blob() -> bytes:
    rng = np.random.default_rng(4)
    matrix = sparse.random(80, 50, density=0.3, format="csr", random_state=rng).ceil().astype(np.int64)
    return deltacells.encode_tile(matrix.indptr, matrix.indices, matrix.data, 50, n_chunks=8, level=1)


def test_grown_tile_in_probation_promotes_the_old_entry(blob: bytes) -> None:
    """More chunks of a partial tile in probation: it was asked for again (protected), the new chunks are new."""
    small, grown = _chunks(blob, [1]), _chunks(blob, [1, 6])
    cache = TileCache(10**6)
    cache.put(0, small)
    cache.put(0, grown)
    assert cache.segment(0) == "protected" and len(cache) == 1
    assert cache.peek(0) is grown and cache.nbytes == small.nbytes + grown.nbytes
    cells_1 = np.arange(small.chunk_bounds[1], small.chunk_bounds[2])
    assert cache.get(0, cells_1) is small  # protected answers first for what it holds
    assert cache.get(0, np.array([small.chunk_bounds[6]])) is grown  # a hit on the grown copy promotes it
    assert cache.segment(0) == "protected" and cache.peek(0) is grown and cache.nbytes == grown.nbytes
    lru = TileCache(10**6, policy="lru")
    lru.put(0, small)
    lru.put(0, grown)
    assert lru.peek(0) is grown and lru.nbytes == grown.nbytes


def test_scan_over_a_protected_partial_tile_keeps_it_small(blob: bytes) -> None:
    """A whole tile decoded over a protected partial one goes to probation; the scan then evicts only it."""
    small, whole = _chunks(blob, [3]), _chunks(blob, list(range(8)))
    cache = TileCache(whole.nbytes + small.nbytes)
    cache.put(0, small)
    assert cache.get(0, np.array([small.chunk_bounds[3]])) is small
    assert cache.get(0) is None  # a scan wants the whole tile: a miss ...
    cache.put(0, whole)  # ... and caches it grown
    assert cache.segment(0) == "protected" and cache.peek(0) is whole and len(cache) == 1
    cache.put(1, FakeTile(whole.nbytes))  # the scan goes on: the whole copy goes, the small one stays
    assert cache.peek(0) is small and cache.segment(0) == "protected"
    assert cache.nbytes == small.nbytes + whole.nbytes
    cache.put(0, whole)  # the next scan: 1 goes
    assert cache.segment(1) is None and cache.segment(0) == "protected"
    assert cache.get(0) is whole and cache.peek(0) is whole  # asked for whole again: protected, in its place
    assert cache.nbytes == whole.nbytes and len(cache) == 1


def test_hits_and_misses_count_partial_tiles_by_the_cells_asked() -> None:
    cache = TileCache(100)
    partial = FakeTile(10, complete=False, cells=range(5))
    cache.put(3, partial)
    assert cache.get(3, np.array([1, 4])) is partial  # its cells: a hit
    assert cache.get(3, np.array([4, 5])) is None  # a cell it does not hold: a miss
    assert cache.get(3) is None  # the whole tile: a miss
    assert cache.get(7) is None
    assert (cache.hits, cache.misses) == (1, 3)
    assert cache.hit_rate == 0.25
    assert cache.peek(3) is partial and cache.peek(7) is None
    assert (cache.hits, cache.misses) == (1, 3), "peek is not counted"
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.hits == 1
    assert TileCache(10).hit_rate == 0.0


def test_zero_bytes_disables_and_bad_arguments() -> None:
    cache = TileCache(0)
    cache.put(0, FakeTile(1))
    assert cache.get(0) is None and len(cache) == 0 and cache.misses == 1
    with pytest.raises(ValueError, match="policy"):
        TileCache(10, policy="fifo")
    with pytest.raises(ValueError, match=">= 0"):
        TileCache(-1, policy="lru")


@pytest.mark.parametrize("policy", ["slru", "lru"])
def test_many_threads(policy: str) -> None:
    """Gets and puts from many threads keep the bound and the byte count exact."""
    cache = TileCache(500, policy=policy)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            barrier.wait()
            for _ in range(2000):
                t = int(rng.integers(0, 60))
                if cache.get(t) is None:
                    cache.put(t, FakeTile(int(rng.integers(1, 40))))
                assert cache.nbytes <= 500
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]
    assert cache.hits + cache.misses == 8 * 2000
    held = [cache.peek(t) for t in range(60)]
    assert cache.nbytes == sum(t.nbytes for t in held if t is not None) <= 500
    assert len(cache) == sum(t is not None for t in held)


# ---------------------------------------------------------------------------------------------- real tiles


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(3)
    matrix = sparse.random(1200, 200, density=0.1, format="csr", random_state=rng, dtype=np.float64).ceil()
    path = tmp_path_factory.mktemp("cache") / "ds"
    with DatasetWriter(path, 200, tile_size=100, n_chunks=8, level=1) as writer:
        writer.write(matrix)
    return path


def test_real_partial_tiles_hit_for_their_chunks(root: Path) -> None:
    blob = (root / "tiles" / "tile_000000.dct").read_bytes()
    prefix = parse_tile(blob)
    tile = decode_chunks(prefix, [(0, blob)], [2, 5])
    cache = TileCache(10**6)
    cache.put(0, tile)
    lo2, hi5 = int(prefix.chunk_bounds[2]), int(prefix.chunk_bounds[6]) - 1
    assert cache.get(0, np.array([hi5, lo2, lo2])) is tile
    assert cache.get(0, np.array([lo2 - 1])) is None
    assert cache.get(0) is None


@pytest.mark.parametrize("policy", ["slru", "lru"])
def test_dataset_scan_keeps_a_tile_read_twice(root: Path, policy: str) -> None:
    """A read of one tile twice, then a loop over all twelve in a cache of four: SLRU still holds it."""
    probe = deltacells.open_dataset(root, tile_cache_bytes=0)
    size = max(probe.read_tile(t).nbytes for t in range(probe.n_tiles))
    ds = deltacells.open_dataset(root, tile_cache_bytes=4 * size, threads=1)
    ds._tiles.cache = TileCache(4 * size, policy=policy)
    ds.read_rows(slice(500, 599))  # most of tile 5 (a whole tile would decode straight into the output)
    ds.read_rows(slice(500, 599))
    assert ds.tiles_decoded == 1 and ds.cache.hits == 1
    for _ in ds.iter_tiles(list(range(12)) + list(range(12))):  # scans, tile 5 in them
        pass
    before = ds.tiles_decoded
    ds.read_rows(slice(500, 599))
    assert ds.tiles_decoded == before + (policy == "lru")


@pytest.mark.parametrize("policy", ["slru", "lru"])
def test_random_partial_workload_keeps_the_books(blob: bytes, policy: str) -> None:
    """Random gets and grown puts of partial tiles: exact byte counts, the bounds, and peek the largest entry."""
    whole = _chunks(blob, list(range(8)))
    cache = TileCache(3 * whole.nbytes, policy=policy)
    rng = np.random.default_rng(9)
    bounds = whole.chunk_bounds
    for _ in range(3000):
        t = int(rng.integers(0, 6))
        cells = rng.integers(0, 80, int(rng.integers(1, 4))) if rng.random() < 0.8 else None
        if cache.get(t, cells) is not None:
            continue
        held = cache.peek(t)
        wanted = np.arange(8) if cells is None else np.searchsorted(bounds, cells, side="right") - 1
        mask = np.zeros(8, dtype=bool) if held is None else held.chunk_mask.copy()
        mask[wanted] = True
        cache.put(t, _chunks(blob, np.flatnonzero(mask).tolist()))
        probation, protected = cache._probation, cache._protected
        assert cache.nbytes == sum(x.nbytes for x in probation.values()) + sum(x.nbytes for x in protected.values())
        assert cache.nbytes <= cache.max_bytes
        assert cache._protected_bytes <= cache.protected_max_bytes or len(protected) == 1
        for key in probation.keys() & protected.keys():  # a tile in both: the grown copy in probation
            assert np.all(probation[key].chunk_mask >= protected[key].chunk_mask)
            assert cache.peek(key) is probation[key]
    assert cache.hits > 0 and cache.misses > 0
