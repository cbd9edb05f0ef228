"""Decode speed of deltacells against its floor (zstd alone) and against anndata (h5ad, zarr).

All figures come from one run on one machine and are reported as ratios, so they can be
compared across machines. Timings are the best of ``--repeat`` runs, the contenders taken in
turn (so that a change of load on the machine hits all of them alike). Usage::

    python benchmarks/bench_decode.py                                  # synthetic data (100,000 x 10,000)
    python benchmarks/bench_decode.py --visium PATH                    # the 10x matrix in ../shared/data
    python benchmarks/bench_decode.py --visium PATH --resample 30000   # its cells drawn with replacement
    python benchmarks/bench_decode.py --quick                          # seconds (CI)

Measures:

- ``zstd alone``: python-zstandard decompressing every gaps and vals frame of the dataset, one thread:
  the floor, what no decoder of these frames can beat; ``into one buffer``: the same, each frame into one
  reused buffer (as deltacells' decoder does), the decompression alone, without the fresh memory that
  ``decompress()`` returns for each frame (and ``decode_tile`` for each tile);
- ``decode_tile``: every tile decoded (all checks), one thread, each tile dropped before the next;
- ``full read``: ``open_dataset(path).read_rows()`` into a float32 CSR, with 1 and 2 threads;
- ``read_deltacells + X.to_memory()``: the AnnData path, default threads, against
  ``anndata.read_h5ad(path).X`` (gzip, lzf, uncompressed) and ``anndata.read_zarr(path).X``, all from the
  page cache;
- ``open``: ``read_deltacells(path)`` alone (manifest, var, obs names from the local cache, the AnnData;
  no tile decoded), the part of the line above that is not ``X``;
- ``checks``: what ``decode_tile`` checks before it decompresses (``check_tile_bytes``: header, CRC-32 of the
  payload, indptr, chunk table, frame sizes), every tile, one thread; and the CRC-32 alone, as the decoder
  computes it (zlib-ng) and as CPython's ``zlib`` does, in GB/s;
- ``two processes of pure Python``: what this machine's second core gives to work that shares nothing
  (a Python loop in one process, against half of it in each of two), beside ``zstd alone, 2 threads``.

``--json docs/_data/decode-visium.json`` (or ``decode-30k.json``) rewrites the figures the documentation
quotes; a ``--quick`` run never does (``_record.py``).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anndata as ad
import numpy as np
import zstandard
from _frames import dataset_frames
from _record import now, write_json
from _steal import cpu_ticks, steal_share
from _visium import resampled_rows
from scipy import sparse

import deltacells as dc
from deltacells.codec._crc import crc32
from deltacells.codec._decode import check_tile_bytes
from deltacells.codec._layout import (
    HEADER_SIZE,
)
from deltacells.datasets import synthetic_counts
from deltacells.format import tile_path


def best_of(contenders: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best wall time (s) of each contender over ``repeat`` rounds, after one warm-up call each."""
    for fn in contenders.values():
        fn()
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeat):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def _spin(n: int) -> float:
    """A loop of pure Python (``n`` additions), timed in the process that runs it."""
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - t0


def python_processes_speedup(repeat: int, n: int = 3_000_000) -> float:
    """How much faster two processes do two loops of pure Python than one process does both, best of ``repeat``.

    The processes are started (and warmed up) before the timing; each loop is timed where it runs, so the
    figure is the machine's, not the start of processes.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_spin, [n // 10, n // 10]))
        best = 0.0
        for _ in range(repeat):
            one = pool.submit(_spin, 2 * n).result()
            two = max(pool.map(_spin, [n, n]))
            best = max(best, one / two)
    return best


def load(args: argparse.Namespace) -> tuple[str, sparse.csr_matrix]:
    if args.visium:
        import scanpy as sc

        adata = sc.read_10x_mtx(args.visium)
        X = sparse.csr_matrix(adata.X)
        label = f"visium-cytassist {X.shape[0]:,} x {X.shape[1]:,}"
        if args.resample:
            rows = resampled_rows(X.shape[0], args.resample)
            X = X[rows]
            label = f"{args.resample:,} cells resampled from {label}"
        return label, X
    adata = synthetic_counts(args.cells, args.genes, seed=0)
    return f"synthetic {args.cells:,} x {args.genes:,}", adata.X


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--genes", type=int, default=10_000)
    parser.add_argument("--visium", type=Path, default=None, help="a 10x mtx directory")
    parser.add_argument("--resample", type=int, default=0, help="with --visium: draw this many of its cells")
    parser.add_argument("--level", default=None, help="zstd level or preset (default: the writer's default)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--quick", action="store_true", help="a small synthetic matrix, 2 rounds (CI)")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.cells, args.genes, args.repeat, args.visium = 2000, 500, 2, None

    label, X = load(args)
    X = sparse.csr_matrix(X, dtype=np.int32)
    nnz = X.nnz
    print(f"data: {label}, {nnz:,} nonzeros ({nnz / X.shape[0]:,.0f} per cell)")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        adata = ad.AnnData(X=X.astype(np.float32))
        adata.obs_names = [f"c{i}" for i in range(X.shape[0])]
        adata.var_names = [f"g{j}" for j in range(X.shape[1])]
        options = {} if args.level is None else {"level": int(args.level) if args.level.isdigit() else args.level}
        t0 = time.perf_counter()
        dc.write_deltacells(adata, root / "ds", progress=False, **options)
        t_write = time.perf_counter() - t0
        ds = dc.open_dataset(root / "ds", tile_cache_bytes=0)
        stored = int(ds.manifest.tile_bytes.sum())
        level = ds.manifest.to_dict().get("zstd_level")
        print(
            f"deltacells: {ds.n_tiles} tiles, zstd level {level}, {stored / 1e6:.2f} MB "
            f"({stored / nnz:.3f} B/nonzero), written at {X.shape[0] / t_write:,.0f} cells/s"
        )

        blobs = [(root / "ds" / tile_path(i)).read_bytes() for i in range(ds.n_tiles)]
        frames = dataset_frames(blobs)
        dctx = zstandard.ZstdDecompressor()

        def zstd_only() -> None:
            for frame in frames:
                dctx.decompress(frame)

        scratch = bytearray(max((zstandard.get_frame_parameters(f).content_size for f in frames), default=0))

        def zstd_into_one_buffer() -> None:  # the decompression alone: no output memory to map, frame after frame
            for frame in frames:
                dctx.stream_reader(frame, read_size=len(frame) or 1).readinto(scratch)

        pool = ThreadPoolExecutor(2)

        def zstd_part(part: list[bytes]) -> None:
            local = zstandard.ZstdDecompressor()
            for frame in part:
                local.decompress(frame)

        def zstd_two_threads() -> None:  # what two threads of this machine give on the floor's own work
            list(pool.map(zstd_part, [frames[0::2], frames[1::2]]))

        def decode_tiles_one_thread() -> None:
            for blob in blobs:
                dc.decode_tile(blob, threads=1)

        one = dc.open_dataset(root / "ds", tile_cache_bytes=0, threads=1)
        two = dc.open_dataset(root / "ds", tile_cache_bytes=0, threads=2)
        engine = {
            "zstd alone, 1 thread (floor)": zstd_only,
            "zstd alone, 2 threads": zstd_two_threads,
            "zstd alone, into one buffer": zstd_into_one_buffer,
            "decode_tile, 1 thread": decode_tiles_one_thread,
            "full read, 1 thread": lambda: one.read_rows(dtype=np.float32),
            "full read, 2 threads": lambda: two.read_rows(dtype=np.float32),
        }
        ticks = cpu_ticks()
        results = best_of(engine, args.repeat)
        engine_steal = steal_share(ticks, cpu_ticks())
        payloads = [memoryview(blob)[HEADER_SIZE:] for blob in blobs]
        checks = best_of(
            {
                "check_tile_bytes": lambda: [check_tile_bytes(blob) for blob in blobs],
                "crc32 (deltacells: zlib-ng)": lambda: [crc32(p) for p in payloads],
                "crc32 (zlib)": lambda: [zlib.crc32(p) for p in payloads],
            },
            args.repeat,
        )
        payload_bytes = sum(p.nbytes for p in payloads)
        two_processes = python_processes_speedup(args.repeat)

        sizes = {}
        stores: dict[str, Callable[[], object]] = {
            "deltacells": lambda: dc.read_deltacells(root / "ds", cache_dir=root / "cache").X.to_memory()
        }
        for name, kwargs in (
            ("h5ad none", {}),
            ("h5ad lzf", {"compression": "lzf"}),
            ("h5ad gzip", {"compression": "gzip"}),
        ):
            path = root / f"{name.replace(' ', '_')}.h5ad"
            adata.write_h5ad(path, **kwargs)
            sizes[name] = path.stat().st_size
            stores[name] = lambda p=path: ad.read_h5ad(p).X
        zpath = root / "x.zarr"
        adata.write_zarr(zpath)
        sizes["zarr"] = sum(f.stat().st_size for f in zpath.rglob("*") if f.is_file())
        stores["zarr"] = lambda: ad.read_zarr(zpath).X
        ticks = cpu_ticks()
        reads = best_of(stores, max(2, args.repeat // 2))
        stores_steal = steal_share(ticks, cpu_ticks())
        opened = best_of({"open": lambda: dc.read_deltacells(root / "ds", cache_dir=root / "cache")}, args.repeat)

    floor = results["zstd alone, 1 thread (floor)"]
    print(f"\n{'engine':34} {'ms':>9} {'M nnz/s':>9} {'floor / time':>12}")
    for what, seconds in results.items():
        print(f"{what:34} {seconds * 1e3:9.1f} {nnz / seconds / 1e6:9.0f} {floor / seconds:12.2f}")
    print(
        f"2 threads vs 1: full read {results['full read, 1 thread'] / results['full read, 2 threads']:.2f}x, "
        f"zstd alone {results['zstd alone, 1 thread (floor)'] / results['zstd alone, 2 threads']:.2f}x"
    )

    print(
        f"checks before decompression (check_tile_bytes): {checks['check_tile_bytes'] * 1e3:.2f} ms, "
        f"{checks['check_tile_bytes'] / results['decode_tile, 1 thread']:.1%} of decode_tile's time; CRC-32 of "
        f"{payload_bytes / 1e6:.1f} MB: zlib-ng {payload_bytes / checks['crc32 (deltacells: zlib-ng)'] / 1e9:.1f} "
        f"GB/s, zlib {payload_bytes / checks['crc32 (zlib)'] / 1e9:.1f} GB/s"
    )
    print(f"two processes of pure Python against one: {two_processes:.2f}x")
    for what, share in (("engine timings", engine_steal), ("store reads", stores_steal)):
        if share is not None:
            print(f"CPU time stolen by the hypervisor during the {what}: {share:.0%}")

    ours = reads["deltacells"]
    print(f"\nread_deltacells alone (open, no X): {opened['open'] * 1e3:.1f} ms of the {ours * 1e3:.1f} below")
    print(f"\n{'store (open + X in memory)':28} {'MB':>8} {'B/nnz':>7} {'ms':>8} {'deltacells faster by':>21}")
    print(f"{'deltacells':28} {stored / 1e6:8.2f} {stored / nnz:7.3f} {ours * 1e3:8.1f} {1.0:20.2f}x")
    for name, size in sizes.items():
        print(f"{name:28} {size / 1e6:8.2f} {size / nnz:7.3f} {reads[name] * 1e3:8.1f} {reads[name] / ours:20.2f}x")

    if args.json:
        crc_s = checks["crc32 (deltacells: zlib-ng)"]
        record = {
            "data": label,
            "nnz": nnz,
            "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} CPUs, "
            f"Python {platform.python_version()}",
            "deltacells": {"tiles": ds.n_tiles, "zstd_level": level, "mb": stored / 1e6},
            "engine_ms": {k: v * 1e3 for k, v in results.items()},
            "steal": {"engine": engine_steal, "stores": stores_steal},  # shares of CPU time (None: unknown)
            "open_ms": opened["open"] * 1e3,  # read_deltacells alone: the AnnData, no X
            "checks": {  # what decode_tile checks before decompressing, and the CRC-32 alone
                "check_tile_bytes_ms": checks["check_tile_bytes"] * 1e3,
                "share_of_decode_tile": checks["check_tile_bytes"] / results["decode_tile, 1 thread"],
                "crc32_ms": crc_s * 1e3,
                "payload_bytes": payload_bytes,
                "crc32_gb_s": payload_bytes / crc_s / 1e9,
                "zlib_crc32_gb_s": payload_bytes / checks["crc32 (zlib)"] / 1e9,
            },
            "python_two_processes_speedup": two_processes,  # 2 loops in 2 processes against both in one
            "stores": {
                name: {"mb": (stored if name == "deltacells" else sizes[name]) / 1e6, "read_ms": reads[name] * 1e3}
                for name in reads
            },
        }
        write_json(args.json, record, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
