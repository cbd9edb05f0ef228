"""The two clients of ``s3://`` side by side: fsspec (s3fs, botocore) and obstore, on a full scan and a fetch.

One run, one machine. ``--cells`` Visium cells drawn with replacement (100,000 by default; the object-storage
benchmark's resampled matrix, default chunking) are written to a local directory and to a bucket of moto's S3
server (the test suite's). Two servers, in a process of their own pinned to the first CPU, each adding
``--latency`` to every request; the client runs pinned to the second CPU, so that it has a core of its own:

* **moto**: moto's server behind the suite's recording proxy (a second HTTP hop), the S3 the tests use;
* **fast**: ``tests.servers.s3_mirror.MirrorS3Server``, a read-only S3 endpoint over the local copy (one aiohttp
  hop, a file read per GET), so that the client, not the server, is what is measured.

In turns (fsspec, obstore, fsspec, obstore...; the best of ``--repeat`` kept), for each server:

* the **local scan**: ``Dataset.iter_tiles`` of the local copy, one decoding thread (the reference);
* the **remote scan** with each client: the same through the server;
* the **fetch** with each client: every tile fetched (``read_many``), nothing decoded.

Reported: seconds, the remote scan's rate as a share of the local scan's, requests, and the client's CPU per
GET: of the fetch (the client's CPU over the requests), and of the scan (its CPU less the local scan's, over the
requests); the servers' CPU per GET, and what moto and the proxy each cost (a fetch from moto directly, then
through the proxy without latency). The scan makes one GET per tile, ``io_concurrency`` (32) in flight; the first
round trip (``--latency``) and the last tile's decoding are paid once, so the larger ``--cells``, the closer the
remote scan can come to the local one (1,000,000 cells: 490 tiles, about 2 s of local scan).

Needs the test dependencies (``pip install -e . --group test``: moto[server], s3fs, obstore, aiohttp). Usage::

    python benchmarks/bench_s3_clients.py --json docs/_data/s3-clients.json   # a few minutes
    python benchmarks/bench_s3_clients.py --cells 1000000                      # the scan goal's dataset
    python benchmarks/bench_s3_clients.py --quick                              # 10,000 cells, CI (no docs/_data)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test suite's servers (tests/servers)

from _cpus import pinned, usable
from _record import now, write_json
from _visium import VISIUM, resampled_rows
from bench_object_storage import Bench

from deltacells.codec import DEFAULT_N_CHUNKS
from deltacells.core import open_dataset
from deltacells.storage import BaseStore, FsspecStore, ObstoreStore

CLIENTS = {"fsspec": FsspecStore, "obstore": ObstoreStore}


def _scan(where: str | BaseStore) -> tuple[float, float]:
    """A full scan of the dataset (opened first, not timed), one decoding thread: seconds, CPU seconds."""
    dataset = open_dataset(where, tile_cache_bytes=0, threads=1)
    cpu, t0 = time.process_time(), time.perf_counter()
    cells = sum(tile.n_cells for _, tile in dataset.iter_tiles())
    assert cells == dataset.n_cells
    return time.perf_counter() - t0, time.process_time() - cpu


def _fetch(store: BaseStore) -> tuple[float, float]:
    """Every tile fetched, nothing decoded: seconds, CPU seconds."""
    dataset = open_dataset(store, tile_cache_bytes=0)
    sizes = dataset.manifest.tile_bytes
    requests = [(f"tiles/tile_{t:06d}.dct", 0, int(sizes[t]) + 1) for t in range(dataset.n_tiles)]
    cpu, t0 = time.process_time(), time.perf_counter()
    got = dataset.store.read_many(requests)
    assert sum(map(len, got)) == int(sizes.sum())
    return time.perf_counter() - t0, time.process_time() - cpu


def _resampled(n_cells: int) -> Any:
    import numpy as np
    import scanpy as sc
    from scipy import sparse

    visium = sc.read_10x_mtx(VISIUM)
    visium.X = sparse.csr_matrix(visium.X, dtype=np.float32)
    adata = visium[resampled_rows(visium.n_obs, n_cells)].copy()
    adata.obs_names = [f"cell-{i}" for i in range(n_cells)]
    return adata


#: The servers a remote scan is measured against: the recording proxy in front of moto (1), the mirror (2).
SERVERS = {"moto": 1, "fast": 2}


def _server_costs(bench: Bench, url: str, n_tiles: int) -> dict[str, float]:
    """CPU milliseconds per GET of moto alone, of moto behind the proxy (no latency), and of the mirror server.

    Each is a fetch of every tile with obstore (the best of ``--repeat``); moto alone has no proxy to count its
    requests: the fetch makes one GET per tile.
    """
    costs: dict[str, list[float]] = {"moto": [], "moto + proxy": [], "fast": []}
    for _ in range(bench.args.repeat):
        before = bench.command("cpu", 0)
        _fetch(ObstoreStore(url, bench.options(None)))
        costs["moto"].append((bench.command("cpu", 0) - before) / n_tiles)
        for name, proxy, where in (("moto + proxy", 0, url), ("fast", 2, f"s3://{Bench.MIRROR}/resampled")):
            bench.command("reset", proxy)
            _fetch(ObstoreStore(where, bench.options(proxy)))
            stats = bench.command("stats", proxy)
            costs[name].append(stats["server_cpu_s"] / stats["requests"])
    best = {name: round(min(values) * 1e3, 3) for name, values in costs.items()}
    best["proxy"] = round(best["moto + proxy"] - best["moto"], 3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100_000, help="resampled Visium cells")
    parser.add_argument("--latency", type=float, default=0.03, help="seconds added to each request")
    parser.add_argument("--repeat", type=int, default=5, help="turns of each measure (the best is kept)")
    parser.add_argument("--no-pin", action="store_true", help="pin neither the server nor the client")
    parser.add_argument("--quick", action="store_true", help="10,000 cells, 2 turns (CI)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.cells, args.repeat = 10_000, 2
    adata = _resampled(args.cells)
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args, Path(tmp), mirror=True)
        try:
            local, url = bench.write(adata, "resampled", DEFAULT_N_CHUNKS)
            del adata
            where = {"moto": url, "fast": f"s3://{Bench.MIRROR}/resampled"}
            manifest = open_dataset(local).manifest
            _scan(local)  # numba's kernels load, the page cache holds the tiles
            best: dict[str, dict[str, Any]] = {}

            def keep(name: str, seconds: float, cpu: float, proxy: int | None) -> None:
                stats = bench.command("stats", proxy) if proxy is not None else {}
                if name not in best or seconds < best[name]["seconds"]:
                    best[name] = {"seconds": seconds, "cpu_s": cpu, **stats}
                best[name]["min_cpu_s"] = min(cpu, best[name].get("min_cpu_s", cpu))

            with pinned(bench.client_cpus):
                for _ in range(args.repeat):
                    for server, proxy in SERVERS.items():
                        keep("local scan", *_scan(local), None)
                        remote = bench.options(proxy)
                        for client, cls in CLIENTS.items():
                            bench.command("reset", proxy)
                            keep(f"{server} {client} scan", *_scan(cls(where[server], remote)), proxy)
                            bench.command("reset", proxy)
                            keep(f"{server} {client} fetch", *_fetch(cls(where[server], remote)), proxy)
                servers = _server_costs(bench, url, manifest.n_tiles)
        finally:
            bench.close()
    local_best = best["local scan"]
    doc: dict[str, Any] = {
        "data": f"{args.cells:,} Visium cells drawn with replacement ({int(manifest.nnz):,} nonzeros)",
        "n_cells": args.cells,
        "n_tiles": manifest.n_tiles,
        "n_chunks": DEFAULT_N_CHUNKS,
        "tile_bytes": int(manifest.tile_bytes.sum()),
        "latency_s": args.latency,
        "repeat": args.repeat,
        "pinned": len(usable()) >= 2 and not args.no_pin,
        "local_scan_s": round(local_best["seconds"], 4),
        "local_scan_cpu_s": round(local_best["min_cpu_s"], 4),
        "server_cpu_per_get_ms": servers,
        "servers": {},
    }
    for server in SERVERS:
        rows: dict[str, Any] = {}
        for client in CLIENTS:
            scan, fetch = best[f"{server} {client} scan"], best[f"{server} {client} fetch"]
            gets = int(scan["tile_requests"])
            rows[client] = {
                "scan_s": round(scan["seconds"], 4),
                "scan_vs_local": round(local_best["seconds"] / scan["seconds"], 3),
                "scan_cpu_s": round(scan["min_cpu_s"], 4),
                "scan_requests": scan["requests"],
                "scan_max_in_flight": scan["max_in_flight"],
                "scan_cpu_per_get_ms": round((scan["min_cpu_s"] - local_best["min_cpu_s"]) / gets * 1e3, 3),
                "fetch_s": round(fetch["seconds"], 4),
                "fetch_cpu_s": round(fetch["min_cpu_s"], 4),
                "fetch_cpu_per_get_ms": round(fetch["min_cpu_s"] / int(fetch["tile_requests"]) * 1e3, 3),
                "server_cpu_per_get_ms": round(fetch["server_cpu_s"] / int(fetch["requests"]) * 1e3, 3),
            }
        doc["servers"][server] = rows
    _print(doc)
    if args.json:
        write_json(args.json, {"benchmark": "bench_s3_clients", **doc}, started=started, quick=args.quick)


def _print(doc: dict[str, Any]) -> None:
    print(
        f"\n{doc['data']}: {doc['n_tiles']} tiles, {doc['tile_bytes'] / 2**20:.1f} MiB; "
        f"+{doc['latency_s'] * 1e3:g} ms a request; best of {doc['repeat']}"
    )
    print(f"local scan: {doc['local_scan_s']:.3f} s (CPU {doc['local_scan_cpu_s']:.3f} s)")
    header = f"{'server':<7}{'client':<9}{'scan s':>8}{'vs local':>10}{'CPU/GET':>10}{'fetch s':>9}{'CPU/GET':>10}"
    print(header + f"{'server/GET':>12}")
    for server, rows in doc["servers"].items():
        for client, row in rows.items():
            print(
                f"{server:<7}{client:<9}{row['scan_s']:>8.3f}{row['scan_vs_local']:>9.2f}x"
                f"{row['scan_cpu_per_get_ms']:>8.3f}ms{row['fetch_s']:>9.3f}{row['fetch_cpu_per_get_ms']:>8.3f}ms"
                f"{row['server_cpu_per_get_ms']:>10.3f}ms"
            )
    costs = doc["server_cpu_per_get_ms"]
    print("server CPU per GET: " + ", ".join(f"{name} {ms:.3f} ms" for name, ms in costs.items()))


if __name__ == "__main__":
    main()
