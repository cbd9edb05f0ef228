"""A sparse atlas read whole: the full read, and dask's reductions on its blocks (issue 40).

The atlas (``_scale_data.py``, as ``bench_scale.py`` builds its own): ``--cells`` cells (default 10M) of
``--genes`` genes (200) with about ``--nnz-per-cell`` nonzeros (5) each, tiles of 2,048 cells (4,883 for 10M
cells) of about 10,000 nonzeros, each cut in the library's default number of chunks
(``deltacells.codec.DEFAULT_N_CHUNKS``, what a user writing today gets; ``_scale_data``'s own default is 8),
zstd level 1, cell names and a categorical obs column. Built once under ``--workdir`` (reused with
``--keep``); the page cache is warm (the atlas was just written or read).

Measured in this process, numba's kernels loaded first (what a session pays once), best of ``--repeat``
rounds, the contenders taken in turn; wall seconds, and this process's CPU seconds (every thread's):

* **full read**: ``open_dataset(path).read_rows()``, in the stored gene order and in the original one (the
  default of ``read_deltacells``, which the dask arrays below follow): the local full read the dask figures are
  compared with;
* **dask, threaded**: ``read_deltacells(path, chunks=C).X`` then ``X.sum(axis=0)`` and ``X.mean(axis=1)``,
  ``compute(scheduler="threads")``, for ``C = "auto"`` (blocks of whole tiles of about dask's
  ``array.chunk-size`` of decoded CSR: 128 MiB) and ``C = "tiles"`` (a block, and a task, per tile);
* **dask, LocalCluster**: the same on a ``distributed.LocalCluster`` of ``--workers`` worker processes of one
  thread each (their imports and kernels loaded first, by decoding a tile on each and computing the first
  blocks of each array).

The results of the reductions are compared with those of the full read (``agree``). Each dask figure is also
given as a ratio to the full read in the original gene order (the issue's target: at most 2). Nothing is
asserted.

``--quick`` (CI, under a minute): 200,000 cells, one round.

Usage::

    python benchmarks/bench_atlas_read.py --quick
    python benchmarks/bench_atlas_read.py --workdir /tmp/atlas --keep --json docs/_data/atlas-read.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _scale_data as sd  # noqa: E402
from _record import now, write_json  # noqa: E402

SCHEDULERS = ("threads", "cluster")
CHUNKS = ("auto", "tiles")
REDUCTIONS = ("sum(axis=0)", "mean(axis=1)")


def parse_size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    for suffix, factor in (("k", 1_000), ("m", 1_000_000)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def timed(run: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall and CPU seconds of ``run()`` (every thread of this process), and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def best_of(contenders: dict[str, Callable[[], Any]], repeat: int) -> tuple[dict[str, dict[str, float]], dict]:
    """Each contender's best wall time (and the CPU time of that round), rounds interleaved; first results kept."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    results: dict[str, Any] = {}
    for _ in range(repeat):
        for name, run in contenders.items():
            wall, cpu, result = timed(run)
            times[name].append((wall, cpu))
            results.setdefault(name, result)
            del result
            print(f"  {name}: {wall:.2f} s ({cpu:.2f} s CPU)", flush=True)
    best = {name: min(runs) for name, runs in times.items()}
    return {name: {"s": round(w, 3), "cpu_s": round(c, 3)} for name, (w, c) in best.items()}, results


def _warm_worker(path: str) -> float:
    """On a worker: import what the tasks use and decode a tile (numba's kernels loaded); the seconds it took."""
    start = time.perf_counter()
    import deltacells
    from deltacells._kernel_loading import load_compiled_kernels

    load_compiled_kernels()
    deltacells.open_dataset(path).read_rows(slice(0, 10))
    return time.perf_counter() - start


def built_tile(path: Path) -> int:
    """Cells per tile of the atlas."""
    import deltacells

    return int(deltacells.open_dataset(path).tile_size)


def measure(path: Path, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    import dask
    import distributed

    import deltacells
    from deltacells._kernel_loading import load_compiled_kernels

    load_compiled_kernels()
    stored = deltacells.open_dataset(path, tile_cache_bytes=0)
    original = stored.with_gene_order("original")
    reference = original.read_rows()  # also warms the page cache
    want = {"sum(axis=0)": np.asarray(reference.sum(axis=0), dtype=np.float64).ravel(), "mean(axis=1)": None}
    want["mean(axis=1)"] = np.asarray(reference.sum(axis=1), dtype=np.float64).ravel() / reference.shape[1]
    del reference

    print("full read", flush=True)
    local, _ = best_of(
        {"stored order": lambda: stored.read_rows(), "original order": lambda: original.read_rows()}, args.repeat
    )

    def arrays() -> dict[str, Any]:
        options = {"obs_columns": [], "obs_names": False, "cache_dir": cache}
        return {chunks: deltacells.read_deltacells(path, chunks=chunks, **options).X for chunks in CHUNKS}

    X = arrays()
    doc: dict[str, Any] = {
        "full_read": local,
        "blocks": {chunks: int(X[chunks].numblocks[0]) for chunks in CHUNKS},
        "dask_chunk_size": dask.config.get("array.chunk-size"),
        "dask": {},
        "agree": {},
    }

    def contenders(compute: Callable[[Any], Any]) -> dict[str, Callable[[], Any]]:
        def reduce(x: Any, name: str) -> Any:
            return x.sum(axis=0) if name == REDUCTIONS[0] else x.mean(axis=1)

        return {
            f"{chunks}, {name}": (lambda x=X[chunks], n=name: compute(reduce(x, n)))
            for chunks in CHUNKS
            for name in REDUCTIONS
        }

    def record(scheduler: str, times: dict[str, dict[str, float]], results: dict[str, Any]) -> None:
        reference_s = local["original order"]["s"]
        doc["dask"][scheduler] = {
            name: {**value, "ratio_to_full_read": round(value["s"] / reference_s, 2)} for name, value in times.items()
        }
        for name, result in results.items():
            reduction = name.split(", ", 1)[1]
            got = np.asarray(result, dtype=np.float64).ravel()
            doc["agree"][f"{scheduler}: {name}"] = bool(np.allclose(got, want[reduction], rtol=1e-5))

    print("dask, threaded scheduler", flush=True)
    record("threads", *best_of(contenders(lambda x: x.compute(scheduler="threads")), args.repeat))

    if args.cluster:
        print(f"dask, LocalCluster of {args.workers} processes", flush=True)
        with (
            distributed.LocalCluster(
                n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                local_directory=tempfile.mkdtemp(prefix="bench-atlas-read-"),
            ) as cluster,
            distributed.Client(cluster) as client,
        ):  # fmt: skip
            doc["worker_warm_up_s"] = [round(s, 2) for s in client.run(_warm_worker, str(path)).values()]
            for chunks in CHUNKS:  # the first tasks of each array: the workers import what they run, open the atlas
                client.compute(X[chunks][: 2 * built_tile(path)].sum()).result()
            record("cluster", *best_of(contenders(lambda x: client.compute(x).result()), args.repeat))
    return doc


def print_report(doc: dict[str, Any]) -> None:
    atlas = doc["atlas"]
    print(
        f"\n{atlas['n_cells']:,} cells x {atlas['n_genes']} genes, {atlas['nnz']:,} nonzeros in {atlas['n_tiles']:,} "
        f"tiles of {atlas['tile_size']:,} cells, {atlas['n_chunks']} chunks a tile; best of {doc['repeat']}"
    )
    for name, value in doc["full_read"].items():
        print(f"  full read, {name:<16} {value['s']:7.2f} s  ({value['cpu_s']:.2f} s CPU)")
    blocks = ", ".join(f"{chunks}: {n:,}" for chunks, n in doc["blocks"].items())
    print(f"  dask blocks ({blocks}; array.chunk-size {doc['dask_chunk_size']})")
    for scheduler, rows in doc["dask"].items():
        for name, value in rows.items():
            agree = "" if doc["agree"][f"{scheduler}: {name}"] else "  RESULTS DIFFER"
            ratio = value["ratio_to_full_read"]
            print(f"  {scheduler:<8} {name:<22} {value['s']:7.2f} s  {ratio:5.2f}x the full read{agree}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="10M", help="cells of the atlas, e.g. 200k, 10M")
    parser.add_argument("--genes", type=int, default=200)
    parser.add_argument("--nnz-per-cell", type=float, default=5.0)
    parser.add_argument("--workdir", type=Path, help="where the atlas is built (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the atlas and reuse one built before")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (the best time is kept)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the LocalCluster")
    parser.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=True, help="measure a LocalCluster")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--quick", action="store_true", help="200,000 cells, one round (CI)")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.cells, args.repeat = "200k", 1

    from deltacells.codec import DEFAULT_N_CHUNKS

    params = sd.Params(
        n_cells=parse_size(args.cells), n_genes=args.genes, nnz_per_cell=args.nnz_per_cell, n_chunks=DEFAULT_N_CHUNKS
    )
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        built = sd.build(params, workdir, reuse=args.keep)
        info = built.info
        how = "reused" if info["reused"] else f"built in {info['build_s']} s"
        print(f"atlas {built.path} ({how})", flush=True)
        doc = measure(built.path, args, Path(tmp) / "obs-cache")
    doc = {
        "atlas": {
            "n_cells": params.n_cells, "n_genes": params.n_genes, "nnz": info["nnz"], "n_tiles": info["n_tiles"],
            "tile_size": params.tile_size, "n_chunks": params.n_chunks, "tile_bytes": info["tile_bytes"],
            "params": asdict(params),
        },
        "repeat": args.repeat,
        "workers": args.workers,
        "threads": len(os.sched_getaffinity(0)),
        **doc,
    }  # fmt: skip
    print_report(doc)
    write_json(args.json, doc, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
