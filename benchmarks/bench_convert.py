"""Converting an AnnData: ``write_deltacells`` (default level, archive preset) against anndata's h5ad and zarr writers.

On the real Visium CytAssist matrix (2,898 x 19,465, read with ``scanpy.read_10x_mtx``) and on a larger one
made by resampling its real cells (``--cells``, default 100,000, drawn with replacement), in memory:

* ``write_deltacells(adata, out)`` with the defaults (``level="default"``), on 1 and on 2 encoding threads
  (``threads=``), and with ``level="archive"``;
* ``adata.write_h5ad(path, compression=...)`` with gzip, lzf and no compression, and ``adata.write_zarr(path)``
  (anndata's defaults);
* the tiles alone encoded with ``encode_tile`` on 1 and 2 threads, against zstd alone on 1 and 2 threads
  (what the machine's cores give at the time);
* the first pass of ``write_deltacells`` alone (the gene totals, ``deltacells.io._write.gene_totals``); the
  second pass (tiles encoded and written) is the whole conversion less the first pass.

A write of 50,000 cells or more starts loading numba's kernels (its genes are then reordered by a compiled
kernel): the round that warms up pays for that, as the first large write of a process does.

Times are the best of ``--repeat`` rounds (after one round to warm up) that interleave the methods, so load
from other work on the machine hits them alike: read them as ratios to gzip h5ad, measured in the same run.
Peak memory is the peak of Python's allocations (``tracemalloc``, numpy's included; not HDF5's own buffers)
during one more, separate, conversion of each kind, so that tracing does not slow the timed ones. Sizes are
the bytes on disk (the dataset directory, the h5ad file).

Usage::

    python benchmarks/bench_convert.py [--quick] [--json PATH] [--cells 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from _record import now, write_json
from _visium import VISIUM, resampled_rows
from scipy import sparse


def load_matrices(n_cells: int, quick: bool) -> list[tuple[str, Any]]:
    """The Visium AnnData as scanpy reads it, and one of ``n_cells`` of its cells drawn with replacement."""
    import anndata as ad
    import scanpy as sc

    visium = sc.read_10x_mtx(VISIUM)
    if quick:
        visium = visium[:1000].copy()
    rows = resampled_rows(visium.n_obs, n_cells)
    resampled = ad.AnnData(X=sparse.csr_matrix(visium.X)[rows], var=visium.var.copy())
    resampled.obs_names = [f"{visium.obs_names[r]}-{i}" for i, r in enumerate(rows)]
    return [("visium", visium), (f"resampled {n_cells // 1000}k", resampled)]


def size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def parts_on_disk(root: Path) -> dict[str, int]:
    """Bytes of a dataset by object: the tiles, each sidecar, the obs shards (with their schema)."""
    parts: dict[str, int] = {}
    for path in root.rglob("*"):
        if path.is_file():
            relative = path.relative_to(root)
            part = relative.parts[0] if len(relative.parts) > 1 else relative.name
            parts[part] = parts.get(part, 0) + path.stat().st_size
    return dict(sorted(parts.items(), key=lambda item: -item[1]))


def methods(adata: Any, workdir: Path, levels: list[int]) -> dict[str, Callable[[], Path | None]]:
    """What is timed, by name: each call writes (or, for the first pass, reads) once and returns its output."""
    import deltacells
    from deltacells.io._sources import matrix_source
    from deltacells.io._write import gene_totals

    def dc(level: str | int, threads: int | None) -> Callable[[], Path]:
        def run() -> Path:
            out = workdir / "out.deltacells"
            deltacells.write_deltacells(adata, out, level=level, threads=threads, overwrite=True, progress=False)
            return out

        return run

    def h5ad(compression: str | None) -> Callable[[], Path]:
        def run() -> Path:
            out = workdir / "out.h5ad"
            adata.write_h5ad(out, compression=compression)
            return out

        return run

    def zarr() -> Path:
        out = workdir / "out.zarr"
        adata.write_zarr(out)
        return out

    def first_pass() -> None:
        gene_totals(matrix_source(adata), max(2048, 4096))  # the block size write_deltacells reads with

    return {
        "deltacells default, 2 threads": dc("default", 2),
        "deltacells default, 1 thread": dc("default", 1),
        "deltacells archive, 2 threads": dc("archive", 2),
        **{f"deltacells level {level}, 2 threads": dc(level, 2) for level in levels},
        "h5ad gzip": h5ad("gzip"),
        "h5ad lzf": h5ad("lzf"),
        "h5ad none": h5ad(None),
        "zarr": zarr,
        "first pass (gene totals)": first_pass,
    }


def thread_scaling(adata: Any, repeat: int) -> dict[str, float]:
    """Tiles encoded (``encode_tile``, default level) on 1 and 2 threads, against zstd alone on the same threads.

    zstd alone (each tile's value bytes compressed, the GIL released throughout) shows the parallelism that the
    machine gives right now (other work shares its cores); ``encode_tile`` should come close to it.
    """
    import zstandard

    from deltacells.codec._encode import DEFAULT_LEVEL, encode_tile
    from deltacells.tiles import to_count_csr

    csr = to_count_csr(adata.X)
    tiles = [csr[lo : lo + 2048] for lo in range(0, csr.shape[0], 2048)]
    raw = [t.data.tobytes() + t.indices.tobytes() for t in tiles]

    def encode(tile: sparse.csr_matrix) -> bytes:
        return encode_tile(tile.indptr, tile.indices, tile.data, csr.shape[1], level=DEFAULT_LEVEL, threads=1)

    def zstd_alone(data: bytes) -> bytes:
        return zstandard.ZstdCompressor(level=DEFAULT_LEVEL).compress(data)

    best: dict[str, float] = {}
    with ThreadPoolExecutor(1) as one, ThreadPoolExecutor(2) as two:
        for _ in range(repeat + 1):
            for label, pool, func, items in (
                ("encode_tile, 1 thread", one, encode, tiles),
                ("encode_tile, 2 threads", two, encode, tiles),
                ("zstd alone, 1 thread", one, zstd_alone, raw),
                ("zstd alone, 2 threads", two, zstd_alone, raw),
            ):
                t0 = time.perf_counter()
                list(pool.map(func, items * 2))
                best[label] = min(best.get(label, np.inf), time.perf_counter() - t0)
    return {
        "encode_tile_2_vs_1_speedup": best["encode_tile, 1 thread"] / best["encode_tile, 2 threads"],
        "zstd_alone_2_vs_1_speedup": best["zstd alone, 1 thread"] / best["zstd alone, 2 threads"],
        "encode_tile_1_thread_mnnz_s": 2 * csr.nnz / best["encode_tile, 1 thread"] / 1e6,
    }


def peak_memory(run: Callable[[], Path | None]) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench(name: str, adata: Any, repeat: int, workdir: Path, levels: list[int]) -> dict[str, Any]:
    todo = methods(adata, workdir, levels)
    best = dict.fromkeys(todo, np.inf)
    sizes: dict[str, int] = {}
    for round_ in range(repeat + 1):  # round 0 warms up (imports, first allocations) and is not timed
        for label, run in todo.items():
            t0 = time.perf_counter()
            out = run()
            if round_:
                best[label] = min(best[label], time.perf_counter() - t0)
            if out is not None:
                sizes[label] = size_on_disk(out)
                if label == "deltacells default, 2 threads":
                    parts = parts_on_disk(out)
                shutil.rmtree(out) if out.is_dir() else out.unlink()
    peaks = {}
    for label, run in todo.items():
        peaks[label] = peak_memory(run)
    for out in (workdir / "out.deltacells", workdir / "out.h5ad", workdir / "out.zarr"):
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
    gzip_s, gzip_b = best["h5ad gzip"], sizes["h5ad gzip"]
    rows = [
        {
            "method": label,
            "seconds": best[label],
            "time_vs_gzip_h5ad": best[label] / gzip_s,
            "bytes": sizes.get(label),
            "size_vs_gzip_h5ad": sizes[label] / gzip_b if label in sizes else None,
            "peak_traced_mb": peaks[label] / 2**20,
        }
        for label in todo
    ]
    second = best["deltacells default, 2 threads"] - best["first pass (gene totals)"]
    scaling = thread_scaling(adata, repeat)
    nnz = int(adata.X.nnz)
    return {
        "matrix": name,
        "n_cells": adata.n_obs,
        "n_genes": adata.n_vars,
        "nnz": nnz,
        "rows": rows,
        "default_parts_bytes": parts,  # the default dataset's bytes by object (tiles/, var.parquet, obs/, ...)
        "first_pass_s": best["first pass (gene totals)"],
        "second_pass_s": second,
        "first_vs_second_pass": best["first pass (gene totals)"] / second,
        "threads_2_vs_1_speedup": best["deltacells default, 1 thread"] / best["deltacells default, 2 threads"],
        **scaling,
    }


def print_result(result: dict[str, Any]) -> None:
    print(
        f"\n{result['matrix']}: {result['n_cells']:,} cells x {result['n_genes']:,} genes, {result['nnz']:,} nonzeros"
    )
    print(f"{'method':34s} {'s':>7s} {'x gzip':>7s} {'MB':>7s} {'size x gzip':>11s} {'peak MB':>8s}")
    for row in result["rows"]:
        size = "" if row["bytes"] is None else f"{row['bytes'] / 1e6:7.2f}"
        frac = "" if row["size_vs_gzip_h5ad"] is None else f"{row['size_vs_gzip_h5ad']:11.3f}"
        print(
            f"{row['method']:34s} {row['seconds']:7.3f} {row['time_vs_gzip_h5ad']:7.2f} {size:>7s} {frac:>11s} "
            f"{row['peak_traced_mb']:8.1f}"
        )
    gzip_bytes = next(row["bytes"] for row in result["rows"] if row["method"] == "h5ad gzip")
    parts = ", ".join(
        f"{name} {size / 1e3:,.0f} KB ({size / gzip_bytes:.3f})" for name, size in result["default_parts_bytes"].items()
    )
    print(f"the default dataset by object (x gzip h5ad): {parts}")
    print(
        f"first pass {result['first_pass_s']:.3f} s, second pass {result['second_pass_s']:.3f} s "
        f"(first / second = {result['first_vs_second_pass']:.2f}); "
        f"2 threads vs 1: {result['threads_2_vs_1_speedup']:.2f}x faster"
    )
    print(
        f"tiles alone, 2 threads vs 1: encode_tile {result['encode_tile_2_vs_1_speedup']:.2f}x, zstd alone "
        f"{result['zstd_alone_2_vs_1_speedup']:.2f}x (the parallelism the machine gave); encode_tile on one "
        f"thread {result['encode_tile_1_thread_mnnz_s']:.1f} M nonzeros/s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small matrices, one round (seconds; for CI)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--cells", type=int, default=100_000, help="cells of the resampled matrix")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; times are the best round")
    parser.add_argument("--levels", default="", help="other zstd levels to time too, e.g. '1,6,9'")
    args = parser.parse_args(argv)
    started = now()
    if args.quick:
        args.cells, args.repeat = 3000, 1
    warnings.filterwarnings("ignore", module="anndata")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp:
        for name, adata in load_matrices(args.cells, args.quick):
            t0 = time.perf_counter()
            levels = [int(x) for x in args.levels.split(",") if x]
            results.append(bench(name, adata, args.repeat, Path(tmp), levels))
            print_result(results[-1])
            print(f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    doc = {
        "benchmark": "bench_convert",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "repeat": args.repeat,
        "results": results,
    }
    write_json(args.json, doc, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
