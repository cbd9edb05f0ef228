"""Reading from object storage: how finely to chunk tiles, full scans and random subsets, local and on S3.

One run, one machine. The Visium CytAssist matrix (2,898 x 19,465, real) and 100,000 of its cells drawn with
replacement are written to a local directory and to a bucket of moto's S3-protocol server on 127.0.0.1 (the
test suite's server, in a process of its own pinned to the first CPU); the bucket is read through the test
suite's recording proxy, which adds a fixed delay to every request (a network round trip) and counts requests,
bytes and requests in flight. Three parts:

1. **The chunking frontier** (``--chunks``, chunks per tile, for each matrix): bytes on disk; the local full
   read (``open_dataset(path).read_rows()``) on 2 cores and on 1; the full scan (``Dataset.iter_tiles``, what a
   loader or a map over the dataset does) local and through S3 + latency with the client pinned to the second
   CPU, the server on the first (``--no-pin``: neither pinned), and beside it every tile fetched through S3 +
   latency with nothing decoded (what the server allows: the remote scan cannot be faster); random subsets of
   0.01%, 0.1% and 1% of the cells read through S3 + latency (``read_rows`` of sorted random cells, ``--draws``
   draws each): requests, bytes moved and their share of the dataset's tile bytes, seconds.
2. **Coalescing** (the resampled matrix at the default chunking): two byte ranges of each tile a gap apart,
   fetched as two GETs or as one GET carrying the gap, every tile at once (as a subset read fetches them)
   through S3 + latency, for gaps from 0 to 512 KiB: the largest gap at which one GET is no slower is the
   threshold under which ranged reads merge (``deltacells.codec.DEFAULT_MAX_GAP``).
3. **Places** (the resampled matrix at the default chunking): local disk, the S3 server, S3 + latency: full
   scan, fetch only (every tile fetched, nothing decoded), random subsets.

Needs the test dependencies (``pip install -e . --group test``: moto[server], s3fs, aiohttp). Usage::

    python benchmarks/bench_object_storage.py --json docs/_data/object-storage.json   # about 10 minutes
    python benchmarks/bench_object_storage.py --chunks 8 32 --draws 1                  # a quicker look
    python benchmarks/bench_object_storage.py --quick   # 10,000 resampled cells, 2 chunkings, CI (no docs/_data)
"""

from __future__ import annotations

import argparse
import functools
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

from _cpus import pin, pinned, usable
from _frames import dataset_frames
from _record import now, write_json
from _visium import VISIUM, resampled_rows

import deltacells
from deltacells.codec import DEFAULT_MAX_GAP, DEFAULT_N_CHUNKS
from deltacells.core import open_dataset
from deltacells.format import tile_path


def _scan(url: str, options: dict[str, Any] | None, threads: int | None = None) -> tuple[float, int, float]:
    """A full scan of the dataset at ``url`` (opened first, not timed): seconds, cells, CPU seconds of the process."""
    dataset = open_dataset(url, storage_options=options, tile_cache_bytes=0, threads=threads)
    cpu, t0 = time.process_time(), time.perf_counter()
    cells = 0
    for _, tile in dataset.iter_tiles():
        cells += tile.n_cells
    return time.perf_counter() - t0, cells, time.process_time() - cpu


def _scan_seconds(url: str, options: dict[str, Any] | None, threads: int | None = None) -> float:
    return _scan(url, options, threads)[0]


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


def start_servers(
    latency: float, cpus: list[int] | None = None, mirror: dict[str, str] | None = None
) -> tuple[Any, Any, str, list[str]]:
    """moto's S3 server and two recording proxies (none, ``latency``) in a process of their own (:func:`_serve`).

    ``cpus``: the CPUs the process is pinned to (None: not pinned). ``mirror``: bucket names and the local
    directories that mirror them, served read-only by a :class:`~tests.servers.s3_mirror.MirrorS3Server` with
    ``latency`` in the same process (the fast server: one aiohttp hop, no moto), whose URL comes third.

    Returns the process, the connection that commands it, the server's endpoint and the proxies' URLs (then the
    mirror's); sets the test credentials in this process's environment (where not set) for the clients.
    Commands (``(name, index)`` of a proxy or the mirror, answered on the connection): ``reset``, ``stats``
    (requests, bytes, the most in flight, the servers' CPU seconds since the reset), ``cpu`` (the servers' CPU
    seconds so far) and ``stop``.
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
    process = ctx.Process(target=_serve, args=(child_conn, latency, cpus, mirror), daemon=True)
    process.start()
    endpoint, proxy_urls = conn.recv()
    return process, conn, endpoint, proxy_urls


def _serve(conn: Any, latency: float, cpus: list[int] | None, mirror: dict[str, str] | None = None) -> None:
    """Run moto's S3 server and two recording proxies (no latency, ``latency``), answering commands from ``conn``.

    In a process of its own (pinned to ``cpus`` when given), so that the servers do not take the benchmark's GIL;
    with ``mirror``, a mirror S3 server with ``latency`` too.
    """
    from tests.servers.proxy import RecordingProxy
    from tests.servers.s3 import S3Server
    from tests.servers.s3_mirror import MirrorS3Server

    if cpus is not None:
        pin(cpus)
    with S3Server() as server:
        proxies: list[Any] = [RecordingProxy(server.endpoint_url).start(), RecordingProxy(server.endpoint_url).start()]
        proxies[1].latency = latency
        if mirror:
            proxies.append(MirrorS3Server(mirror, latency=latency).start())
        if cpus is not None:
            pin(cpus)  # the threads the servers started too
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
                elif command == "cpu":
                    conn.send(_cpu_seconds())
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


class Bench:
    """The servers, the pinning, and the datasets written for one run."""

    #: The bucket of the mirror server (``mirror=True``): the run's local directory, where :meth:`write` puts the
    #: local copies, so ``s3://mirror/<name>`` is the local copy served as S3.
    MIRROR = "mirror"

    def __init__(self, args: argparse.Namespace, tmp: Path, *, mirror: bool = False) -> None:
        from tests.servers.s3 import S3Server

        self.args, self.tmp = args, tmp
        cpus = usable()
        pinning = len(cpus) >= 2 and not args.no_pin
        #: The server's CPU and the client's (when pinned): the client of a scan has a core of its own.
        self.server_cpus = [cpus[0]] if pinning else None
        self.client_cpus = [cpus[1]] if pinning else None
        buckets = {self.MIRROR: str(tmp)} if mirror else None
        self.process, self.conn, endpoint, self.proxy_urls = start_servers(args.latency, self.server_cpus, buckets)
        self.server = S3Server()  # only for its storage options and client (the server runs in the other process)
        self.server._endpoint_url = endpoint
        self.bucket = self.server.make_bucket(f"bench-{uuid.uuid4().hex[:8]}")

    def command(self, name: str, index: int) -> Any:
        self.conn.send((name, index))
        return self.conn.recv()

    def options(self, proxy: int | None) -> dict[str, Any]:
        """Storage options through proxy ``proxy`` (0: no latency, 1: ``--latency``, 2: the mirror; None: moto)."""
        return self.server.storage_options(None if proxy is None else self.proxy_urls[proxy])

    def close(self) -> None:
        self.conn.send(("stop", 0))
        self.process.join(30)

    def write(self, adata: Any, name: str, n_chunks: int) -> tuple[str, str]:
        """``adata`` written with ``n_chunks`` chunks a tile to a local directory and to the bucket."""
        local, url = str(self.tmp / name), f"s3://{self.bucket}/{name}"
        settings = {"n_chunks": n_chunks, "obs_columns": [], "progress": False}
        deltacells.write_deltacells(adata, local, **settings)
        deltacells.write_deltacells(adata, url, storage_options=self.server.storage_options(), **settings)
        return local, url

    def measured(self, proxy: int | None, run: Any, repeat: int) -> tuple[float, dict[str, Any] | None]:
        """Best of ``repeat`` runs of ``run()`` (seconds it returns) and the proxy's counts for the best."""
        best, stats = float("inf"), None
        for _ in range(repeat):
            if proxy is not None:
                self.command("reset", proxy)
            seconds = run()
            if seconds < best:
                best = seconds
                stats = self.command("stats", proxy) if proxy is not None else None
        return best, stats


def _full_read(path: str, threads: int | None) -> float:
    dataset = open_dataset(path, threads=threads, tile_cache_bytes=0)
    t0 = time.perf_counter()
    dataset.read_rows()
    return time.perf_counter() - t0


def _zstd_alone(path: str, repeat: int) -> float:
    """Every gaps and vals frame of the local dataset's tiles decompressed on one thread (the floor); best time."""
    import zstandard

    frames = dataset_frames([(Path(path) / tile_path(t)).read_bytes() for t in range(open_dataset(path).n_tiles)])
    dctx = zstandard.ZstdDecompressor()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for frame in frames:
            dctx.decompress(frame)
        best = min(best, time.perf_counter() - t0)
    return best


def _subsets(n_cells: int, fractions: list[float], draws: int) -> dict[float, list[np.ndarray]]:
    """``draws`` sorted random draws of ``fraction`` of the cells (at least one cell) for each fraction."""
    rng = np.random.default_rng(0)
    return {
        f: [np.sort(rng.choice(n_cells, max(1, round(f * n_cells)), replace=False)) for _ in range(draws)]
        for f in fractions
    }


def frontier_point(bench: Bench, adata: Any, key: str, n_chunks: int) -> dict[str, Any]:
    """One chunking of one matrix: size, local full reads, scans local and remote, random subsets from S3."""
    args = bench.args
    local, url = bench.write(adata, f"{key}-{n_chunks}", n_chunks)
    manifest = open_dataset(local).manifest
    tile_bytes = int(manifest.tile_bytes.sum())
    point: dict[str, Any] = {"n_chunks": n_chunks, "n_tiles": manifest.n_tiles, "tile_bytes": tile_bytes}
    _full_read(local, None)  # warm: the page cache holds the tiles
    point["local_read_2_cores_s"] = round(min(_full_read(local, None) for _ in range(args.repeat)), 4)
    with pinned(bench.client_cpus):
        point["zstd_alone_1_core_s"] = round(_zstd_alone(local, args.repeat), 4)  # the floor of a local read
        point["local_read_1_core_s"] = round(min(_full_read(local, 1) for _ in range(args.repeat)), 4)
        cpu: dict[str, list[float]] = {"local": [], "remote": []}

        def scan(where: str, path: str, options: dict[str, Any] | None) -> float:
            seconds, _, used = _scan(path, options, 1)
            cpu[where].append(used)
            return seconds

        local_scan, _ = bench.measured(None, functools.partial(scan, "local", local, None), args.repeat)
        remote = bench.options(1)
        remote_scan, stats = bench.measured(1, functools.partial(scan, "remote", url, remote), args.repeat)
        for where, used in cpu.items():  # the client's CPU during a scan (its threads, the event loop's)
            point[f"{where}_scan_cpu_s"] = round(min(used), 4)
        fetch, _ = bench.measured(1, functools.partial(_fetch_only, url, remote), args.repeat)
        point["remote_fetch_only_s"] = round(fetch, 4)  # what the server (on its core) and the link allow
        point["local_scan_1_core_s"] = round(local_scan, 4)
        point["remote_scan_1_core_s"] = round(remote_scan, 4)
        point["remote_scan_vs_local"] = round(local_scan / remote_scan, 3)
        point["remote_scan_requests"] = stats["requests"] if stats else None
        subsets: dict[str, Any] = {}
        for fraction, draws in _subsets(adata.n_obs, args.fractions, args.draws).items():
            rows = []
            for cells in draws:
                bench.command("reset", 1)
                seconds = _subset(url, remote, cells)
                got = bench.command("stats", 1)
                rows.append((seconds, got["tile_requests"], got["bytes"]))
            seconds, requests, moved = (float(np.mean(column)) for column in zip(*rows, strict=True))
            subsets[f"{fraction:.2%}"] = {
                "cells": int(draws[0].shape[0]),
                "draws": len(draws),
                "seconds": round(seconds, 4),
                "tile_requests": round(requests, 1),
                "bytes": round(moved),
                "share_of_tile_bytes": round(moved / tile_bytes, 4),
                "max_share_of_tile_bytes": round(max(row[2] for row in rows) / tile_bytes, 4),
            }
    point["subsets"] = subsets
    return point


def coalescing(bench: Bench, adata: Any, url: str, gaps: list[int]) -> dict[str, Any]:
    """Random subsets read through S3 + latency with ranged reads merging frames closer than each gap.

    ``deltacells.codec.DEFAULT_MAX_GAP`` set to each gap in turn; for each, the subsets of ``--fractions``
    (``--draws`` draws each) are read as :func:`frontier_point` reads them, the client pinned: mean seconds,
    requests, bytes moved and their share, and the client's CPU seconds.
    """
    import deltacells.codec._partial as partial

    args = bench.args
    remote = bench.options(1)
    manifest = open_dataset(url, storage_options=remote).manifest
    tile_bytes = int(manifest.tile_bytes.sum())
    subsets = _subsets(adata.n_obs, args.fractions, args.draws)
    rows = []
    default = partial.DEFAULT_MAX_GAP
    try:
        with pinned(bench.client_cpus):
            for gap in gaps:
                partial.DEFAULT_MAX_GAP = gap
                row: dict[str, Any] = {"gap": gap}
                for fraction, draws in subsets.items():
                    got = []
                    for cells in draws:
                        bench.command("reset", 1)
                        cpu = time.process_time()
                        seconds = _subset(url, remote, cells)
                        cpu = time.process_time() - cpu
                        stats = bench.command("stats", 1)
                        got.append((seconds, cpu, stats["tile_requests"], stats["bytes"]))
                    seconds, cpu, requests, moved = (float(np.mean(column)) for column in zip(*got, strict=True))
                    row[f"{fraction:.2%}"] = {
                        "seconds": round(seconds, 4),
                        "client_cpu_s": round(cpu, 4),
                        "tile_requests": round(requests, 1),
                        "share_of_tile_bytes": round(moved / tile_bytes, 4),
                        "max_share_of_tile_bytes": round(max(g[3] for g in got) / tile_bytes, 4),
                    }
                rows.append(row)
    finally:
        partial.DEFAULT_MAX_GAP = default
    return {"n_chunks": int(manifest.n_chunks), "rows": rows, "pick": _pick_gap(rows)}


#: The subset whose bytes the goal bounds, and the bound: every draw of a random 0.1% of the cells moves at most
#: 12% of the tile bytes (the goal for random cells from a bucket; every draw, not their mean, so that the pick
#: does not rest on the luck of the draws).
GOAL_SUBSET, GOAL_SHARE = "0.10%", 0.12


def _worst_share(measured: dict[str, Any]) -> float:
    """The largest share of the tile bytes a draw of the goal's subset moved (1 when it was not measured)."""
    return float(measured.get(GOAL_SUBSET, {}).get("max_share_of_tile_bytes", 1.0))


def _pick_gap(rows: list[dict[str, Any]]) -> int | None:
    """The widest gap for which every draw of the goal's subset met the goal's share.

    A wider gap merges more frames: fewer requests (each costs the client about a millisecond of CPU, and the
    server its work), more bytes moved. Within the goal the bytes are bounded, so the fewest requests win; the
    times measured at gaps this close are within their noise of each other, and would make an unstable pick.
    """
    within = [int(row["gap"]) for row in rows if _worst_share(row) <= GOAL_SHARE]
    return max(within) if within else None


def _pick_chunks(frontier: dict[str, Any]) -> int | None:
    """The fewest chunks a tile for which every draw of the goal's subset met the goal's share on every matrix."""
    candidates: set[int] | None = None
    for run in frontier.values():
        ok = {p["n_chunks"] for p in run["points"] if _worst_share(p["subsets"]) <= GOAL_SHARE}
        candidates = ok if candidates is None else candidates & ok
    return min(candidates) if candidates else None


def places(bench: Bench, adata: Any, local: str, url: str) -> dict[str, Any]:
    """Local disk, the S3 server, S3 + latency: full scan, fetch only, random subsets (the default chunking)."""
    args = bench.args
    tile_bytes = int(open_dataset(local).manifest.tile_bytes.sum())
    subsets = {f: draws[0] for f, draws in _subsets(adata.n_obs, args.fractions, 1).items()}
    where = {"local disk": (local, None), "S3 server": (url, 0), f"S3 + {args.latency * 1e3:g} ms": (url, 1)}
    results: dict[str, Any] = {}
    for place, (path, proxy) in where.items():
        options = bench.options(proxy) if proxy is not None else None
        row: dict[str, Any] = {}
        measures: list[tuple[str, Any]] = [("full scan", None), ("fetch only", "fetch")]
        measures += [(f"{f:.2%} random", f) for f in subsets]
        for name, fraction in measures:
            if fraction is None:
                run = functools.partial(_scan_seconds, path, options)
            elif fraction == "fetch":
                run = functools.partial(_fetch_only, path, options)
            else:
                run = functools.partial(_subset, path, options, subsets[fraction])
            best, stats = bench.measured(proxy, run, args.repeat)
            entry: dict[str, Any] = {"seconds": round(best, 4), "cells_per_s": round(adata.n_obs / best)}
            if fraction not in (None, "fetch"):
                entry["cells_read"] = int(subsets[fraction].shape[0])
            if stats:
                entry.update(stats, share_of_tile_bytes=round(stats["bytes"] / tile_bytes, 4))
            row[name] = entry
        results[place] = row
    return results


def _matrices(n_cells: int) -> dict[str, tuple[Any, str]]:
    import scanpy as sc
    from scipy import sparse

    visium = sc.read_10x_mtx(VISIUM)
    visium.X = sparse.csr_matrix(visium.X, dtype=np.float32)
    resampled = visium[resampled_rows(visium.n_obs, n_cells)].copy()
    resampled.obs_names = [f"cell-{i}" for i in range(n_cells)]
    return {
        "visium": (visium, f"Visium CytAssist ({visium.n_obs:,} x {visium.n_vars:,}, real)"),
        "resampled": (resampled, f"{n_cells:,} Visium cells drawn with replacement ({resampled.X.nnz:,} nonzeros)"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100_000, help="cells of the resampled matrix")
    parser.add_argument(
        "--chunks", type=int, nargs="+", default=[8, 12, 16, 20, 24, 32, 48, 64], help="chunkings to compare"
    )
    parser.add_argument("--latency", type=float, default=0.03, help="seconds added to each request")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.0001, 0.001, 0.01])
    parser.add_argument("--draws", type=int, default=5, help="random draws of each subset (their mean is kept)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timing (the best is kept)")
    parser.add_argument("--gaps", type=int, nargs="+", default=[0, 4096, 16384, 32768, 65536, 131072, 262144, 524288])
    parser.add_argument("--no-pin", action="store_true", help="pin neither the server nor the client")
    parser.add_argument("--quick", action="store_true", help="10,000 resampled cells, 8 and 32 chunks, 1 run")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.cells, args.repeat, args.draws, args.chunks = 10_000, 1, 1, [8, 32]
        args.gaps = [0, 65536]
        args.fractions = [0.001, 0.01]
    if DEFAULT_N_CHUNKS not in args.chunks:
        args.chunks = sorted({*args.chunks, DEFAULT_N_CHUNKS})
    matrices = _matrices(args.cells)
    doc: dict[str, Any] = {
        "default_n_chunks": DEFAULT_N_CHUNKS,
        "default_max_gap": DEFAULT_MAX_GAP,
        "latency_s": args.latency,
        "repeat": args.repeat,
        "draws": args.draws,
        "pinned": len(usable()) >= 2 and not args.no_pin,
        "goal": {"subset": GOAL_SUBSET, "share_of_tile_bytes": GOAL_SHARE},
        "frontier": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args, Path(tmp))
        try:
            _full_read(*bench.write(matrices["visium"][0], "warm-up", 8)[:1], None)  # numba's kernels load
            for key, (adata, label) in matrices.items():
                points = [frontier_point(bench, adata, key, n) for n in args.chunks]
                doc["frontier"][key] = {
                    "label": label,
                    "n_cells": adata.n_obs,
                    "nnz": int(adata.X.nnz),
                    "points": points,
                }
                _print_frontier(key, doc["frontier"][key])
            adata = matrices["resampled"][0]
            local, url = (
                str(Path(tmp) / f"resampled-{DEFAULT_N_CHUNKS}"),
                f"s3://{bench.bucket}/resampled-{DEFAULT_N_CHUNKS}",
            )
            doc["chunks_pick"] = _pick_chunks(doc["frontier"])
            doc["coalescing"] = coalescing(bench, adata, url, args.gaps)
            _print_coalescing(doc["coalescing"])
            manifest = open_dataset(local).manifest
            doc.update(
                n_cells=adata.n_obs,
                n_genes=adata.n_vars,
                nnz=int(adata.X.nnz),
                n_tiles=manifest.n_tiles,
                tile_size=int(manifest.tile_size),
                n_chunks=DEFAULT_N_CHUNKS,
                zstd_level=int(manifest.zstd_level),
                tile_bytes=int(manifest.tile_bytes.sum()),
                data=matrices["resampled"][1],
                results=places(bench, adata, local, url),
            )
            _print_places(doc)
        finally:
            bench.close()
    print(f"{platform.machine()}, {os.cpu_count()} CPUs; best of {args.repeat}, {args.draws} draws a subset")
    if args.json:
        write_json(args.json, {"benchmark": "bench_object_storage", **doc}, started=started, quick=args.quick)


def _print_frontier(key: str, run: dict[str, Any]) -> None:
    points = run["points"]
    base = next(p for p in points if p["n_chunks"] == 8) if any(p["n_chunks"] == 8 for p in points) else points[0]
    fractions = list(points[0]["subsets"])
    print(f"\n{run['label']}: chunks per tile (ratios against {base['n_chunks']})")
    head = f"{'chunks':>6}{'MiB':>8}{'size':>7}{'read 2c':>9}{'read 1c':>9}{'remote scan':>12}"
    print(head + "".join(f"{f:>16}" for f in fractions))
    for p in points:
        subsets = "".join(
            f"{p['subsets'][f]['share_of_tile_bytes']:>8.1%} {p['subsets'][f]['tile_requests']:>5.0f}r "
            for f in fractions
        )
        print(
            f"{p['n_chunks']:>6}{p['tile_bytes'] / 2**20:>8.2f}{p['tile_bytes'] / base['tile_bytes']:>7.3f}"
            f"{p['local_read_2_cores_s'] / base['local_read_2_cores_s']:>9.3f}"
            f"{p['local_read_1_core_s'] / base['local_read_1_core_s']:>9.3f}"
            f"{p['remote_scan_vs_local']:>11.2f}x" + subsets
        )


def _print_coalescing(run: dict[str, Any]) -> None:
    print(f"\ncoalescing ({run['n_chunks']} chunks a tile): frames closer than the gap merged into one GET")
    for row in run["rows"]:
        cells = "   ".join(
            f"{name}: {m['seconds'] * 1e3:6.1f} ms, cpu {m['client_cpu_s'] * 1e3:6.1f} ms, "
            f"{m['tile_requests']:5.0f} req, {m['share_of_tile_bytes']:6.1%}"
            for name, m in row.items()
            if name != "gap"
        )
        print(f"gap {row['gap']:>9,} B  {cells}")
    print(f"pick: {run['pick']} bytes (the widest gap whose every {GOAL_SUBSET} draw moved at most {GOAL_SHARE:.0%})")


def _print_places(doc: dict[str, Any]) -> None:
    results = doc["results"]
    local_scan = results["local disk"]["full scan"]["cells_per_s"]
    print(f"\n{doc['data']}, {doc['n_tiles']} tiles ({doc['n_chunks']} chunks), {doc['tile_bytes'] / 2**20:.1f} MiB")
    print(f"{'':<16}{'measure':<14}{'cells/s':>11}{'vs local':>10}{'requests':>10}{'MiB moved':>11}{'share':>8}")
    for place, row in results.items():
        for name, entry in row.items():
            ratio = f"{entry['cells_per_s'] / local_scan:.2f}x" if name == "full scan" else ""
            moved = f"{entry['bytes'] / 2**20:.2f}" if "bytes" in entry else ""
            share = f"{entry['share_of_tile_bytes']:.1%}" if "bytes" in entry else ""
            print(
                f"{place:<16}{name:<14}{entry['cells_per_s']:>11,}{ratio:>10}{entry.get('requests', ''):>10}"
                f"{moved:>11}{share:>8}"
            )


if __name__ == "__main__":
    main()
