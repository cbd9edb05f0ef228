"""Atlas scale: opening, reading and subsetting datasets of 2M, 20M and 100M cells, against backed h5ad.

Datasets are built cheaply (``_scale_data.py``): a pool of 64 distinct tiles of 2,048 cells (500 genes,
about 20 nonzeros per cell, zstd level 1) is encoded once with ``deltacells.encode_tile`` and each tile of the
dataset is a copy of one of them (``--link hard``: a hard link, for little disk); the obs sidecar (cell names
``c000000123`` and a categorical ``cell_type`` of 30 categories, whose mix differs from tile to tile) is
written one shard at a time, laid out exactly as ``deltacells.obs.write_obs`` lays it out (checked byte for
byte on small sizes), and ``manifest.json`` last. Datasets up to 2M cells are validated
(``deltacells.validate.validate_dataset``); larger ones with ``--validate``.

Each measure runs in a fresh interpreter (``python bench_scale.py --child TASK``), which imports
``deltacells, anndata, scanpy``, decodes one tile (``decode_tile``, so that numba's kernels are loaded:
what a session pays once), takes its RSS as the baseline and resets its peak (``5`` to
``/proc/self/clear_refs``); memory is reported above that baseline: ``RSS`` after the measure (its result
still held) and ``peak`` (``VmHWM``). Measured, per size:

* ``open_dataset(path)``: the manifest only;
* ``read_deltacells(path)`` with the obs cache cold (a new ``cache_dir``: the columns are localized) and warm,
  and ``read_deltacells(path, obs_columns=[], obs_names=False)``;
* a category subset: ``adata[np.asarray(adata.obs["cell_type"] == c)].to_memory()``, ``c`` the cell type
  nearest 1% of the cells (``open`` is the ``read_deltacells`` before it, obs cache warm);
* random subsets of 0.01%, 0.1%, 1% and 10% of the cells (sorted, seed 0; 10% is skipped from 100M cells
  on unless ``--full``): ``adata[cells].to_memory()``, with tiles decoded (``Dataset.tiles_decoded``) against
  the tiles holding the cells, tiles read in byte ranges (remote storage only), and chunks decoded
  (``Dataset.chunks_decoded``; n/a without it) against the chunks holding the cells;
* the same category and random subsets as ``adata.X[cells]`` ("X only": the matrix without obs);
* the same subsets and category on a backed h5ad (``anndata.read_h5ad(path, backed="r")``) of the same matrix
  and obs, written by anndata (gzip and no compression) from the dataset, for ``--h5ad-sizes`` (default 2M).

``--quick`` (CI): 200k cells, one process per measure, the 0.1% subset only, no "X only", h5ad uncompressed.

Times are the best of ``--repeat`` processes, memory the largest; page cache warm (the data was just written
or read). Nothing is asserted.

Usage::

    python benchmarks/bench_scale.py --quick                        # 200k cells, 1 run (CI), < 1 minute
    python benchmarks/bench_scale.py --sizes 2M,20M,100M --h5ad-sizes 2M --fractions 0.0001 0.001 --repeat 1 \
        --json docs/_data/scale.json                                # the documentation's figures (nox -s bench)
    python benchmarks/bench_scale.py --sizes 2M,20M --json out.json  # about 25 minutes on 2 cores
    python benchmarks/bench_scale.py --sizes 100M --keep --validate  # 3.5 GB of disk (--link hard: 0.3 GB)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _scale_data as sd
from _record import now, write_json

FRACTIONS = (0.0001, 0.001, 0.01, 0.1)
MARK = "@@bench_scale "
MiB = 2**20


# ---------------------------------------------------------------------------------------------- the child


def _status(field: str) -> int:
    """A ``Vm*`` field of ``/proc/self/status``, in bytes."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    msg = f"no {field} in /proc/self/status"
    raise RuntimeError(msg)


def _reset_peak() -> None:
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


def child(task: dict[str, Any]) -> dict[str, Any]:
    """Run one measure in this (fresh) interpreter; return its figures."""
    t0 = time.perf_counter()
    import anndata
    import scanpy  # noqa: F401  (the baseline is a session that has imported it)

    import deltacells
    from deltacells.format import tile_path

    out: dict[str, Any] = {"import_s": round(time.perf_counter() - t0, 3)}
    path = task["path"]
    deltacells.decode_tile(Path(task["dataset"], tile_path(0)).read_bytes())
    from deltacells._kernel_loading import load_compiled_kernels

    load_compiled_kernels()  # numba's kernels loaded (a small decode runs numpy's versions meanwhile)
    cells = np.load(task["cells"]) if task.get("cells") else None
    import gc

    gc.collect()
    base = _status("VmRSS")
    _reset_peak()
    out["baseline_mb"] = round(base / MiB, 1)
    kind, backend = task["kind"], task.get("backend", "deltacells")
    keep: list[Any] = []  # results stay alive until memory is read

    if kind == "open":
        t = time.perf_counter()
        keep.append(deltacells.open_dataset(path))
        out["op_s"] = time.perf_counter() - t
    elif kind == "read":
        t = time.perf_counter()
        adata = deltacells.read_deltacells(path, cache_dir=task["cache_dir"], **task.get("kwargs", {}))
        out["op_s"] = time.perf_counter() - t
        out["obs_type"] = type(adata.obs).__name__
        out["obs_columns"] = list(adata.obs.columns)
        keep.append(adata)
    elif kind == "build_h5ad":
        keep.append(_build_h5ad(task, out))
    else:  # "category" or "subset"
        t = time.perf_counter()
        if backend == "h5ad":
            adata = anndata.read_h5ad(path, backed="r")
        else:
            adata = deltacells.read_deltacells(path, cache_dir=task["cache_dir"])
        out["open_s"] = time.perf_counter() - t
        out["rss_open_mb"] = round((_status("VmRSS") - base) / MiB, 1)
        stored = adata.X.dataset if backend == "deltacells" else None
        decoded = stored.tiles_decoded if stored is not None else None
        chunks = getattr(stored, "chunks_decoded", None)  # None: a deltacells without the counter (n/a)
        ranged = _ranged(stored)
        t = time.perf_counter()
        if kind == "category":
            mask = np.asarray(adata.obs["cell_type"] == task["category"])
            out["mask_s"] = time.perf_counter() - t
            cells = np.flatnonzero(mask) if task.get("x_only") else mask
        # X only: the matrix rows alone; else the AnnData of the cells, obs included, as users do
        sub = adata.X[cells] if task.get("x_only") else adata[cells].to_memory()
        out["op_s"] = time.perf_counter() - t
        out["cells"] = int(sub.shape[0])
        out["nnz"] = int(sub.nnz if task.get("x_only") else sub.X.nnz)
        if stored is not None:
            out["tiles_decoded"] = stored.tiles_decoded - decoded
            out["tiles_ranged"] = None if ranged is None else _ranged(stored) - ranged
            out["chunks_decoded"] = None if chunks is None else stored.chunks_decoded - chunks
        keep += [adata, sub]
    out["op_s"] = round(out["op_s"], 4)
    out["rss_mb"] = round((_status("VmRSS") - base) / MiB, 1)
    out["peak_mb"] = round((_status("VmHWM") - base) / MiB, 1)
    return out


def _ranged(stored: Any) -> int | None:
    """Tiles read in ranges so far (``TileReader.tiles_read_ranged``; not public on ``Dataset``)."""
    reader = getattr(stored, "_tiles", None)
    value = getattr(reader, "tiles_read_ranged", None)
    return int(value) if value is not None else None


def _build_h5ad(task: dict[str, Any], out: dict[str, Any]) -> str:
    """Write the dataset as h5ad (X read tile by tile with deltacells, obs from the obs sidecar)."""
    import anndata
    import pandas as pd
    from scipy import sparse

    import deltacells

    t = time.perf_counter()
    adata = deltacells.read_deltacells(task["dataset"], cache_dir=task["cache_dir"], obs_columns=[], obs_names=False)
    blocks = [block for _, block in adata.X.iter_row_blocks()]
    X = sparse.vstack(blocks, format="csr")
    del blocks
    obs = deltacells.read_obs(task["dataset"], cache_dir=task["cache_dir"])
    memory = anndata.AnnData(X=X, obs=obs, var=pd.DataFrame(index=adata.var_names.astype(str)))
    out["read_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    tmp = task["path"] + ".tmp"
    memory.write_h5ad(tmp, compression=task["compression"])
    os.replace(tmp, task["path"])
    out["op_s"] = time.perf_counter() - t
    out["bytes"] = os.path.getsize(task["path"])
    return task["path"]


# ---------------------------------------------------------------------------------------------- the parent


def run_child(task: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``task`` in a fresh interpreter; its figures, or ``{"error": ...}`` when it failed."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(task)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode or not lines:
        why = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        return {"error": f"{why}: {tail}"[:300]}
    return json.loads(lines[-1][len(MARK) :])


def best_of(tasks: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    """Run each task (one per repeat); the figures of the fastest run, with the largest memory of all."""
    runs = [run_child(task, timeout) for task in tasks]
    good = [run for run in runs if "error" not in run]
    if not good:
        return runs[0]
    best = dict(min(good, key=lambda run: run["op_s"]))
    for key in ("rss_mb", "peak_mb"):
        best[key] = max(run[key] for run in good)
    best["runs"] = len(good)
    return best


def parse_size(text: str) -> int:
    text = text.strip().upper().replace("_", "")
    scale = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in "KMG" else text
    return int(float(number) * scale)


def label(n: int) -> str:
    """``2000000`` as ``2M``, ``200000`` as ``200k``."""
    for unit, scale in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= scale and n % (scale // 100) == 0:
            return f"{n / scale:g}{unit}"
    return str(n)


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readlines()
    except OSError:
        return []


def _source() -> str:
    """The commit of the deltacells being measured (``-dirty``: with changes not committed), if from a checkout."""
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

    cpu = next((line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")), "")
    mem = next((int(line.split()[1]) * 1024 for line in _lines("/proc/meminfo") if line.startswith("MemTotal")), 0)
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{name: version(name) for name in ("deltacells", "anndata", "scanpy", "numpy", "pandas", "pyarrow", "h5py")},
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "deltacells_source": _source(),
    }


def pick_cells(n_cells: int, fraction: float, seed: int) -> np.ndarray:
    count = max(1, round(n_cells * fraction))
    rng = np.random.default_rng([seed, round(fraction * 1e6)])
    return np.sort(rng.choice(n_cells, count, replace=False))


def measure_size(n_cells: int, args: argparse.Namespace, workdir: Path, runs: Path) -> dict[str, Any]:
    """Build (or reuse) the dataset of ``n_cells`` and run every measure on it; print its table."""
    params = sd.Params(
        n_cells=n_cells,
        n_genes=args.genes,
        nnz_per_cell=args.nnz_per_cell,
        tile_size=args.tile_size,
        n_chunks=args.n_chunks,
        level=args.level,
        pool=args.pool,
        seed=args.seed,
        link=args.link,
    )
    need = sd.estimate_bytes(params)
    free = shutil.disk_usage(workdir).free
    key_dir = workdir / params.key()
    if need > free and not (args.keep and key_dir.exists()):
        return {"error": f"needs about {need / 1e9:.1f} GB, {free / 1e9:.1f} GB free in {workdir} (try --link hard)"}
    print(f"\n== {n_cells:,} cells: building in {key_dir} (about {need / 1e9:.2f} GB) ...", flush=True)
    t_size = time.perf_counter()
    _reset_peak()
    built = sd.build(params, workdir, reuse=args.keep)
    info = built.info
    if not info["reused"]:  # the builder's memory: the pool, two obs shards, the per-tile lists
        info["build_peak_rss_mb"] = round(_status("VmHWM") / MiB, 1)
        (built.root / sd.BUILD_FILE).write_text(json.dumps({**info, "reused": False}, indent=1))
    doc: dict[str, Any] = {"n_cells": n_cells, "dataset": info}
    how = "reused (built earlier in" if info["reused"] else "built in"
    print(
        f"   {how} {info['build_s']:.1f} s{')' if info['reused'] else ''}: pool {info['pool_s']:.1f} s, tiles "
        f"{info['tiles_s']:.1f} s, obs {info['obs_s']:.1f} s; {info['disk_bytes'] / MiB:,.1f} MiB on disk "
        f"(tiles {info['tile_bytes'] / MiB:,.1f} MiB{', hard links' if args.link == 'hard' else ''}, "
        f"obs {info['obs_bytes'] / MiB:,.1f} MiB), {info['nnz'] / n_cells:.1f} nonzeros per cell; "
        f"builder's peak RSS {_num(info.get('build_peak_rss_mb'), ',.0f')} MiB (whole process)",
        flush=True,
    )
    path = str(built.path)
    if args.validate or n_cells <= 2_000_000:
        from deltacells.validate import validate_dataset

        t = time.perf_counter()
        report = validate_dataset(path)
        check = {"ok": report.ok, "problems": [str(p) for p in report.problems[:5]]}
        check["validate_s"] = round(time.perf_counter() - t, 2)
        if n_cells <= 2_000_000:
            t = time.perf_counter()
            check["obs_same_as_write_obs"] = sd.check_obs_matches_writer(built)
            check["obs_check_s"] = round(time.perf_counter() - t, 2)
        doc["validation"] = check
        same = check.get("obs_same_as_write_obs")
        print(
            f"   validate_dataset: {'ok' if report.ok else 'PROBLEMS ' + '; '.join(check['problems'])} "
            f"({check['validate_s']:.1f} s)"
            + ("" if same is None else f"; obs shards {'==' if same else '!='} write_obs's, byte for byte"),
            flush=True,
        )

    cells_files: dict[float, str] = {}
    skipped: dict[float, str] = {}
    for fraction in args.fractions:
        count = max(1, round(n_cells * fraction))
        if fraction >= 0.1 and n_cells >= 100_000_000 and not args.full:
            gb = count * info["nnz"] / n_cells * 8 / 1e9
            skipped[fraction] = (
                f"skipped: {count:,} cells, about {gb:.1f} GB of CSR plus decoding buffers and obs; "
                "too big for the RAM of the machines this runs on by default (--full runs it)"
            )
            continue
        file = runs / f"cells-{n_cells}-{fraction:g}.npy"
        np.save(file, pick_cells(n_cells, fraction, args.seed))
        cells_files[fraction] = str(file)
    tile_size = params.tile_size
    touched = {f: int(np.unique(np.load(file) // tile_size).shape[0]) for f, file in cells_files.items()}
    chunks_touched = {f: sd.chunks_needed(built, np.load(file)) for f, file in cells_files.items()}

    timeout, repeat = args.timeout, args.repeat
    base = {"path": path, "dataset": path}
    rows: list[dict[str, Any]] = []

    def add(backend: str, measure: str, result: dict[str, Any], **extra: Any) -> None:
        rows.append({"backend": backend, "measure": measure, **extra, **result})

    print("   measuring: deltacells ...", flush=True)
    add("deltacells", "open_dataset", best_of([{**base, "kind": "open"}] * repeat, timeout))
    warm = str(runs / f"cache-{n_cells}-warm")
    cold_runs = []
    for i in range(repeat):
        cold = str(runs / f"cache-{n_cells}-cold-{i}")
        cold_runs.append(run_child({**base, "kind": "read", "cache_dir": cold}, timeout))
        if os.path.exists(cold) and not os.path.exists(warm):
            os.replace(cold, warm)  # the cache the other measures start from
        else:
            shutil.rmtree(cold, ignore_errors=True)
    good = [r for r in cold_runs if "error" not in r]
    cold_best = min(good, key=lambda r: r["op_s"]) if good else cold_runs[0]
    add("deltacells", "read_deltacells (obs cold)", cold_best)
    read = {**base, "kind": "read", "cache_dir": warm}
    add("deltacells", "read_deltacells (obs warm)", best_of([read] * repeat, timeout))
    no_obs = {**read, "kwargs": {"obs_columns": [], "obs_names": False}}
    add("deltacells", "read_deltacells (no obs)", best_of([no_obs] * repeat, timeout))
    cat_measure = f"category ({info['category_cells'] / n_cells:.2%})"

    def subsets(backend: str, task: dict[str, Any]) -> None:
        """The category and random subsets: ``adata[cells].to_memory()``, then (``--x-only``) ``adata.X[cells]``."""
        for x_only in (False, True) if args.x_only else (False,):
            suffix = ", X only" if x_only else ""
            category = {**task, "kind": "category", "category": info["category"], "x_only": x_only}
            add(
                backend,
                cat_measure + suffix,
                best_of([category] * repeat, timeout),
                tiles_touched=info["category_tiles"],
                chunks_touched=info.get("category_chunks"),
            )
            for fraction in args.fractions:
                name = f"random {fraction:.2%}{suffix}"
                if fraction in skipped:
                    if backend == "deltacells" and not x_only:
                        add(backend, name, {"skipped": skipped[fraction]})
                    continue
                subset = {**task, "kind": "subset", "cells": cells_files[fraction], "x_only": x_only}
                add(
                    backend,
                    name,
                    best_of([subset] * repeat, timeout),
                    tiles_touched=touched[fraction],
                    chunks_touched=chunks_touched[fraction],
                )

    subsets("deltacells", {**base, "cache_dir": warm})

    h5ad: dict[str, Any] = {}
    if n_cells in args.h5ad_sizes:
        for compression in args.h5ad_compression:
            backend = f"h5ad ({compression})"
            file = built.root / f"h5ad-{compression}.h5ad"
            entry: dict[str, Any] = {"path": str(file)}
            if not (args.keep and file.exists()):
                print(f"   writing {backend} ...", flush=True)
                entry.update(
                    run_child(
                        {
                            **base,
                            "path": str(file),
                            "kind": "build_h5ad",
                            "cache_dir": warm,
                            "compression": None if compression == "none" else compression,
                        },
                        timeout,
                    )
                )
            else:
                entry["reused"] = True
            if file.exists():
                entry["bytes"] = file.stat().st_size
            h5ad[backend] = entry
            if "error" in entry:
                print(f"   {backend}: {entry['error']}")
                continue
            print(f"   measuring: {backend} ...", flush=True)
            subsets(backend, {**base, "path": str(file), "backend": "h5ad"})
    doc["h5ad"] = {name: {k: v for k, v in entry.items() if k != "path"} for name, entry in h5ad.items()}  # no paths
    doc["results"] = rows
    doc["total_s"] = round(time.perf_counter() - t_size, 1)
    print_table(n_cells, params, info, h5ad, rows, repeat)
    if not args.keep:
        shutil.rmtree(built.root, ignore_errors=True)
    for entry in os.listdir(runs):
        if entry.startswith((f"cache-{n_cells}-", f"cells-{n_cells}-")):
            target = runs / entry
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    return doc


def _num(value: Any, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def print_table(n_cells: int, params: sd.Params, info: dict[str, Any], h5ad: dict[str, Any], rows: list, repeat: int):
    print(
        f"\n{n_cells:,} cells x {params.n_genes} genes, {info['nnz'] / n_cells:.1f} nonzeros per cell, "
        f"{info['n_tiles']:,} tiles of {params.tile_size} cells ({params.n_chunks} chunks, zstd {params.level}), "
        f"{info['disk_bytes'] / MiB:,.1f} MiB on disk; category {info['category']!r}: "
        f"{info['category_cells']:,} cells in {info['category_tiles']:,} tiles"
    )
    print(
        "tiles, chunks: decoded (Dataset.tiles_decoded, chunks_decoded) / holding the cells asked for; "
        "ranged: tiles read in byte ranges (remote storage only)"
    )
    for backend, entry in h5ad.items():
        if "bytes" in entry:
            built = f", written in {entry['op_s']:.1f} s" if "op_s" in entry else ""
            print(f"{backend}: {entry['bytes'] / MiB:,.1f} MiB{built}")
    base = next((r["baseline_mb"] for r in rows if "baseline_mb" in r), None)
    print(
        f"best of {repeat} fresh processes; memory above the baseline after import deltacells, anndata, scanpy "
        f"(+ kernels loaded): {_num(base, ',.0f')} MiB; open = read_deltacells / read_h5ad(backed='r') before it"
    )
    header = (
        f"{'backend':<13}{'measure':<30}{'open s':>7}{'time s':>8}{'cells':>11}{'tiles':>15}{'ranged':>7}"
        f"{'chunks':>17}{'RSS MiB':>9}{'peak MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        lead = f"{row['backend']:<13}{row['measure']:<30}"
        if "error" in row or "skipped" in row:
            print(lead + "  " + row.get("error", row.get("skipped", "")))
            continue
        is_dc = row["backend"] == "deltacells"
        tiles = chunks = ""
        if is_dc and "cells" in row:
            decoded = row.get("chunks_decoded")
            tiles = f"{_num(row.get('tiles_decoded'), ',')} / {_num(row.get('tiles_touched'), ',')}"
            chunks = f"{'n/a' if decoded is None else format(decoded, ',')} / {_num(row.get('chunks_touched'), ',')}"
        print(
            lead + f"{_num(row.get('open_s'), '.3f'):>7}{row['op_s']:>8.3f}{_num(row.get('cells'), ','):>11}"
            f"{tiles:>15}{_num(row.get('tiles_ranged'), ','):>7}{chunks:>17}"
            f"{row['rss_mb']:>9,.1f}{row['peak_mb']:>9,.1f}"
        )


def estimates(docs: dict[str, Any], targets: list[int]) -> dict[str, Any]:
    """Build time and disk of the sizes not built, scaled from the largest built one (linear in cells)."""
    built = [d for d in docs.values() if "dataset" in d]
    if not built:
        return {}
    ref = max(built, key=lambda d: d["n_cells"])
    if ref["n_cells"] < 2_000_000:  # below that, fixed costs (imports, the pool) dominate: no basis to scale
        return {}
    info, n = ref["dataset"], ref["n_cells"]
    # what does not grow with the cells: starting each process (import, kernels); the rest is taken as linear
    measured = [r for r in ref["results"] if "import_s" in r]
    startup = 1.0 + float(np.mean([r["import_s"] for r in measured])) if measured else 0.0
    fixed = min(ref["total_s"], startup * sum(r.get("runs", 1) for r in measured))
    out = {}
    for target in targets:
        if any(d["n_cells"] >= target for d in built):
            continue
        ratio = target / n
        out[label(target)] = {
            "from": label(n),
            "build_s": round(info["pool_s"] + (info["build_s"] - info["pool_s"]) * ratio, 1),
            "disk_gb": round(info["disk_bytes"] * ratio / 1e9, 2),
            "validate_s": round(ref["validation"]["validate_s"] * ratio, 1) if "validation" in ref else None,
            "total_s": round(fixed + (ref["total_s"] - fixed) * ratio, -1),  # a rough guess
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2M,20M,100M", help="cells per dataset, e.g. 200k,2M,20M,100M")
    parser.add_argument("--h5ad-sizes", default="2M", help="sizes also written and measured as backed h5ad")
    parser.add_argument("--h5ad-compression", default="gzip,none", help="h5ad compressions (gzip, lzf, none)")
    parser.add_argument("--workdir", type=Path, help="where datasets are built (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep datasets and reuse those built before")
    parser.add_argument("--validate", action="store_true", help="validate every size (up to 2M cells always)")
    parser.add_argument("--full", action="store_true", help="also the 10%% subset from 100M cells on")
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS), help="random subsets")
    parser.add_argument(
        "--x-only", action=argparse.BooleanOptionalAction, default=True, help="also adata.X[cells] (not with --quick)"
    )
    parser.add_argument("--genes", type=int, default=500)
    parser.add_argument("--nnz-per-cell", type=float, default=20.0)
    parser.add_argument("--tile-size", type=int, default=2048)
    parser.add_argument("--n-chunks", type=int, default=8)
    parser.add_argument("--level", type=int, default=1, help="zstd level")
    parser.add_argument("--pool", type=int, default=64, help="distinct tiles")
    parser.add_argument("--link", choices=("copy", "hard"), default="copy", help="tiles as copies or hard links")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="processes per measure (the best time is kept)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed to one measure")
    parser.add_argument(
        "--quick", action="store_true", help="200k cells, 1 run, the 0.1%% subset only, h5ad uncompressed (CI)"
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(MARK + json.dumps(child(json.loads(args.child))), flush=True)
        return
    started = now()
    if args.quick:
        args.sizes, args.h5ad_sizes, args.h5ad_compression, args.repeat = "200k", "200k", "none", 1
        args.fractions, args.x_only = [0.001], False
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    args.h5ad_sizes = {parse_size(s) for s in args.h5ad_sizes.split(",") if s.strip()}
    args.h5ad_compression = [c.strip() for c in args.h5ad_compression.split(",") if c.strip()]

    facts = machine()
    print(
        f"{facts['cpu'] or platform.machine()}, {facts['usable_cores']} usable cores, {facts['memory_gb']} GB, "
        f"{facts['platform']}, Python {facts['python']}, anndata {facts['anndata']}, scanpy {facts['scanpy']}, "
        f"deltacells {facts['deltacells']} ({facts['deltacells_source']}); load average {facts['load_average']}"
    )
    own = args.workdir is None and not args.keep  # --keep alone: one place under the system temp, reused
    if args.workdir is not None:
        workdir = args.workdir
    elif args.keep:
        workdir = Path(tempfile.gettempdir()) / "deltacells-bench-scale"
    else:
        workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs = Path(tempfile.mkdtemp(prefix="run-", dir=workdir))
    docs: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        for n_cells in sizes:
            docs[label(n_cells)] = measure_size(n_cells, args, workdir, runs)
            if "error" in docs[label(n_cells)]:
                print(f"\n== {n_cells:,} cells: {docs[label(n_cells)]['error']}")
    finally:
        shutil.rmtree(runs, ignore_errors=True)
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    guess = estimates(docs, [2_000_000, 20_000_000, 100_000_000])
    print()
    for name, entry in guess.items():
        print(
            f"estimate for {name} cells (from {entry['from']}): build about {entry['build_s']:,.0f} s, "
            f"{entry['disk_gb']:.1f} GB on disk"
            + (f", validation about {entry['validate_s']:,.0f} s" if entry["validate_s"] else "")
            + f"; the whole size about {entry['total_s']:,.0f} s (linear in cells: a rough guess)"
        )
    print(f"total {time.perf_counter() - t0:.0f} s" + (f"; datasets kept in {workdir}" if args.keep else ""))
    if args.json:
        params = {k: v for k, v in asdict(sd.Params(n_cells=0)).items() if k != "n_cells"}
        params.update(
            n_genes=args.genes, nnz_per_cell=args.nnz_per_cell, tile_size=args.tile_size, n_chunks=args.n_chunks,
            level=args.level, pool=args.pool, seed=args.seed, link=args.link,
        )  # fmt: skip
        doc = {
            "benchmark": "bench_scale",
            "machine": {**facts, "load_average_end": [round(x, 2) for x in os.getloadavg()]},
            "params": params,
            "repeat": args.repeat,
            "fractions": args.fractions,
            "sizes": docs,
            "estimates": guess,
        }
        write_json(args.json, doc, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
