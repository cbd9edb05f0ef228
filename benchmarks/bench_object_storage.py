"""Reading from object storage: full scans and random subsets from local disk, an S3 server, and S3 + latency.

One run, one machine: a synthetic dataset (``deltacells.datasets.synthetic_counts``) is written to a local
directory and to a bucket of moto's S3-protocol server on 127.0.0.1 (the test suite's server); the bucket
is read through the test suite's recording proxy, which adds a fixed delay to every request (a network
round trip) and counts requests, bytes and requests in flight. Measured, for each place:

* full scan: every tile fetched and decoded in order (``Dataset.iter_tiles``, what a loader or a map over
  the dataset does), cells per second;
* fetch only: every tile fetched as the scan fetches them, nothing decoded (what the storage alone allows);
* random subsets of 0.1%, 1% and 10% of the cells (``Dataset.read_rows`` of sorted random cells): cells per
  second of the dataset's size, requests, bytes moved and their share of the dataset's tile bytes.

With ``--compare-chunks 16`` (the default) the same cells are also written with 16 chunks per tile, and the
smallest subset is read from it through the proxy with latency: ranged reads are as fine as the chunks, for
some more bytes on disk.

Needs the test dependencies (``pip install -e . --group test``: moto[server], s3fs, aiohttp). Usage::

    python benchmarks/bench_object_storage.py                 # 100,000 x 2,000, 30 ms added per request
    python benchmarks/bench_object_storage.py --json docs/_data/object-storage.json   # the documentation's
    python benchmarks/bench_object_storage.py --cells 2000000 --latency 0.03 --json out.json
    python benchmarks/bench_object_storage.py --quick         # small, for CI (never writes into docs/_data)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test suite's servers (tests/servers)

from _record import now, write_json

import deltacells
from deltacells.core import open_dataset
from deltacells.datasets import synthetic_counts


def _scan(url: str, options: dict[str, Any] | None) -> tuple[float, int]:
    dataset = open_dataset(url, storage_options=options, tile_cache_bytes=0)
    t0 = time.perf_counter()
    cells = 0
    for _, tile in dataset.iter_tiles():
        cells += tile.n_cells
    return time.perf_counter() - t0, cells


def _fetch_only(url: str, options: dict[str, Any] | None) -> float:
    """Every tile fetched (as the scan fetches them), nothing decoded: what the storage alone allows."""
    dataset = open_dataset(url, storage_options=options, tile_cache_bytes=0)
    sizes = dataset.manifest.tile_bytes
    requests = [(f"tiles/tile_{t:06d}.dct", 0, int(sizes[t]) + 1) for t in range(dataset.n_tiles)]
    t0 = time.perf_counter()
    dataset.store.read_many(requests)
    return time.perf_counter() - t0


def _subset(url: str, options: dict[str, Any] | None, cells: np.ndarray) -> float:
    dataset = open_dataset(url, storage_options=options, tile_cache_bytes=0)
    t0 = time.perf_counter()
    matrix = dataset.read_rows(cells)
    assert matrix.shape[0] == cells.shape[0]
    return time.perf_counter() - t0


def _by_file(records: list[Any]) -> dict[str, int]:
    """Requests per kind of file (the key's last part, tiles' numbers left out), most requested first."""
    counts: dict[str, int] = {}
    for record in records:
        name = record.path.rstrip("/").rsplit("/", 1)[-1]
        kind = "tiles/*" if "/tiles/" in record.path else f"{record.method} {name if '.' in name else '(prefix)'}"
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def _cpu_seconds() -> float:
    """CPU seconds this process (moto's server and the proxies) has used, all its threads."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def start_servers(latency: float) -> tuple[Any, Any, str, list[str]]:
    """moto's S3 server and two recording proxies (none, ``latency``) in a process of their own (:func:`_serve`).

    Returns the process, the connection that commands it, the server's endpoint and the proxies' URLs; sets
    the test credentials in this process's environment (where not set) for the clients.
    """
    import multiprocessing

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        os.environ.setdefault(key, value)
    ctx = multiprocessing.get_context("spawn")
    conn, child_conn = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(child_conn, latency), daemon=True)
    process.start()
    endpoint, proxy_urls = conn.recv()
    return process, conn, endpoint, proxy_urls


def _serve(conn: Any, latency: float) -> None:
    """Run moto's S3 server and two recording proxies (no latency, ``latency``), answering commands from ``conn``.

    In a process of its own, so that the servers do not take the benchmark's GIL.
    """
    from tests.servers.proxy import RecordingProxy
    from tests.servers.s3 import S3Server

    with S3Server() as server:
        proxies = [RecordingProxy(server.endpoint_url).start(), RecordingProxy(server.endpoint_url).start()]
        proxies[1].latency = latency
        conn.send((server.endpoint_url, [proxy.url for proxy in proxies]))
        cpu_at_reset = _cpu_seconds()
        try:
            while True:
                command, index = conn.recv()
                if command == "stop":
                    break
                proxy = proxies[index]
                if command == "reset":
                    proxy.reset()
                    cpu_at_reset = _cpu_seconds()
                    conn.send(None)
                elif command == "stats":
                    tiles = proxy.requests(path_contains="/tiles/")
                    conn.send(
                        {
                            "requests": proxy.count(),
                            "tile_requests": len(tiles),
                            "bytes": sum(r.bytes for r in tiles),
                            "max_in_flight": proxy.max_in_flight,
                            "by_file": _by_file(proxy.requests()),
                            "server_cpu_s": _cpu_seconds() - cpu_at_reset,
                        }
                    )
        finally:
            for proxy in proxies:
                proxy.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--tile-size", type=int, default=2048)
    parser.add_argument("--n-chunks", type=int, default=8, help="chunks per tile (the granularity of ranged reads)")
    parser.add_argument("--latency", type=float, default=0.03, help="seconds added to each request")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.001, 0.01, 0.1])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measure (the best is kept)")
    parser.add_argument(
        "--compare-chunks", type=int, default=16, help="also read the smallest subset with this many chunks (0: no)"
    )
    parser.add_argument("--quick", action="store_true", help="10,000 cells, 1 run")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.cells, args.repeat = 10_000, 1
    from tests.servers.s3 import S3Server

    adata = synthetic_counts(min(args.cells, 25_000), args.genes, seed=0)
    if args.cells > adata.n_obs:  # repeat blocks of generated cells (generating is slower than reading)
        import anndata as ad

        reps = -(-args.cells // adata.n_obs)
        adata = ad.concat([adata] * reps)[: args.cells].copy()
        adata.obs_names_make_unique()
    nnz = int(adata.X.nnz)
    rng = np.random.default_rng(0)
    subsets = {f: np.sort(rng.choice(args.cells, max(1, round(f * args.cells)), replace=False)) for f in args.fractions}

    servers, conn, endpoint, proxy_urls = start_servers(args.latency)
    server = S3Server()  # only for its storage options and client (the server runs in the other process)
    server._endpoint_url = endpoint

    def command(name: str, index: int) -> Any:
        conn.send((name, index))
        return conn.recv()

    with tempfile.TemporaryDirectory() as tmp:
        local = str(Path(tmp) / "ds")
        deltacells.write_deltacells(
            adata, local, tile_size=args.tile_size, n_chunks=args.n_chunks, level=3, obs_columns=[], progress=False
        )
        bucket = server.make_bucket(f"bench-{uuid.uuid4().hex[:8]}")
        url = f"s3://{bucket}/ds"
        deltacells.write_deltacells(
            adata,
            url,
            tile_size=args.tile_size,
            n_chunks=args.n_chunks,
            level=3,
            obs_columns=[],
            progress=False,
            storage_options=server.storage_options(),
        )
        manifest = open_dataset(local).manifest
        tile_bytes = int(manifest.tile_bytes.sum())
        compare_url = None
        if args.compare_chunks and args.compare_chunks != args.n_chunks:
            compare_url = f"s3://{bucket}/ds-{args.compare_chunks}-chunks"
            deltacells.write_deltacells(
                adata,
                compare_url,
                tile_size=args.tile_size,
                n_chunks=args.compare_chunks,
                level=3,
                obs_columns=[],
                progress=False,
                storage_options=server.storage_options(),
            )
        places: dict[str, tuple[str, int | None]] = {
            "local disk": (local, None),
            "S3 server": (url, 0),
            f"S3 + {args.latency * 1e3:g} ms": (url, 1),
        }
        results: dict[str, Any] = {}
        _scan(local, None)  # warm-up: numba's kernels load, the page cache holds the local tiles
        try:
            for place, (where, proxy) in places.items():
                options = server.storage_options(proxy_urls[proxy]) if proxy is not None else None
                row: dict[str, Any] = {}
                measures: list[tuple[str, Any]] = [("full scan", None), ("fetch only", "fetch")]
                measures += [(f"{f:.1%} random", f) for f in subsets]
                for name, fraction in measures:
                    best, stats = float("inf"), None
                    for _ in range(args.repeat):
                        if proxy is not None:
                            command("reset", proxy)
                        if fraction is None:
                            seconds, cells = _scan(where, options)
                            assert cells == args.cells
                        elif fraction == "fetch":
                            seconds = _fetch_only(where, options)
                        else:
                            seconds = _subset(where, options, subsets[fraction])
                        if seconds < best:
                            best = seconds
                            stats = command("stats", proxy) if proxy is not None else None
                    entry: dict[str, Any] = {"seconds": round(best, 4), "cells_per_s": round(args.cells / best)}
                    if fraction not in (None, "fetch"):
                        entry["cells_read"] = int(subsets[fraction].shape[0])
                    if stats:
                        entry.update(stats, share_of_tile_bytes=round(stats["bytes"] / tile_bytes, 4))
                    row[name] = entry
                results[place] = row
            if compare_url is not None:  # the smallest subset, through the proxy with latency
                fraction = min(subsets)
                options = server.storage_options(proxy_urls[1])
                best, stats = float("inf"), None
                for _ in range(args.repeat):
                    command("reset", 1)
                    seconds = _subset(compare_url, options, subsets[fraction])
                    if seconds < best:
                        best, stats = seconds, command("stats", 1)
                other_bytes = int(open_dataset(compare_url, storage_options=options).manifest.tile_bytes.sum())
                compared = {
                    "n_chunks": args.compare_chunks,
                    "tile_bytes": other_bytes,
                    "tile_bytes_vs_default": round(other_bytes / tile_bytes, 4),
                    "measure": f"{fraction:.1%} random",
                    "place": list(places)[2],
                    "seconds": round(best, 4),
                    **(stats or {}),
                }
                if stats:
                    compared["share_of_tile_bytes"] = round(stats["bytes"] / other_bytes, 4)
        finally:
            conn.send(("stop", 0))
            servers.join(30)

    local_scan = results["local disk"]["full scan"]["cells_per_s"]
    print(
        f"{args.cells:,} cells x {args.genes:,} genes ({nnz / args.cells:.0f} nonzeros per cell), "
        f"{manifest.n_tiles} tiles of {args.tile_size} ({args.n_chunks} chunks), "
        f"{tile_bytes / 2**20:.1f} MiB of tiles, zstd 3; "
        f"{platform.machine()}, {os.cpu_count()} CPUs; best of {args.repeat}"
    )
    header = f"{'':<16}{'measure':<14}{'cells/s':>11}{'vs local':>10}{'requests':>10}{'MiB moved':>11}{'share':>8}"
    print(header + f"{'in flight':>11}")
    for place, row in results.items():
        for name, entry in row.items():
            ratio = f"{entry['cells_per_s'] / local_scan:.2f}x" if name == "full scan" else ""
            moved = f"{entry['bytes'] / 2**20:.2f}" if "bytes" in entry else ""
            share = f"{entry['share_of_tile_bytes']:.1%}" if "bytes" in entry else ""
            print(
                f"{place:<16}{name:<14}{entry['cells_per_s']:>11,}{ratio:>10}{entry.get('requests', ''):>10}"
                f"{moved:>11}{share:>8}{entry.get('max_in_flight', ''):>11}"
            )
    if compare_url is not None:
        print(
            f"{args.compare_chunks} chunks a tile ({compared['tile_bytes_vs_default']:.3f}x the tile bytes): "
            f"{compared['measure']} through {compared['place']}: {compared.get('requests', '')} requests, "
            f"{compared.get('share_of_tile_bytes', 0):.1%} of the tile bytes moved"
        )
    if args.json:
        doc = {
            "benchmark": "bench_object_storage",
            "data": f"synthetic_counts, {args.cells} cells x {args.genes} genes, {nnz} nonzeros",
            "n_cells": args.cells,
            "n_genes": args.genes,
            "nnz": nnz,
            "tile_size": args.tile_size,
            "n_chunks": args.n_chunks,
            "zstd_level": 3,
            "repeat": args.repeat,
            "latency_s": args.latency,
            "n_tiles": manifest.n_tiles,
            "tile_bytes": tile_bytes,
            "results": results,
            "compare_chunks": compared if compare_url is not None else None,
        }
        write_json(args.json, doc, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
