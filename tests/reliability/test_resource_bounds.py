"""Reading a whole dataset holds a bounded number of decoded tiles, and its memory stays flat.

Two views of the same property:

* *exact*: the decoded tiles alive at any moment (counted with weak references) never exceed what the cache
  bound and the decoding batch allow, whatever the dataset size;
* *as the OS sees it*: the peak RSS of a fresh process that reads every cell of a dataset whose decoded size
  is many times the cache limit stays below ``baseline + limit + a few tiles`` (measured by
  ``benchmarks/bench_memory.py``, which prints the same figures for a dataset of more than 1 GB), while a
  control run whose cache holds everything needs about the whole decoded size.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from reliability_lib import BENCH_MEMORY

import deltacells
import deltacells.codec as reader_module  # the tile checker imports decode_tile from here when it runs
import deltacells.tiles._ranged as ranged_module  # these two decode tiles in part: decode_chunks, merge_partial
import deltacells.tiles._reader as tile_reader_module
from deltacells.core import DatasetWriter

THREADS = 2
BATCH = max(2, 2 * THREADS)  # tiles iter_tiles decodes ahead (Dataset._batch_size)
MB = 2**20


def load_bench() -> ModuleType:
    if str(BENCH_MEMORY.parent) not in sys.path:  # its helpers (_rss.py) are beside it, as when it is run
        sys.path.insert(0, str(BENCH_MEMORY.parent))
    spec = importlib.util.spec_from_file_location("bench_memory", BENCH_MEMORY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------- exact


class LiveTiles:
    """Counts the decoded tiles that are still alive (referenced by anyone)."""

    def __init__(self) -> None:
        self.live = self.peak = self.decoded = 0
        self._lock = threading.Lock()

    def wrap(self, decode: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            tile = decode(*args, **kwargs)
            with self._lock:
                self.live += 1
                self.decoded += 1
                self.peak = max(self.peak, self.live)
            weakref.finalize(tile.indices, self._gone)
            return tile

        return counted

    def _gone(self) -> None:
        with self._lock:
            self.live -= 1


@pytest.fixture(scope="module")
def many_tiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """48 tiles of 256 cells; returns the path and the decoded size of one tile."""
    root = tmp_path_factory.mktemp("bounds") / "ds"
    rng = np.random.default_rng(0)
    with DatasetWriter(root, 500, tile_size=256, n_chunks=2, level=1) as writer:
        for _ in range(12):
            block = (rng.random((1024, 500)) < 0.2) * rng.integers(1, 9, size=(1024, 500))
            writer.write(block)
    ds = deltacells.open_dataset(root)
    return root, int(8 * ds.manifest.tile_nnz.max() + 8 * 257)


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> LiveTiles:
    counter = LiveTiles()
    monkeypatch.setattr(reader_module, "decode_tile", counter.wrap(reader_module.decode_tile))
    # tiles wanted for some of their cells are decoded chunk by chunk, and merged with what is cached
    for module in (tile_reader_module, ranged_module):
        for name in ("decode_chunks", "merge_partial"):
            monkeypatch.setattr(module, name, counter.wrap(getattr(module, name)))
    return counter


ACCESS = {
    "iter_tiles": lambda ds: [int(tile.data.sum()) for _, tile in ds.iter_tiles()],
    "read_rows in order": lambda ds: [
        int(ds.read_rows(slice(lo, lo + 1000)).sum()) for lo in range(0, ds.n_cells, 1000)
    ],
    "read_rows shuffled": lambda ds: [
        int(ds.read_rows(rows).sum()) for rows in np.array_split(np.random.default_rng(1).permutation(ds.n_cells), 8)
    ],
}


@pytest.mark.parametrize("access", list(ACCESS))
def test_decoded_tiles_alive_are_bounded(many_tiles: tuple[Path, int], live: LiveTiles, access: str) -> None:
    root, tile_bytes = many_tiles
    cache_tiles = 3
    ds = deltacells.open_dataset(root, tile_cache_bytes=cache_tiles * tile_bytes, threads=THREADS)
    ACCESS[access](ds)
    # every tile decoded (ranges decode their whole tiles into the output, not as tiles: not counted in live)
    assert ds.tiles_decoded >= ds.n_tiles == 48
    # the cache, a batch being decoded, the batch before it (still referenced while the next one is
    # submitted), and the tile the caller holds
    bound = cache_tiles + 2 * BATCH + 1
    assert live.peak <= bound, f"{live.peak} decoded tiles alive at once (bound {bound}, {ds.n_tiles} tiles)"
    print(f"{access}: at most {live.peak} decoded tiles alive (bound {bound}) over {live.decoded} decodes")
    assert ds.cache.nbytes <= cache_tiles * tile_bytes


def test_live_tile_count_sees_an_unbounded_cache(many_tiles: tuple[Path, int], live: LiveTiles) -> None:
    """The control: with a cache larger than the dataset, every tile stays alive (so the count above counts)."""
    root, tile_bytes = many_tiles
    ds = deltacells.open_dataset(root, tile_cache_bytes=100 * tile_bytes * 48, threads=THREADS)
    ACCESS["iter_tiles"](ds)
    assert live.peak == live.live == ds.n_tiles


# ---------------------------------------------------------------------------------------------- peak RSS


def check_rss(result: dict[str, Any]) -> None:
    """Peak RSS above the warmed-up baseline: within the cache limit plus a few tiles, and flat over time."""
    tiles = 4 * THREADS + 2  # (2 batches in flight + the caller's tile + one being inserted into the cache)
    slack = 24 * MB  # allocator arenas, Python objects, the output of one read_rows
    bound = result["cache_limit"] + tiles * result["max_tile_decoded"] + slack
    peak = result["peak_above_baseline"]
    figures = (
        f"{result['scenario']}: peak {peak / MB:.1f} MB above a baseline of {result['baseline_rss'] / MB:.0f} MB; "
        f"cache limit {result['cache_limit'] / MB:.0f} MB, tile {result['max_tile_decoded'] / MB:.1f} MB, "
        f"dataset {result['decoded_total'] / MB:.0f} MB decoded"
    )
    assert result["peak_reset"], "the kernel did not let the probe reset its peak RSS"
    assert result["checksum_ok"], "the loop did not read every count"
    assert peak <= bound, f"{figures}; bound {bound / MB:.1f} MB"
    assert peak <= 0.35 * result["decoded_total"], figures
    samples = result["rss_samples"]
    third = max(1, len(samples) // 3)
    growth = max(samples[-third:]) - max(samples[:third])
    assert growth <= 2 * result["max_tile_decoded"] + 8 * MB, f"{figures}; RSS grew by {growth / MB:.1f} MB"
    print(figures)


def _rss_case(tmp_path_factory: pytest.TempPathFactory, cells: int, cache_mb: int) -> list[dict[str, Any]]:
    bench = load_bench()
    root = tmp_path_factory.mktemp("rss") / "ds"
    bench.make_dataset(root, cells=cells, genes=2000, density=0.2, tile_size=512)
    cache = cache_mb * MB
    results = [bench.run_probe(s, root, cache, THREADS) for s in ("iter_tiles", "read_rows")]
    control = bench.run_probe("iter_tiles", root, 2 * results[0]["decoded_total"], THREADS)
    return [*results, control]


def _check(results: list[dict[str, Any]]) -> None:
    *bounded, control = results
    assert bounded[0]["decoded_total"] >= 8 * bounded[0]["cache_limit"]
    for result in bounded:
        check_rss(result)
    assert control["peak_above_baseline"] >= 0.8 * control["decoded_total"], (
        "the control run (cache larger than the dataset) should hold about the whole dataset: "
        f"{control['peak_above_baseline'] / MB:.0f} MB of {control['decoded_total'] / MB:.0f} MB"
    )


def test_peak_rss_is_flat(tmp_path_factory: pytest.TempPathFactory) -> None:
    """150 MB decoded, 12 MB of tile cache, tiles of 1.6 MB."""
    _check(_rss_case(tmp_path_factory, 48_000, 12))


@pytest.mark.slow
def test_peak_rss_is_flat_400mb(tmp_path_factory: pytest.TempPathFactory) -> None:
    """400 MB decoded, 32 MB of tile cache."""
    _check(_rss_case(tmp_path_factory, 128_000, 32))
