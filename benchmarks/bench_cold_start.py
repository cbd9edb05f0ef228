"""What a fresh process pays before it reads at full speed: imports, the open, the first cell, the first full read.

Every measurement is a fresh interpreter (``subprocess``), on a dataset of 100,000 Visium cells drawn with
replacement (37 M nonzeros; written once, read from the page cache), with numba's cache

* ``warm``: a cache directory (``NUMBA_CACHE_DIR``) that an earlier process filled, as on any machine where
  deltacells ran once;
* ``cold``: an empty one for every run, as on a fresh install, where the kernels are compiled;

and three ways of starting (the third with the warm cache only):

* ``script``: ``import deltacells``, then ``read_deltacells`` (which imports anndata), then the reads;
* ``anndata first``: anndata imported before (as after ``import scanpy``), so the open itself is short and the
  reads follow it closely;
* ``kernels first``: as ``anndata first``, the kernels loaded before the open (``load_compiled_kernels()``):
  what the first full read costs beyond the steady one apart from the kernels (the output's memory, new to
  the process).

Each run reports (seconds, ``time.perf_counter``): ``import deltacells``, ``import anndata`` (the second way
only), ``open`` (``read_deltacells``), ``first cell`` and ``second cell`` (``adata.X[k]``, random cells),
then three full reads (``adata.X.to_memory()``, genes in their original order, rows sorted); and, apart, the
loading of the kernels alone (what the background thread does). The medians of ``--runs`` runs are recorded,
for this interpreter and for each ``--python`` given (an interpreter with deltacells installed; numba keeps a
cache per Python version). ``nox -s bench_cold_start`` runs it on each supported Python. Usage::

    python benchmarks/bench_cold_start.py --json docs/_data/cold-start-3.11.json
    python benchmarks/bench_cold_start.py --quick     # CI: 20,000 cells, one run, this interpreter
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _record import now, write_json

#: What one fresh interpreter runs: argv = dataset path, way of starting; prints the timings as JSON.
CHILD = r"""
import sys, time, json
began = time.perf_counter()
timings = {}
if sys.argv[2] in ("anndata first", "kernels first"):
    import anndata
    timings["import anndata"] = time.perf_counter() - began
    began = time.perf_counter()
import deltacells
timings["import deltacells"] = time.perf_counter() - began
if sys.argv[2] == "kernels first":
    from deltacells._kernel_loading import load_compiled_kernels
    t = time.perf_counter()
    load_compiled_kernels()
    timings["kernels loaded"] = time.perf_counter() - t
t = time.perf_counter()
adata = deltacells.read_deltacells(sys.argv[1])
timings["open"] = time.perf_counter() - t
import numpy as np
cells = np.random.default_rng().integers(0, adata.n_obs, size=2)
for name, cell in zip(("first cell", "second cell"), cells):
    t = time.perf_counter()
    adata.X[int(cell)]
    timings[name] = time.perf_counter() - t
for k in range(3):
    t = time.perf_counter()
    matrix = adata.X.to_memory()
    timings[f"full read {k + 1}"] = time.perf_counter() - t
    del matrix
print(json.dumps(timings))
"""

#: The loading of the kernels alone, in a fresh interpreter (numba imported, its compiler prepared, the kernels
#: loaded from its cache or compiled): what the background thread does.
LOADING = r"""
import time, json
began = time.perf_counter()
from deltacells._kernel_loading import load_compiled_kernels
load_compiled_kernels()
print(json.dumps({"kernels loaded": time.perf_counter() - began}))
"""

WAYS = ("script", "anndata first", "kernels first")
CACHES = ("warm", "cold")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", default=[], help="another interpreter to measure")
    parser.add_argument("--runs", type=int, default=5, help="runs of each case (the medians are kept)")
    parser.add_argument("--cold-runs", type=int, default=2, help="runs of each case with a cold cache")
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="20,000 cells, one run, this interpreter only")
    parser.add_argument("--json", type=Path, help="write the results here (docs/_data/cold-start.json)")
    args = parser.parse_args()
    started = now()
    pythons = [sys.executable] + ([] if args.quick else args.python)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dataset = root / "ds"
        n_cells = 20_000 if args.quick else args.cells
        nnz = _write_dataset(dataset, n_cells)
        doc: dict[str, Any] = {"n_cells": n_cells, "nnz": nnz, "interpreters": {}}
        for python in pythons:
            version = _version(python)
            warm_cache = root / f"numba-{version}"
            _child(python, dataset, "script", warm_cache)  # fills the warm cache (compiles, once)
            cases: dict[str, Any] = {}
            for cache in CACHES:
                for way in WAYS if cache == "warm" else WAYS[:2]:
                    runs = 1 if args.quick else (args.runs if cache == "warm" else args.cold_runs)
                    samples = []
                    for k in range(runs):
                        where = warm_cache if cache == "warm" else root / f"cold-{version}-{way}-{k}"
                        samples.append(_child(python, dataset, way, where))
                    cases[f"{cache}, {way}"] = {
                        name: statistics.median(s[name] for s in samples) for name in samples[0]
                    } | {"runs": runs}
            runs = 1 if args.quick else args.runs
            loading = [_child(python, dataset, "", warm_cache, code=LOADING)["kernels loaded"] for _ in range(runs)]
            cases["warm, kernels alone"] = {"kernels loaded": statistics.median(loading), "runs": runs}
            doc["interpreters"][version] = cases
            _print(version, cases)
    write_json(args.json, doc, started=started, quick=args.quick)


def _write_dataset(path: Path, n_cells: int) -> int:
    import numpy as np
    import scanpy as sc
    from _visium import VISIUM, resampled_rows
    from scipy import sparse

    import deltacells

    visium = sc.read_10x_mtx(VISIUM)
    adata = visium[resampled_rows(visium.n_obs, n_cells)].copy()
    adata.X = sparse.csr_matrix(adata.X, dtype=np.float32)
    adata.obs_names = [f"cell-{i}" for i in range(n_cells)]
    deltacells.write_deltacells(adata, path, progress=False)
    return int(adata.X.nnz)


def _version(python: str) -> str:
    out = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], capture_output=True)
    return out.stdout.decode().strip()


def _child(python: str, dataset: Path, way: str, numba_cache: Path, code: str = CHILD) -> dict[str, float]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(numba_cache), "DELTACELLS_CACHE": str(dataset.parent / "obs")}
    # Bytecode read from __pycache__ as in an installed package (pip compiles it), not compiled from source in
    # every process (PYTHONDONTWRITEBYTECODE, set on some machines, would add its compilation to the loading).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        [python, "-c", code, str(dataset), way], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print(version: str, cases: dict[str, Any]) -> None:
    print(f"Python {version}: medians, seconds")
    names = list(dict.fromkeys(n for c in cases.values() for n in c if n != "runs"))
    print(f"  {'case':28s}" + "".join(f"{n:>18s}" for n in names))
    for case, values in cases.items():
        cells = "".join(f"{values[n]:18.3f}" if n in values else f"{'':>18s}" for n in names)
        print(f"  {case:28s}{cells}")
    for case, values in cases.items():
        if "full read 1" not in values:
            continue
        steady = min(values["full read 2"], values["full read 3"])
        first = values["full read 1"] / steady
        print(f"  {case}: first cell {values['first cell'] * 1000:.0f} ms, first full read {first:.2f}x the steady one")


if __name__ == "__main__":
    main()
