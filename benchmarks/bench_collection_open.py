"""Opening a large collection on object storage: ``read_deltacells`` of ``--datasets`` datasets in a bucket.

Two S3 servers, in a process of their own, each adding ``--latency`` seconds to every request (30 ms by default,
a cross-region round trip): **moto** (the test suite's server) behind the suite's recording proxy, and **fast**
(``tests.servers.s3_mirror.MirrorS3Server``: a read-only S3 endpoint over the local copies, one aiohttp hop), so
that what the client costs shows apart from what moto costs. ``--datasets`` small datasets (1,000 by default;
300 cells, 500 genes and one obs column each, all different) are written locally and uploaded to moto under
their own prefixes; then, through each server, one run each:

* ``read_deltacells(urls, obs_columns=[], obs_names=False)``: the manifests and gene tables only;
* ``read_deltacells(urls)``: with every dataset's obs (the stored names and the column, copied into a fresh
  local cache);
* ``CellLoader(urls)``: what a training loader opens.

These run with the default client of ``s3://`` URLs (obstore where it is installed). Then the first (manifests
and genes) runs again with each client in turn, fsspec (s3fs, botocore) and obstore, ``--repeat`` times (the best
kept; ``DELTACELLS_STORAGE_CLIENT`` chooses the client), under ``clients``; all of it under ``moto`` and ``fast``.

The servers' process is pinned to the first CPU and the client, while it opens, to the second (``--no-pin``:
neither), as in ``bench_s3_clients.py``. Reported: seconds, the CPU seconds of the client and of the server
(moto's server and the proxy, or the fast server), requests, the most requests in flight, and the time one
request after another would take (requests x latency). Nothing is asserted. ``--quick`` (CI): 40 datasets.

Usage::

    python benchmarks/bench_collection_open.py --datasets 1000 --latency 0.03 --json out.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the test suite's servers (tests/servers)

from _cpus import pinned, usable  # noqa: E402
from _record import now, write_json  # noqa: E402
from bench_object_storage import start_servers  # noqa: E402

import deltacells  # noqa: E402
from deltacells.datasets import synthetic_counts  # noqa: E402
from deltacells.storage import STORAGE_CLIENT_VARIABLE, open_store  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.03, help="seconds added to each request")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each client's open (the best is kept)")
    parser.add_argument("--no-pin", action="store_true", help="pin neither the servers nor the client")
    parser.add_argument("--quick", action="store_true", help="40 datasets (CI)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    started = now()
    n = 40 if args.quick else args.datasets
    cpus = usable()
    pinning = len(cpus) >= 2 and not args.no_pin
    # As bench_s3_clients.py: the servers on the first CPU, the client (while it opens) on the second.
    args.server_cpus, args.client_cpus = ([cpus[0]], [cpus[1]]) if pinning else (None, None)
    with tempfile.TemporaryDirectory() as tmp:
        servers, conn, endpoint, proxy_urls = start_servers(args.latency, args.server_cpus, mirror={"mirror": tmp})
        try:
            result = _run(args, n, Path(tmp), conn, endpoint, proxy_urls)
        finally:
            conn.send(("stop", 0))
            servers.join(timeout=10)
    write_json(args.json, result, started=started, quick=args.quick)
    return 0


def _run(args: Any, n: int, tmp: Path, conn: Any, endpoint: str, proxy_urls: list[str]) -> dict[str, Any]:
    """Write and upload the datasets, then open them through each server (see the module's docstring)."""
    import s3fs
    from tests.servers.s3 import S3Server

    server = S3Server()  # for its storage options and bucket (the server runs in the other process)
    server._endpoint_url = endpoint

    def command(name: str, index: int) -> Any:
        conn.send((name, index))
        return conn.recv()

    result: dict[str, Any] = {"benchmark": "bench_collection_open", "datasets": n, "latency_s": args.latency}
    result["machine"] = f"{os.uname().machine}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    result["pinned"] = args.client_cpus is not None
    bucket = server.make_bucket(f"bench-{uuid.uuid4().hex[:8]}")
    fs = s3fs.S3FileSystem(**server.storage_options())
    t0 = time.perf_counter()
    for k in range(n):  # all different: the obs cache shares what is the same
        local = tmp / f"study{k:04d}"
        adata = synthetic_counts(300, 500, seed=k)
        adata.obs = adata.obs[["cell_type"]]
        adata.obs_names = [f"s{k}-{i}" for i in range(300)]
        deltacells.write_deltacells(adata, local, progress=False)
        for path in (p for p in local.rglob("*") if p.is_file()):
            fs.put_file(str(path), f"{bucket}/study{k:04d}/{path.relative_to(local).as_posix()}")
    result["upload_s"] = time.perf_counter() - t0
    caches = tmp.parent / f"{tmp.name}-caches"  # beside the mirror's bucket (the run's directory), not in it
    for server_name, proxy, where in (("moto", 1, bucket), ("fast", 2, "mirror")):
        urls = [f"s3://{where}/study{k:04d}" for k in range(n)]
        options = server.storage_options(proxy_urls[proxy])
        print(f"-- {server_name}")
        with pinned(args.client_cpus):
            result[server_name] = _open_runs(
                args, n, urls, options, caches / server_name, lambda name, proxy=proxy: command(name, proxy)
            )
    shutil.rmtree(caches, ignore_errors=True)
    return result


def _open_runs(args: Any, n: int, urls: list[str], options: dict[str, Any], caches: Path, command: Any) -> Any:
    """The three opens with the default client, then the first with each client (``--repeat`` times)."""
    result: dict[str, Any] = {}
    runs = {
        "manifests and genes": lambda cache: deltacells.read_deltacells(
            urls, storage_options=options, obs_columns=[], obs_names=False, cache_dir=cache
        ),
        "with obs": lambda cache: deltacells.read_deltacells(urls, storage_options=options, cache_dir=cache),
        "CellLoader": lambda cache: deltacells.CellLoader(urls, storage_options=options, cache_dir=cache),
    }
    result["client"] = type(open_store(urls[0], options)).__name__
    result["clients"] = {}
    turns = [(name, run, None) for name, run in runs.items()]
    first = next(iter(runs))
    turns += [(first, runs[first], client) for _ in range(args.repeat) for client in ("fsspec", "obstore")]
    for turn, (name, run, client) in enumerate(turns):
        if client is not None:
            os.environ[STORAGE_CLIENT_VARIABLE] = client
        command("reset")
        t0, cpu0 = time.perf_counter(), time.process_time()
        try:
            got = run(caches / f"cache-{turn}")
        finally:
            os.environ.pop(STORAGE_CLIENT_VARIABLE, None)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        stats = command("stats")
        assert got.n_cells if hasattr(got, "n_cells") else got.n_obs == 300 * n
        if client is not None:
            kept = result["clients"].get(client)
            if kept is None or seconds < kept["seconds"]:
                result["clients"][client] = {
                    "seconds": round(seconds, 3),
                    "client_cpu_s": round(cpu, 3),
                    "server_cpu_s": round(stats["server_cpu_s"], 3),
                    "requests": stats["requests"],
                    "max_in_flight": stats["max_in_flight"],
                    "client_cpu_per_dataset_ms": round(cpu / n * 1e3, 2),
                    "server_cpu_per_request_ms": round(stats["server_cpu_s"] / max(1, stats["requests"]) * 1e3, 2),
                }
            print(
                f"{name} ({client}): {seconds:6.2f} s (CPU: client {cpu:5.2f} s, "
                f"server {stats['server_cpu_s']:5.2f} s), {stats['requests']:,} requests"
            )
            continue
        result[name] = {
            "seconds": round(seconds, 3),
            "client_cpu_s": round(cpu, 3),
            "server_cpu_s": round(stats["server_cpu_s"], 3),
            "requests_by_file": stats["by_file"],
            "requests": stats["requests"],
            "max_in_flight": stats["max_in_flight"],
            "one_after_another_s": round(stats["requests"] * args.latency, 1),
        }
        print(
            f"{name:22} {seconds:7.2f} s (CPU: client {cpu:5.2f} s, server {stats['server_cpu_s']:5.2f} s)  "
            f"{stats['requests']:6,} requests (at most "
            f"{stats['max_in_flight']} in flight; one after another: {stats['requests'] * args.latency:.0f} s)"
        )
        print(" " * 23 + ", ".join(f"{kind} {count:,}" for kind, count in stats["by_file"].items()))
    return result


if __name__ == "__main__":
    sys.exit(main())
