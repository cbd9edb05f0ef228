"""The tile cache and chunk-level decoding: SLRU against LRU under full scans, and chunks decoded for subsets.

Two parts, in one run on one machine (synthetic data, ``deltacells.datasets.synthetic_counts`` written with
``write_deltacells``, local disk, warm page cache):

1. **Cache policy.** A dataset whose decoded tiles are several times the tile cache (``--cache-share`` of
   them). One random batch of ``--batch-cells`` cells (unsorted) is read ``--repeats`` times (the same
   batch each time), with a full scan (``for t, tile in ds.iter_tiles()``) between reads; and, as a second
   workload, read twice in a row before each scan. For ``policy="lru"`` and ``policy="slru"``: the tile
   cache's hit rate over the batch reads after the first, the chunks decoded and the time per batch read.
2. **Chunk-level decoding.** A bigger dataset, tile cache off (every read decodes); random subsets of
   0.01%, 0.1%, 1% and 10% of the cells: tiles touched, chunks decoded against ``tiles * n_chunks``, and
   the time of ``read_rows``, decoding only the chunks holding the cells (the default) or whole tiles
   (the private switch ``TileReader._partial_decode = False``: the reader before chunk-level decoding).

Usage::

    python benchmarks/bench_tile_cache.py
    python benchmarks/bench_tile_cache.py --quick
    python benchmarks/bench_tile_cache.py --json out.json
    python benchmarks/bench_tile_cache.py --json docs/_data/tile-cache.json   # the documentation's figures

A ``--quick`` run never writes into ``docs/_data`` (``_record.py``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _record import now, write_json

import deltacells
from deltacells.core import Dataset
from deltacells.datasets import synthetic_counts
from deltacells.tiles import TileCache

FRACTIONS = (0.0001, 0.001, 0.01, 0.1)


def _write(path: Path, n_cells: int, n_genes: int, tile_size: int, seed: int) -> None:
    adata = synthetic_counts(n_cells, n_genes, seed=seed, mean_library_size=1500.0)
    deltacells.write_deltacells(adata, path, progress=False, tile_size=tile_size, level=3)


def _decoded_bytes(path: Path) -> int:
    """The decoded bytes of all tiles (what a cache holding the whole dataset would need)."""
    ds = deltacells.open_dataset(path, tile_cache_bytes=0)
    return sum(tile.nbytes for _, tile in ds.iter_tiles())


def _scan(ds: Dataset) -> None:
    for _ in ds.iter_tiles():
        pass


def _batch_read(ds: Dataset, batch: np.ndarray) -> dict[str, float]:
    """Read ``batch``; the cache's lookups, hits, chunks decoded and time of that read."""
    hits, misses, chunks = ds.cache.hits, ds.cache.misses, ds.chunks_decoded
    t0 = time.perf_counter()
    ds.read_rows(batch)
    seconds = time.perf_counter() - t0
    return {
        "hits": ds.cache.hits - hits,
        "lookups": ds.cache.hits - hits + ds.cache.misses - misses,
        "chunks": ds.chunks_decoded - chunks,
        "seconds": seconds,
    }


def cache_policies(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part 1: batch hit rates of LRU and SLRU with full scans between the batch reads."""
    total = _decoded_bytes(path)
    cache_bytes = int(args.cache_share * total)
    probe = deltacells.open_dataset(path, tile_cache_bytes=0)
    batch = np.random.default_rng(args.seed).choice(probe.n_cells, args.batch_cells, replace=False)
    touched = len(np.unique(probe.tile_of(batch)[0]))
    workloads = {
        "batch, scan, batch, scan, ...": [True] * (args.repeats - 1) + [False],
        "batch twice, then scan, ...": [i % 2 == 1 for i in range(args.repeats)],
    }
    out: dict[str, Any] = {
        "n_cells": probe.n_cells,
        "n_tiles": probe.n_tiles,
        "n_chunks": probe.manifest.n_chunks,
        "decoded_mb": total / 2**20,
        "cache_mb": cache_bytes / 2**20,
        "batch_cells": args.batch_cells,
        "batch_tiles": touched,
        "workloads": {},
    }
    for name, scan_after in workloads.items():
        rows: dict[str, Any] = {}
        for policy in ("lru", "slru"):
            ds = deltacells.open_dataset(path, tile_cache_bytes=cache_bytes, threads=args.threads)
            ds._tiles.cache = TileCache(cache_bytes, policy=policy)
            reads = []
            for scan in scan_after:
                reads.append(_batch_read(ds, batch))
                if scan:
                    _scan(ds)
            later = reads[1:]  # the first read of the batch cannot hit
            lookups = sum(r["lookups"] for r in later)
            rows[policy] = {
                "hit_rate": sum(r["hits"] for r in later) / lookups if lookups else 0.0,
                "hit_rate_per_read": [r["hits"] / r["lookups"] if r["lookups"] else 0.0 for r in reads],
                "chunks_per_read": [r["chunks"] for r in reads],
                "ms_per_read": [1000 * r["seconds"] for r in reads],
                "ms_per_later_read": 1000 * statistics.median(r["seconds"] for r in later),
            }
        out["workloads"][name] = rows
    return out


def chunk_decoding(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part 2: random subsets read with chunk-level decoding and with whole tiles, the tile cache off."""
    probe = deltacells.open_dataset(path, tile_cache_bytes=0)
    n_chunks = int(probe.manifest.n_chunks)
    rng = np.random.default_rng(args.seed + 1)
    results = []
    for fraction in FRACTIONS:
        rows = rng.choice(probe.n_cells, max(1, round(fraction * probe.n_cells)), replace=False)
        entry: dict[str, Any] = {"fraction": fraction, "cells": int(rows.shape[0])}
        times: dict[str, list[float]] = {"chunks": [], "whole": []}
        for round_ in range(args.repeat + 1):  # rounds interleave the modes; the first warms up
            for mode in ("chunks", "whole"):
                ds = deltacells.open_dataset(path, tile_cache_bytes=0, threads=args.threads)
                ds._tiles._partial_decode = mode == "chunks"
                t0 = time.perf_counter()
                ds.read_rows(rows)
                if round_:
                    times[mode].append(time.perf_counter() - t0)
                entry["tiles"] = ds.tiles_decoded
                entry[f"chunks_{mode}"] = ds.chunks_decoded
        entry["tiles_x_chunks"] = entry["tiles"] * n_chunks
        entry["ms_chunks"] = 1000 * min(times["chunks"])
        entry["ms_whole"] = 1000 * min(times["whole"])
        results.append(entry)
    return {
        "n_cells": probe.n_cells,
        "n_tiles": probe.n_tiles,
        "n_chunks": n_chunks,
        "nnz": int(probe.manifest.tile_nnz.sum()),
        "subsets": results,
    }


def _print(policies: dict[str, Any], chunks: dict[str, Any]) -> None:
    p = policies
    print(
        f"1. cache policy: {p['n_cells']:,} cells in {p['n_tiles']} tiles of {p['n_chunks']} chunks, "
        f"{p['decoded_mb']:.0f} MB decoded, tile cache {p['cache_mb']:.0f} MB; one batch of {p['batch_cells']} "
        f"cells ({p['batch_tiles']} tiles), read {len(next(iter(p['workloads'].values()))['lru']['ms_per_read'])} "
        "times"
    )
    for name, rows in p["workloads"].items():
        print(f"  {name}")
        header = f"{'policy':6s} {'hit rate':>8s}  {'hits per read':32s} {'chunks per read':28s}"
        print(f"    {header} {'ms/read (later)':>15s}")
        for policy, row in rows.items():
            rates = " ".join(f"{r:.2f}" for r in row["hit_rate_per_read"])
            decoded = " ".join(f"{c}" for c in row["chunks_per_read"])
            print(f"    {policy:6s} {row['hit_rate']:8.2f}  {rates:32s} {decoded:28s} {row['ms_per_later_read']:15.1f}")
    c = chunks
    print(
        f"2. chunk-level decoding: {c['n_cells']:,} cells, {c['nnz']:,} nonzeros in {c['n_tiles']} tiles of "
        f"{c['n_chunks']} chunks, tile cache off, best of the rounds"
    )
    print(
        f"    {'subset':>7s} {'cells':>7s} {'tiles':>6s} {'chunks':>7s} {'tiles*n_chunks':>15s} "
        f"{'ms (chunks)':>12s} {'ms (whole tiles)':>17s} {'speed-up':>9s}"
    )
    for e in c["subsets"]:
        print(
            f"    {100 * e['fraction']:6.2f}% {e['cells']:7,} {e['tiles']:6,} {e['chunks_chunks']:7,} "
            f"{e['tiles_x_chunks']:15,} {e['ms_chunks']:12.1f} {e['ms_whole']:17.1f} "
            f"{e['ms_whole'] / e['ms_chunks']:8.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small datasets, 2 rounds")
    parser.add_argument("--cells", type=int, default=40_000, help="cells of the dataset of part 1")
    parser.add_argument("--big-cells", type=int, default=120_000, help="cells of the dataset of part 2")
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--tile-size", type=int, default=512, help="cells per tile in part 1")
    parser.add_argument("--cache-share", type=float, default=0.25, help="tile cache / decoded dataset in part 1")
    parser.add_argument("--batch-cells", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=6, help="reads of the batch in part 1")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds in part 2")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.cells, args.big_cells, args.genes, args.tile_size, args.repeat = 8000, 20_000, 1000, 256, 2
        args.batch_cells = min(args.batch_cells, 32)
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small", Path(tmp) / "big"
        _write(small, args.cells, args.genes, args.tile_size, args.seed)
        policies = cache_policies(small, args)
        _write(big, args.big_cells, args.genes, 2048, args.seed + 1)
        chunks = chunk_decoding(big, args)
    _print(policies, chunks)
    doc = {"benchmark": "bench_tile_cache", "args": vars(args), "cache_policy": policies, "chunk_decoding": chunks}
    write_json(args.json, doc, started=started, quick=args.quick, default=str)


if __name__ == "__main__":
    main()
