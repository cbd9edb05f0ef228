"""Peak memory of reading a whole dataset, tile by tile and in row batches, against the tile cache bound.

A dataset whose decoded size is several times the tile cache is written once (random counts, zstd level 1)
and each access pattern runs in a fresh interpreter, which measures its own peak resident set size: after
warming up (numba kernels loaded, thread pool started), it resets the high-water mark (``5`` written to
``/proc/self/clear_refs``), runs the loop over every cell, and reads ``VmHWM`` from ``/proc/self/status``.
(``ru_maxrss`` would not do: it keeps the high-water mark of the process across ``exec``, and that of the
warm-up.) Peak memory should stay below ``baseline + cache limit + a few decoded tiles``, however large the
dataset; a control run with a cache larger than the dataset shows what holding everything would cost.

Usage::

    python benchmarks/bench_memory.py                      # 1.1 GB decoded, 32 MB tile cache
    python benchmarks/bench_memory.py --cells 60000 --cache-mb 8 --json out.json

Figures are printed (and written as JSON with ``--json``); nothing is asserted here (``tests/reliability``
asserts the bound on a smaller dataset).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _rss import reset_peak, status, trim

SCENARIOS = ("iter_tiles", "read_rows", "random_batches")


# ---------------------------------------------------------------------------------------------- the dataset


def make_dataset(path: Path, *, cells: int, genes: int, density: float, tile_size: int, seed: int = 0) -> dict:
    """Write random counts (reusing a dataset written before with the same parameters); return its metadata."""
    import deltacells
    from deltacells import DatasetWriter

    params = {"cells": cells, "genes": genes, "density": density, "tile_size": tile_size, "seed": seed}
    with contextlib.suppress(Exception):  # no dataset there yet, or another one: write it
        ds = deltacells.open_dataset(path)
        if ds.manifest.metadata.get("params") == params:
            return ds.manifest.metadata
    from scipy import sparse

    rng = np.random.default_rng(seed)
    checksum = 0
    block = max(tile_size, 4096)
    with DatasetWriter(path, genes, tile_size=tile_size, n_chunks=4, level=1, overwrite=True) as writer:
        for lo in range(0, cells, block):
            rows = min(block, cells - lo)
            mask = rng.random((rows, genes), dtype=np.float32) < density
            csr = sparse.csr_matrix(mask, dtype=np.int32)
            csr.data = rng.geometric(0.4, size=csr.nnz).astype(np.int32)
            checksum += int(csr.data.sum(dtype=np.int64))
            writer.write(csr)
        writer.metadata = {"params": params, "checksum": checksum}
    return deltacells.open_dataset(path).manifest.metadata


# ---------------------------------------------------------------------------------------------- the probe


def probe(scenario: str, path: str, cache_bytes: int, threads: int, batch_rows: int = 1000) -> dict[str, Any]:
    """Run one access pattern over the whole dataset in this (fresh) process and measure its peak RSS."""
    import deltacells
    from deltacells._kernel_loading import load_compiled_kernels

    ds = deltacells.open_dataset(path, tile_cache_bytes=cache_bytes, threads=threads)
    load_compiled_kernels()  # small reads would not wait for them: loaded later, they would land above the baseline
    m = ds.manifest
    n = ds.n_cells
    # warm up: kernels loaded, thread pool started, first allocations made
    ds.read_rows(slice(0, min(n, 10)))
    for _ in ds.iter_tiles(list(range(min(ds.n_tiles, 2 * threads + 1)))):
        pass
    ds.read_rows(np.arange(0, n, max(1, n // 50))[:50])
    ds.cache.clear()
    gc.collect()
    trim()  # give the warm-up's freed memory back to the OS: it must not hide in the baseline
    baseline = status("VmRSS")
    reset = reset_peak()
    checksum = 0
    samples: list[int] = []
    max_cached = 0
    began = time.perf_counter()
    if scenario == "iter_tiles":
        every = max(1, ds.n_tiles // 20)
        for t, tile in ds.iter_tiles():
            checksum += int(tile.data.sum(dtype=np.int64))
            max_cached = max(max_cached, ds.cache.nbytes)
            if t % every == 0:
                samples.append(status("VmRSS"))
    elif scenario == "read_rows":
        every = max(1, n // batch_rows // 20) * batch_rows
        for lo in range(0, n, batch_rows):
            block = ds.read_rows(slice(lo, lo + batch_rows), dtype=np.int32)
            checksum += int(block.data.sum(dtype=np.int64))
            max_cached = max(max_cached, ds.cache.nbytes)
            if lo % every == 0:
                samples.append(status("VmRSS"))
    elif scenario == "random_batches":  # shuffled cells, as a data loader draws them: every batch hits many tiles
        order = np.random.default_rng(0).permutation(n)
        n_batches = min(20, -(-n // batch_rows))
        for b in range(n_batches):
            block = ds.read_rows(order[b * batch_rows : (b + 1) * batch_rows], dtype=np.int32)
            checksum += int(block.data.sum(dtype=np.int64))
            max_cached = max(max_cached, ds.cache.nbytes)
            samples.append(status("VmRSS"))
    else:
        msg = f"unknown scenario {scenario!r}; choose among {SCENARIOS}"
        raise ValueError(msg)
    seconds = time.perf_counter() - began
    peak = status("VmHWM")
    tile_bytes = [8 * int(z) + 8 * (int(c) + 1) for z, c in zip(m.tile_nnz, m.tile_cells, strict=True)]
    batch = max(2, 2 * threads)
    return {
        "scenario": scenario,
        "threads": threads,
        "cache_limit": cache_bytes,
        "decoded_total": sum(tile_bytes),
        "max_tile_decoded": max(tile_bytes),
        "n_tiles": ds.n_tiles,
        "baseline_rss": baseline,
        "peak_rss": peak,
        "peak_above_baseline": peak - baseline,
        "peak_reset": reset,
        "max_cached": max_cached,
        "iter_batch_tiles": batch,
        "rss_samples": samples,
        "seconds": seconds,
        "checksum_ok": scenario == "random_batches" or checksum == m.metadata.get("checksum"),
        "tiles_decoded": ds.tiles_decoded,
    }


def run_probe(scenario: str, path: Path, cache_bytes: int, threads: int, batch_rows: int = 1000) -> dict[str, Any]:
    """:func:`probe` in a fresh interpreter (so that its peak RSS is its own)."""
    command = [
        sys.executable, str(Path(__file__).resolve()), "--probe", scenario, "--dir", str(path),
        "--cache-bytes", str(cache_bytes), "--threads", str(threads), "--batch-rows", str(batch_rows),
    ]  # fmt: skip
    env = {**os.environ, "DELTACELLS_THREADS": str(threads)}
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=1800)
    if out.returncode != 0:
        msg = f"the {scenario} probe failed ({out.returncode}):\n{out.stderr[-3000:]}"
        raise RuntimeError(msg)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- main


def _mb(x: float) -> str:
    return f"{x / 2**20:8.1f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=340_000, help="cells (default: 1.1 GB decoded)")
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--density", type=float, default=0.2)
    parser.add_argument("--tile-size", type=int, default=2048)
    parser.add_argument("--cache-mb", type=float, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-rows", type=int, default=1000)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--control", action="store_true", help="also run iter_tiles with a cache above the dataset")
    parser.add_argument("--dir", type=Path, default=None, help="dataset directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary dataset")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cache-bytes", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.probe:
        print(json.dumps(probe(args.probe, str(args.dir), args.cache_bytes, args.threads, args.batch_rows)))
        return 0

    directory = args.dir or Path(tempfile.mkdtemp(prefix="deltacells-bench-memory-"))
    path = directory / "dataset" if args.dir is None else directory
    try:
        began = time.perf_counter()
        make_dataset(path, cells=args.cells, genes=args.genes, density=args.density, tile_size=args.tile_size)
        written = time.perf_counter() - began
        cache = int(args.cache_mb * 2**20)
        results = [run_probe(s, path, cache, args.threads, args.batch_rows) for s in args.scenarios.split(",")]
        if args.control:
            control = run_probe("iter_tiles", path, 4 * results[0]["decoded_total"], args.threads, args.batch_rows)
            control["scenario"] = "iter_tiles (control: cache > dataset)"
            results.append(control)
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    first = results[0]
    print(
        f"dataset: {args.cells:,} cells x {args.genes:,} genes, {first['n_tiles']} tiles, decoded "
        f"{first['decoded_total'] / 2**30:.2f} GB (largest tile {_mb(first['max_tile_decoded']).strip()}); "
        f"written in {written:.0f} s; tile cache {_mb(cache).strip()}, {args.threads} threads"
    )
    print(f"{'scenario':40s} {'baseline':>11s} {'peak':>11s} {'peak-base':>11s} {'max cached':>11s} {'time':>7s}")
    for r in results:
        print(
            f"{r['scenario']:40s} {_mb(r['baseline_rss'])} {_mb(r['peak_rss'])} {_mb(r['peak_above_baseline'])} "
            f"{_mb(r['max_cached'])} {r['seconds']:6.1f}s"
        )
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args), "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
