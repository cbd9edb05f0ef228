"""Scaling out with dask: deltacells' dask X against anndata's lazy h5ad and zarr, and a run out of core.

The matrix: ``--cells`` cells (default 200,000) drawn with replacement from the real Visium CytAssist spots
(19,465 genes, about 369 nonzeros per cell), float32 counts, written in one run three ways:

* deltacells: ``write_deltacells`` with the defaults (level 6, tiles of 2,048 cells), read with
  ``read_deltacells(path, chunks=C, threads=1, tile_cache_bytes=0, obs_columns=[], obs_names=False)``:
  one decoding thread per worker (as many as dask's), and no tile cache, so that every pass decodes its
  tiles afresh as the other stores read theirs afresh;
* h5ad without compression (``AnnData.write_h5ad``; uncompressed is the fastest h5ad to read), and zarr
  with anndata's defaults (``AnnData.write_zarr``: zarr's own chunking and compressor), both read with
  anndata's lazy reader ``anndata.experimental.read_elem_lazy(X, chunks=(C, -1))`` (what
  ``anndata.experimental.read_lazy`` does for X, with its row chunk chosen; ``read_lazy`` itself always
  makes blocks of 1,000 rows): each h5ad block's task opens the file itself (h5py objects do not pickle),
  each zarr block's task carries the pickled zarr group.

``C`` is the deltacells block (``--chunk`` cells, rounded to whole tiles: 20,480 by default) and the other
stores' row chunk, so the three dask arrays have the same blocks. On a ``distributed.LocalCluster`` of 1, then
of 2 worker processes (one thread each), for each store in turn:

* **totals**: per-gene totals, a full scan: ``X.map_blocks(column sums).sum(axis=0).compute()`` (dask's
  own ``X.sum(axis=0)`` fails on scipy.sparse blocks, dask/dask#11880);
* **pipeline**: scanpy on the dask X: ``normalize_total(target_sum=1e4)``, ``log1p``,
  ``highly_variable_genes(flavor="seurat", n_top_genes=2000)`` (computes), the HVG subset, then
  ``pca(n_comps=50)`` (scanpy's sparse dask PCA, which centres implicitly; computed: ``X_pca`` in memory).
  ``scale`` is left out: with ``zero_center`` (its default) it densifies the sparse dask X (scanpy warns so),
  and the PCA of a dense dask X is another code path.

Blocks whose column indices are out of order within rows (``has_sorted_indices`` False) make some of
scipy's sparse arithmetic, and so scanpy's, slower (``multiply`` and the ufuncs sort a copy first); the run
records each store's, and when deltacells' come out of order (its genes put back in their original order;
sorting them with scipy's ``sort_indices`` costs more than decoding them), it measures a fourth store,
``deltacells, stored order``: ``read_deltacells(..., gene_order="stored")``, the genes in the order the
writer stored them, whose blocks come sorted; its results are compared gene by gene (by name).

Each cluster's workers first import what the tasks use and decode a tile (``client.run``: imports and
numba's kernels, what a worker pays once); the page cache is warm (the stores were just written). Times are
the best of ``--repeat`` rounds, the stores taken in turn (each round starting with the next store);
reported as ratios to each anndata store measured in the same run. Totals must match exactly across
stores, the HVG sets must be equal and the PCA agree (explained variance ratios and loadings up to sign),
or the run says so (checked in the first round). A store that fails is reported with its error, and the
others go on.

**Out of core**: a second deltacells dataset of ``--ooc-cells`` resampled cells (default: enough that the
decoded float32 CSR matrix is ``--ooc-ratio`` = 3.5 times the workers' total memory limit), written from a
dask-backed AnnData (never whole in memory), then on ``LocalCluster(n_workers=2, memory_limit=
--ooc-memory-limit)`` (default 1 GiB per worker): the totals and the pipeline up to ``highly_variable_genes``
(normalize_total, log1p, HVG: every pass a full scan). Peak worker memory is each worker's ``VmHWM`` (reset
before each measure through ``/proc/self/clear_refs``; else the largest RSS sampled every 0.1 s), and
whether the workers were restarted (the nanny kills a worker above 95% of its limit).

``--quick`` (CI, about a minute on an idle 2-core machine): 20,000 cells in blocks of 4,096, one round, 500
HVGs and 20 components, an out-of-core dataset of 30,000 cells (far smaller than the memory limit: it only
keeps the code running).

Usage::

    python benchmarks/bench_dask.py --quick
    python benchmarks/bench_dask.py --json docs/_data/dask.json       # the figures of the docs
    python benchmarks/bench_dask.py --cells 100000 --workers 2 --no-ooc --repeat 1   # a look, a few minutes
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _record import now, write_json
from _visium import VISIUM, resampled_rows
from scipy import sparse

MiB = 2**20
STORES = ("deltacells", "h5ad", "zarr")
ANNDATA_STORES = ("h5ad", "zarr")
#: deltacells in the writer's gene order (blocks sorted), measured when its original-order blocks come unsorted
STORED = "deltacells, stored order"


# ---------------------------------------------------------------------------------------------- the data


def visium() -> Any:
    """The Visium AnnData (float32 CSR counts), as scanpy reads it."""
    import scanpy as sc

    adata = sc.read_10x_mtx(VISIUM)
    adata.X = sparse.csr_matrix(adata.X, dtype=np.float32)
    return adata


def resampled(source: Any, n_cells: int, seed: int) -> Any:
    """``n_cells`` of ``source``'s cells drawn with replacement, in memory."""
    import anndata as ad
    import pandas as pd

    rows = resampled_rows(source.n_obs, n_cells, seed)
    adata = ad.AnnData(X=source.X[rows], var=pd.DataFrame(index=source.var_names.copy()))
    adata.obs_names = [f"c{i:09d}" for i in range(n_cells)]
    return adata


def resampled_dask(source: Any, n_cells: int, seed: int, block: int) -> Any:
    """``n_cells`` resampled cells as a dask-backed AnnData, block by block (never whole in memory)."""
    import anndata as ad
    import dask.array as da
    import pandas as pd

    csr = source.X
    n_rows = csr.shape[0]
    chunks = (tuple(min(block, n_cells - lo) for lo in range(0, n_cells, block)), (csr.shape[1],))

    def make(block_info: dict | None = None) -> sparse.csr_matrix:
        (lo, hi), _ = block_info[None]["array-location"]
        rows = np.random.default_rng([seed, lo]).integers(0, n_rows, size=hi - lo)
        return csr[rows]

    X = da.map_blocks(make, chunks=chunks, dtype=np.float32, meta=sparse.csr_matrix((0, 0), dtype=np.float32))
    return ad.AnnData(X=X, var=pd.DataFrame(index=source.var_names.copy()))


def size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def write_stores(adata: Any, workdir: Path) -> dict[str, dict[str, Any]]:
    """The matrix as deltacells, uncompressed h5ad and zarr (anndata's defaults); seconds and bytes."""
    import deltacells

    out: dict[str, dict[str, Any]] = {}
    writers: dict[str, tuple[Path, Callable[[Path], None]]] = {
        "deltacells": (workdir / "cells.deltacells", lambda p: deltacells.write_deltacells(adata, p, progress=False)),
        "h5ad": (workdir / "cells.h5ad", lambda p: adata.write_h5ad(p)),  # no compression
        "zarr": (workdir / "cells.zarr", lambda p: adata.write_zarr(p)),
    }
    for name, (path, write) in writers.items():
        t = time.perf_counter()
        write(path)
        out[name] = {"path": str(path), "write_s": round(time.perf_counter() - t, 2), "bytes": size_on_disk(path)}
    return out


def decoded_bytes(nnz: int, n_cells: int) -> int:
    """Bytes of the matrix as the dask blocks hold it: float32 values, int32 indices and row pointers."""
    return nnz * (4 + 4) + (n_cells + 1) * 4


# ---------------------------------------------------------------------------------------------- the readers


def open_store(name: str, path: str, chunk: int, *, tile_cache_bytes: int = 0) -> tuple[Any, Any]:
    """An AnnData whose X is a dask array of CSR blocks of ``chunk`` rows, and what must stay open with it."""
    import anndata as ad
    import pandas as pd

    import deltacells

    if name in ("deltacells", STORED):
        adata = deltacells.read_deltacells(
            path,
            gene_order="stored" if name == STORED else "original",
            chunks=chunk,
            threads=1,
            tile_cache_bytes=tile_cache_bytes,
            obs_columns=[],
            obs_names=False,
        )
        return adata, None
    from anndata.experimental import read_elem_lazy

    if name == "h5ad":
        import h5py

        handle = h5py.File(path, "r")
        group = handle
    else:
        import zarr

        handle = None
        group = zarr.open_group(path, mode="r")
    X = read_elem_lazy(group["X"], chunks=(chunk, -1))
    var_names = ad.io.read_elem(group["var"]).index
    return ad.AnnData(X=X, var=pd.DataFrame(index=var_names)), handle


def close(handle: Any) -> None:
    if handle is not None:
        handle.close()


# ---------------------------------------------------------------------------------------------- the measures


def _column_sums(block: Any) -> np.ndarray:
    return np.asarray(block.sum(axis=0), dtype=np.float64).reshape(1, -1)


def gene_totals(adata: Any) -> np.ndarray:
    """Per-gene totals of the dask X: one row of sums per block, then their sum (dask/dask#11880)."""
    X = adata.X
    sums = X.map_blocks(
        _column_sums, chunks=((1,) * X.numblocks[0], (X.shape[1],)), dtype=np.float64, meta=np.empty((0, 0))
    )
    return np.asarray(sums.sum(axis=0).compute())


def pipeline(adata: Any, *, n_top_genes: int, n_comps: int | None) -> dict[str, Any]:
    """normalize_total, log1p, highly_variable_genes (seurat) and, with ``n_comps``, PCA of the HVG subset."""
    import scanpy as sc

    steps: dict[str, float] = {}
    t = time.perf_counter()
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    sc.pp.highly_variable_genes(adata, flavor="seurat", n_top_genes=n_top_genes)
    steps["hvg_s"] = time.perf_counter() - t
    hvg = np.asarray(adata.var["highly_variable"], dtype=bool)
    out: dict[str, Any] = {"hvg": hvg, "var_names": np.asarray(adata.var_names)}
    if n_comps:
        t = time.perf_counter()
        sub = adata[:, hvg].copy()
        sc.pp.pca(sub, n_comps=n_comps)
        pcs = sub.obsm["X_pca"]
        out["X_pca"] = np.asarray(pcs.compute() if hasattr(pcs, "compute") else pcs)
        out["variance_ratio"] = np.asarray(sub.uns["pca"]["variance_ratio"])
        out["loadings"] = np.asarray(sub.varm["PCs"])
        out["hvg_names"] = np.asarray(sub.var_names)
        steps["pca_s"] = time.perf_counter() - t
    out["steps"] = steps
    return out


def agreement(results: dict[str, dict[str, Any]], totals: dict[str, np.ndarray]) -> dict[str, Any]:
    """How far each other store's results are from deltacells' (0 and True: the same), gene by gene (by name)."""
    import pandas as pd

    ref, ref_totals = results["deltacells"], totals["deltacells"]
    out: dict[str, Any] = {}
    for name in results:
        if name == "deltacells" or name not in totals:
            continue
        got = dict(results[name])
        genes = pd.Index(got["var_names"]).get_indexer(ref["var_names"])  # the same genes, in deltacells' order
        got_totals, got["hvg"] = totals[name][genes], got["hvg"][genes]
        entry: dict[str, Any] = {
            "totals_equal": bool(np.array_equal(got_totals, ref_totals)),
            "totals_max_rel_diff": float(np.max(np.abs(got_totals - ref_totals) / np.maximum(ref_totals, 1))),
            "hvg_equal": bool(np.array_equal(got["hvg"], ref["hvg"])),
            "hvg_differing": int(np.sum(got["hvg"] != ref["hvg"])),
        }
        if "variance_ratio" in ref and "variance_ratio" in got and entry["hvg_equal"]:
            k = min(10, ref["variance_ratio"].shape[0])
            vr = np.max(np.abs(got["variance_ratio"][:k] - ref["variance_ratio"][:k]) / ref["variance_ratio"][:k])
            rows = pd.Index(got["hvg_names"]).get_indexer(ref["hvg_names"])
            a, b = got["loadings"][rows, :k], ref["loadings"][:, :k]
            cos = np.abs(np.sum(a * b, axis=0)) / (np.linalg.norm(a, axis=0) * np.linalg.norm(b, axis=0))
            entry["pca_variance_ratio_max_rel_diff"] = float(vr)
            entry["pca_loadings_min_abs_cosine"] = float(np.min(cos))
        entry["agree"] = bool(
            entry["totals_max_rel_diff"] < 1e-9
            and entry["hvg_equal"]
            and entry.get("pca_variance_ratio_max_rel_diff", 0) < 1e-3
            and entry.get("pca_loadings_min_abs_cosine", 1) > 0.999
        )
        out[name] = entry
    return out


# ---------------------------------------------------------------------------------------------- worker memory


def _worker_peak_reset() -> bool:
    import gc

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _worker_memory() -> dict[str, int]:
    out = {}
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    if "VmRSS" not in out:
        import psutil

        out["VmRSS"] = psutil.Process().memory_info().rss
    return out


class WorkerMemory:
    """Peak memory of each worker during a measure: VmHWM (reset at the start) and RSS sampled every 0.1 s."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.sampled: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WorkerMemory:
        self.reset = all(self.client.run(_worker_peak_reset).values())
        self.pids = self.client.run(os.getpid)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            with contextlib.suppress(Exception):
                for worker, mem in self.client.run(_worker_memory).items():
                    self.sampled[worker] = max(self.sampled.get(worker, 0), mem["VmRSS"])

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.final = self.client.run(_worker_memory)
        self.restarted = sorted(set(self.pids.values()) - set(self.client.run(os.getpid).values()))

    def peaks_mb(self) -> list[float]:
        """Each worker's peak, MiB (VmHWM when it could be reset, else the largest RSS sampled)."""
        peaks = []
        for worker, mem in self.final.items():
            peak = mem.get("VmHWM", 0) if self.reset else 0
            peaks.append(round(max(peak, self.sampled.get(worker, 0)) / MiB, 1))
        return sorted(peaks, reverse=True)


def _warm_worker(path: str) -> float:
    """Import what the tasks use and decode a tile (numba's kernels compiled or loaded): what a worker pays once."""
    t = time.perf_counter()
    import anndata  # noqa: F401
    import h5py  # noqa: F401
    import scanpy  # noqa: F401
    import zarr  # noqa: F401

    import deltacells

    dataset = deltacells.open_dataset(path, tile_cache_bytes=0, threads=1)
    for order in ("stored", "original"):  # both paths' kernels (the original order maps the columns back)
        dataset.with_gene_order(order).read_rows(slice(0, 1))
    from deltacells._kernel_loading import load_compiled_kernels

    load_compiled_kernels()  # a small read runs numpy's versions while numba's load
    return time.perf_counter() - t


def cluster(n_workers: int, workdir: Path, warm: str, memory_limit: Any = "auto") -> tuple[Any, Any]:
    """A ``LocalCluster`` of ``n_workers`` processes of one thread each, its workers warmed up, and its client."""
    import distributed

    local = distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=memory_limit,
        dashboard_address=":0",
        local_directory=str(workdir / "dask-workers"),
    )
    client = distributed.Client(local)
    client.wait_for_workers(n_workers)
    client.run(_warm_worker, warm)
    return local, client


# ---------------------------------------------------------------------------------------------- the comparison


def compare(stores: dict[str, dict[str, Any]], args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Totals and the pipeline on each store, on clusters of 1 and 2 workers; best of ``--repeat`` rounds."""
    import anndata as ad

    n_comps = args.n_comps
    names = [*STORES, *([STORED] if STORED in stores else [])]
    runs: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    for n_workers in args.workers:
        local, client = cluster(n_workers, workdir, stores["deltacells"]["path"])
        best: dict[tuple[str, str], float] = {}
        steps: dict[str, dict[str, float]] = {}
        errors: dict[str, str] = {}
        try:
            for round_ in range(args.repeat):
                totals: dict[str, np.ndarray] = {}
                results: dict[str, dict[str, Any]] = {}
                shift = round_ % len(names)  # the stores in turn, each round starting with the next one
                for name in names[shift:] + names[:shift]:
                    if name in errors:
                        continue
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            adata, handle = open_store(name, stores[name]["path"], args.chunk)
                            try:
                                t = time.perf_counter()
                                totals[name] = gene_totals(adata)
                                elapsed = time.perf_counter() - t
                                best[name, "totals"] = min(best.get((name, "totals"), np.inf), elapsed)
                                t = time.perf_counter()
                                with ad.settings.override(use_sparse_array_on_read=False):
                                    results[name] = pipeline(adata, n_top_genes=args.n_top_genes, n_comps=n_comps)
                                elapsed = time.perf_counter() - t
                                if elapsed < best.get((name, "pipeline"), np.inf):
                                    best[name, "pipeline"] = elapsed
                                    steps[name] = {k: round(v, 3) for k, v in results[name]["steps"].items()}
                            finally:
                                close(handle)
                    except Exception as exc:  # report what anndata (or deltacells) could not do, and go on
                        errors[name] = f"{type(exc).__name__}: {exc}"[:400]
                        print(f"   {n_workers} worker(s), {name}: {errors[name]}", flush=True)
                if round_ == 0 and "deltacells" in results:
                    checks[f"{n_workers}"] = agreement(results, totals)
        finally:
            client.close()
            local.close()
        for name in names:
            row: dict[str, Any] = {"workers": n_workers, "store": name}
            if name in errors:
                row["error"] = errors[name]
            for measure in ("totals", "pipeline"):
                if (name, measure) in best:
                    row[f"{measure}_s"] = round(best[name, measure], 3)
            if name in steps:
                row["pipeline_steps"] = steps[name]
            runs.append(row)
    # ratios: the anndata store's time over deltacells', same run and workers (above 1: deltacells is faster)
    for row in runs:
        if row["store"] not in ("deltacells", STORED):
            continue
        for other in runs:
            if other["workers"] == row["workers"] and other["store"] in ANNDATA_STORES:
                for measure in ("totals", "pipeline"):
                    if f"{measure}_s" in row and f"{measure}_s" in other:
                        row[f"{measure}_{other['store']}_over_deltacells"] = round(
                            other[f"{measure}_s"] / row[f"{measure}_s"], 2
                        )
    by = {(r["store"], r["workers"]): r for r in runs}
    for row in runs:
        one = by.get((row["store"], 1))
        for measure in ("totals", "pipeline"):
            if row["workers"] != 1 and one and f"{measure}_s" in one and f"{measure}_s" in row:
                row[f"{measure}_speedup_vs_1_worker"] = round(one[f"{measure}_s"] / row[f"{measure}_s"], 2)
    return {"runs": runs, "agreement": checks}


# ---------------------------------------------------------------------------------------------- out of core


def _thresholds() -> dict[str, Any]:
    """distributed's worker memory thresholds (fractions of memory_limit): spill, pause, terminate..."""
    import dask
    import distributed  # noqa: F401  (its configuration defaults)

    memory = dask.config.get("distributed.worker.memory")
    return {k: memory.get(k) for k in ("target", "spill", "pause", "terminate")}


def out_of_core(source: Any, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """A dataset several times the workers' memory limit: totals and normalize, log1p, HVG on 2 workers."""
    import deltacells

    limit = args.ooc_memory_limit
    workers = 2
    nnz_per_cell = source.X.nnz / source.n_obs
    n_cells = args.ooc_cells or int(np.ceil(args.ooc_ratio * workers * limit / (8 * nnz_per_cell + 4)))
    path = workdir / "ooc.deltacells"
    print(f"   writing {n_cells:,} resampled cells (from a dask-backed AnnData) ...", flush=True)
    t = time.perf_counter()
    lazy = resampled_dask(source, n_cells, args.seed + 1, block=args.ooc_chunk)
    deltacells.write_deltacells(lazy, path, progress=False)
    write_s = time.perf_counter() - t
    manifest = deltacells.open_dataset(path).manifest
    nnz = manifest.nnz
    doc: dict[str, Any] = {
        "n_cells": n_cells,
        "n_genes": source.n_vars,
        "nnz": nnz,
        "decoded_bytes": decoded_bytes(nnz, n_cells),
        "disk_bytes": size_on_disk(path),
        "write_s": round(write_s, 1),
        "workers": workers,
        "memory_limit_bytes": limit,
        "chunk": args.ooc_chunk,
        "tile_cache_bytes": args.ooc_tile_cache,
        "memory_thresholds": _thresholds(),
    }
    doc["decoded_over_total_limit"] = round(doc["decoded_bytes"] / (workers * limit), 2)
    local, client = cluster(workers, workdir, str(path), memory_limit=limit)
    measures: dict[str, Any] = {}
    try:
        baseline = client.run(_worker_memory)
        doc["worker_baseline_mb"] = sorted((round(m["VmRSS"] / MiB, 1) for m in baseline.values()), reverse=True)
        for measure in ("totals", "pipeline"):
            entry: dict[str, Any] = {}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    adata, _ = open_store("deltacells", str(path), args.ooc_chunk, tile_cache_bytes=args.ooc_tile_cache)
                    with WorkerMemory(client) as memory:
                        t = time.perf_counter()
                        if measure == "totals":
                            totals = gene_totals(adata)
                            entry["sum"] = float(totals.sum())
                        else:
                            got = pipeline(adata, n_top_genes=args.n_top_genes, n_comps=None)
                            entry["hvg"] = int(got["hvg"].sum())
                        entry["seconds"] = round(time.perf_counter() - t, 2)
                entry["completed"] = True
                entry["peak_worker_mb"] = memory.peaks_mb()
                entry["peak_from"] = "VmHWM" if memory.reset else "sampled RSS"
                entry["workers_restarted"] = len(memory.restarted)
            except Exception as exc:
                entry.update(completed=False, error=f"{type(exc).__name__}: {exc}"[:400])
            measures[measure] = entry
            print(f"   out of core, {measure}: {entry}", flush=True)
    finally:
        client.close()
        local.close()
    doc["measures"] = measures
    return doc


# ---------------------------------------------------------------------------------------------- report


def _source() -> str:
    import deltacells

    where = Path(deltacells.__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(where), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip()


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    def lines(path: str) -> list[str]:
        try:
            with open(path, encoding="utf-8") as f:
                return f.readlines()
        except OSError:
            return []

    cpu = next((ln.split(":", 1)[1].strip() for ln in lines("/proc/cpuinfo") if ln.startswith("model name")), "")
    mem = next((int(ln.split()[1]) * 1024 for ln in lines("/proc/meminfo") if ln.startswith("MemTotal")), 0)
    names = ("deltacells", "anndata", "scanpy", "dask", "distributed", "zarr", "h5py", "numpy", "scipy")
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{name: version(name) for name in names},
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "deltacells_source": _source(),
    }


def _num(value: Any, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def print_report(doc: dict[str, Any]) -> None:
    m = doc["matrix"]
    print(
        f"\n{m['n_cells']:,} cells x {m['n_genes']:,} genes, {m['nnz_per_cell']:.1f} nonzeros per cell, "
        f"decoded {m['decoded_bytes'] / MiB:,.0f} MiB; blocks of {doc['chunk']:,} rows; on disk: "
        + ", ".join(
            f"{k} {v['bytes'] / MiB:,.1f} MiB (written in {v['write_s']:.1f} s)"
            for k, v in doc["stores"].items()
            if "bytes" in v
        )
    )
    unsorted = [k for k, v in doc["stores"].items() if not v.get("sorted_indices", True)]
    if unsorted:
        print(
            f"blocks with column indices out of order (has_sorted_indices False): {', '.join(unsorted)}; "
            f"'{STORED}' reads deltacells in the writer's gene order (blocks in order)"
        )
    print(f"best of {doc['repeat']} round(s); ratios: the anndata store's time over deltacells' (above 1: faster)")
    header = (
        f"{'workers':>7}  {'store':<26}{'totals s':>9}{'x h5ad':>7}{'x zarr':>7}{'pipeline s':>11}"
        f"{'x h5ad':>7}{'x zarr':>7}{'hvg s':>7}{'pca s':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in doc["comparison"]["runs"]:
        lead = f"{row['workers']:>7}  {row['store']:<26}"
        if "error" in row and "totals_s" not in row:
            print(lead + row["error"][:100])
            continue
        steps = row.get("pipeline_steps", {})
        print(
            lead + f"{_num(row.get('totals_s'), '.3f'):>9}{_num(row.get('totals_h5ad_over_deltacells'), '.2f'):>7}"
            f"{_num(row.get('totals_zarr_over_deltacells'), '.2f'):>7}{_num(row.get('pipeline_s'), '.3f'):>11}"
            f"{_num(row.get('pipeline_h5ad_over_deltacells'), '.2f'):>7}"
            f"{_num(row.get('pipeline_zarr_over_deltacells'), '.2f'):>7}"
            f"{_num(steps.get('hvg_s'), '.2f'):>7}{_num(steps.get('pca_s'), '.2f'):>7}"
        )
    for workers, checks in doc["comparison"]["agreement"].items():
        for name, c in checks.items():
            print(
                f"{workers} worker(s), {name} vs deltacells: {'agree' if c['agree'] else 'DIFFER'} (totals equal "
                f"{c['totals_equal']}, HVG differing {c['hvg_differing']}, PCA variance ratio rel. diff "
                f"{_num(c.get('pca_variance_ratio_max_rel_diff'), '.1e')}, loadings |cos| >= "
                f"{_num(c.get('pca_loadings_min_abs_cosine'), '.6f')})"
            )
    o = doc.get("out_of_core")
    if o:
        print(
            f"\nout of core: {o['n_cells']:,} cells, decoded {o['decoded_bytes'] / MiB:,.0f} MiB = "
            f"{o['decoded_over_total_limit']:.2f} x the workers' total limit ({o['workers']} x "
            f"{o['memory_limit_bytes'] / MiB:,.0f} MiB); {o['disk_bytes'] / MiB:,.0f} MiB on disk, written in "
            f"{o['write_s']:.0f} s; worker baseline {o.get('worker_baseline_mb')} MiB"
        )
        for measure, e in o["measures"].items():
            if e.get("completed"):
                print(
                    f"   {measure}: completed in {e['seconds']:.1f} s, peak worker memory {e['peak_worker_mb']} MiB "
                    f"({e['peak_from']}), workers restarted: {e['workers_restarted']}"
                )
            else:
                print(f"   {measure}: FAILED {e.get('error')}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20,000 cells, one round, a tiny out-of-core run (CI)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--cells", type=int, default=200_000, help="cells of the compared matrix")
    parser.add_argument("--chunk", type=int, default=20_480, help="rows per dask block (whole deltacells tiles)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="cluster sizes")
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds; times are the best round")
    parser.add_argument("--n-top-genes", type=int, default=2000)
    parser.add_argument("--n-comps", type=int, default=50, help="PCA components (0: no PCA)")
    parser.add_argument("--ooc-memory-limit", type=int, default=2**30, help="bytes per worker, out of core")
    parser.add_argument("--ooc-ratio", type=float, default=3.5, help="decoded matrix / total worker memory limit")
    parser.add_argument("--ooc-cells", type=int, default=0, help="cells out of core (default: from --ooc-ratio)")
    parser.add_argument("--ooc-chunk", type=int, default=10_240, help="rows per dask block out of core")
    parser.add_argument("--ooc-tile-cache", type=int, default=0, help="tile_cache_bytes of the workers out of core")
    parser.add_argument("--no-ooc", dest="ooc", action="store_false", help="skip the out-of-core run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="where the stores are written (default: a temporary directory)")
    args = parser.parse_args(argv)
    started = now()
    if args.quick:
        args.cells, args.chunk, args.repeat, args.n_top_genes, args.n_comps = 20_000, 4096, 1, 500, 20
        args.ooc_cells, args.ooc_chunk = args.ooc_cells or 30_000, 4096
    warnings.filterwarnings("ignore", module="anndata")

    facts = machine()
    print(
        f"{facts['cpu'] or platform.machine()}, {facts['usable_cores']} usable cores, {facts['memory_gb']} GB, "
        f"Python {facts['python']}, anndata {facts['anndata']}, scanpy {facts['scanpy']}, dask "
        f"{facts['dask']}, deltacells {facts['deltacells']} ({facts['deltacells_source']}); load average "
        f"{facts['load_average']}",
        flush=True,
    )
    t0 = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="bench-dask-", dir=args.workdir))
    try:
        source = visium()
        adata = resampled(source, args.cells, args.seed)
        nnz = int(adata.X.nnz)
        print(f"writing {args.cells:,} resampled cells as deltacells, h5ad and zarr ...", flush=True)
        stores = write_stores(adata, workdir)
        del adata
        import deltacells

        probe = deltacells.read_deltacells(stores["deltacells"]["path"], chunks=args.chunk, obs_names=False)
        args.chunk = int(probe.X.chunks[0][0])  # whole tiles: the other stores get the same blocks
        del probe
        for name in STORES:  # blocks with column indices out of order make scipy's (and scanpy's) work slower
            adata, handle = open_store(name, stores[name]["path"], args.chunk)
            stores[name]["sorted_indices"] = bool(adata.X.blocks[0].compute(scheduler="sync").has_sorted_indices)
            close(handle)
        if not stores["deltacells"]["sorted_indices"]:
            stores[STORED] = {"path": stores["deltacells"]["path"], "variant_of": "deltacells"}
            adata, _ = open_store(STORED, stores[STORED]["path"], args.chunk)
            stores[STORED]["sorted_indices"] = bool(adata.X.blocks[0].compute(scheduler="sync").has_sorted_indices)
        doc: dict[str, Any] = {
            "benchmark": "bench_dask",
            "machine": facts,
            "quick": args.quick,
            "repeat": args.repeat,
            "chunk": args.chunk,
            "n_top_genes": args.n_top_genes,
            "n_comps": args.n_comps,
            "matrix": {
                "data": f"{args.cells:,} Visium CytAssist cells resampled with replacement (seed {args.seed})",
                "n_cells": args.cells,
                "n_genes": int(source.n_vars),
                "nnz": nnz,
                "nnz_per_cell": round(nnz / args.cells, 1),
                "decoded_bytes": decoded_bytes(nnz, args.cells),
            },
            "stores": {k: {kk: vv for kk, vv in v.items() if kk != "path"} for k, v in stores.items()},
        }
        print("comparing on clusters of " + " and ".join(map(str, args.workers)) + " worker(s) ...", flush=True)
        doc["comparison"] = compare(stores, args, workdir)
        for name in STORES:  # the sorted variant shares deltacells' path
            path = Path(stores[name]["path"])
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        if args.ooc:
            print("out of core ...", flush=True)
            doc["out_of_core"] = out_of_core(source, args, workdir)
        doc["total_s"] = round(time.perf_counter() - t0, 1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_report(doc)
    print(f"\n({doc['total_s']:.0f} s in all)")
    write_json(args.json, doc, started=started, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
