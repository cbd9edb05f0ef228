"""The everyday scanpy and pandas idioms on an atlas (10M cells by default), lazy obs against ``lazy_obs=False``.

The dataset is built as ``bench_scale.py`` builds its own (``_scale_data.py``: 500 genes, about 20 nonzeros a
cell, cell names ``c000000123`` and a categorical ``cell_type`` of 30 categories). Then:

* **open**: ``read_deltacells(path)`` (the defaults: obs lazy above a million cells) and
  ``read_deltacells(path, lazy_obs=False)``, each in a fresh interpreter that has imported deltacells, anndata
  and scanpy and decoded a tile (numba's kernels loaded), obs cache warm: seconds, and resident memory above
  that baseline;
* **idioms**: each row of issue 27's table, run on both AnnData in one process, timed (best of ``--repeat``),
  and their results compared: the cells, names, obs values and counts must be the same;
* **a view over a large mask** (issue 41): ``adata[adata.obs["cell_type"].isin(categories)]`` of about 13% of
  the cells (the categories, smallest first, until they hold 12.9% of the cells), with the categories' colours
  in ``uns`` (which a view cuts to its categories), then ``n_obs`` (the view's names), each step timed in a
  fresh process with the obs cache warm, its resident memory above the baseline of imports: the default read
  against anndata's ``read_lazy`` of the same obs in zarr (written beside the dataset, with an X of the same
  shape and no nonzeros: neither reads X for a view).

Nothing is asserted; a row whose results differ says so in the table. ``--quick`` (CI): 1.1M cells, one round.

Usage::

    python benchmarks/bench_atlas_idioms.py --quick
    python benchmarks/bench_atlas_idioms.py --cells 10M --workdir /tmp/atlas --keep --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _scale_data as sd  # noqa: E402
from _record import command, now, write_json  # noqa: E402

MiB = 2**20


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def open_child(path: str, cache_dir: str, lazy: bool) -> dict[str, Any]:
    """In a fresh interpreter: the time and memory of opening the dataset (baseline after imports)."""
    import anndata  # noqa: F401
    import scanpy  # noqa: F401

    import deltacells
    from deltacells.format import tile_path

    deltacells.decode_tile(Path(path, tile_path(0)).read_bytes())
    from deltacells._kernel_loading import load_compiled_kernels

    load_compiled_kernels()  # a small decode runs numpy's versions: numba's kernels wait for nothing after
    import gc

    gc.collect()
    base = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    t = time.perf_counter()
    adata = deltacells.read_deltacells(path, cache_dir=cache_dir, **({} if lazy else {"lazy_obs": False}))
    seconds = time.perf_counter() - t
    return {
        "seconds": round(seconds, 3),
        "rss_mb": round((_status("VmRSS") - base) / MiB, 1),
        "peak_mb": round((_status("VmHWM") - base) / MiB, 1),
        "obs_type": type(adata.obs).__name__,
    }


def view_child(kind: str, path: str, cache_dir: str, categories: list[str]) -> dict[str, Any]:
    """In a fresh interpreter: a view over a large mask, step by step (time, resident memory above the baseline)."""
    import anndata as ad
    import scanpy  # noqa: F401

    import deltacells

    if kind == "deltacells":
        from deltacells.format import tile_path

        deltacells.decode_tile(Path(path, tile_path(0)).read_bytes())  # numba's kernels loaded, as opening does
        from deltacells._kernel_loading import load_compiled_kernels

        load_compiled_kernels()
    import gc

    gc.collect()
    base = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    steps: dict[str, Any] = {}
    t = time.perf_counter()

    def step(name: str) -> None:
        nonlocal t
        now_ = time.perf_counter()
        steps[name] = {"seconds": round(now_ - t, 3), "rss_mb": round((_status("VmRSS") - base) / MiB, 1)}
        t = time.perf_counter()

    if kind == "deltacells":
        adata = deltacells.read_deltacells(path, cache_dir=cache_dir)
    else:
        adata = ad.experimental.read_lazy(path)
    step("open")
    adata.uns["cell_type_colors"] = np.array([f"#{k:06x}" for k in range(len(sd.CELL_TYPES))])
    mask = np.asarray(adata.obs["cell_type"].isin(categories))
    step("mask")
    view = adata[mask]
    step("view")
    n_obs = view.n_obs
    step("n_obs (the view's names)")
    return {
        "steps": steps,
        "n_obs": int(n_obs),
        "seconds": round(sum(v["seconds"] for v in steps.values()), 3),
        "peak_mb": round((_status("VmHWM") - base) / MiB, 1),
    }


def _view_in_child(kind: str, path: Path, cache_dir: Path, categories: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child-view", json.dumps([kind, str(path), str(cache_dir), categories])],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def _reference_zarr(adata: Any, target: Path) -> Path:
    """The dataset's obs and var as an anndata zarr store, with an X of the same shape and no nonzeros."""
    import anndata as ad
    from scipy import sparse

    if not (target / "obs").exists():
        X = sparse.csr_matrix(adata.shape, dtype=np.float32)
        ad.AnnData(X=X, obs=adata.obs, var=adata.var).write_zarr(target)
    return target


def _large_mask_categories(counts: dict[str, int], n_cells: int, share: float = 0.129) -> list[str]:
    """Categories, smallest first, until they hold ``share`` of the cells."""
    chosen, held = [], 0
    for name, n in sorted(counts.items(), key=lambda item: (item[1], item[0])):
        if held >= share * n_cells:
            break
        chosen.append(name)
        held += n
    return chosen


def _open_in_child(path: Path, cache_dir: Path, *, lazy: bool) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps([str(path), str(cache_dir), lazy])],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def idioms(category: str, names: list[str], cells: np.ndarray, workdir: Path) -> dict[str, Callable[[Any], Any]]:
    """Each idiom of the table, as a function of the AnnData, returning what is compared."""
    import scanpy as sc

    def mask(a: Any) -> Any:
        return a.obs["cell_type"] == category

    def summary(a: Any) -> tuple:  # a small AnnData, in memory: its names, obs and counts
        a = a.to_memory() if a.is_view else a
        return (list(a.obs_names), a.obs.to_dict("list"), a.X.nnz, float(a.X.sum()), a.shape)

    def subsample_then_scanpy(a: Any) -> Any:
        s = sc.pp.subsample(a, n_obs=1000, random_state=0, copy=True)
        sc.pp.calculate_qc_metrics(s, percent_top=(50,), inplace=True)
        sc.pp.log1p(s)
        sc.tl.rank_genes_groups(s, "cell_type", groups=[category], reference="rest")
        s.write_h5ad(workdir / "subsample.h5ad")
        return (list(s.obs_names), s.obs["total_counts"].tolist(), list(s.uns["rank_genes_groups"]["names"][:5]))

    return {
        "adata[mask][:1000]": lambda a: summary(a[mask(a)][:1000]),
        "adata[idx][:10]": lambda a: summary(a[cells][:10]),
        "adata[mask][:, :10]": lambda a: summary(a[mask(a)][:, :10]),
        "adata[mask].copy()": lambda a: summary(a[mask(a)].copy()),
        "sc.pp.subsample(adata[mask], n_obs=1000)": lambda a: summary(
            sc.pp.subsample(a[mask(a)], n_obs=1000, random_state=0, copy=True)
        ),
        "adata[[stored names]]": lambda a: summary(a[names]),
        'adata.obs["cell_type"].value_counts()': lambda a: a.obs["cell_type"].value_counts().to_dict(),
        ".cat.categories, adata.obs.cell_type, adata.obs.head()": lambda a: (
            list(a.obs["cell_type"].cat.categories),
            a.obs.cell_type.iloc[:5].tolist(),
            a.obs.head().to_dict("list"),
            list(a.obs.head().index),
        ),
        'sc.get.obs_df(adata[idx], ["cell_type"])': lambda a: sc.get.obs_df(a[cells], ["cell_type"]).to_dict("list"),
        "subsample(copy=True) + qc + rank_genes_groups + write_h5ad": subsample_then_scanpy,
        "adata[idx].to_df()": lambda a: a[cells[:200]].to_df().to_numpy().sum(),
    }


def _same(a: Any, b: Any) -> bool:
    try:
        np.testing.assert_equal(a, b)
    except AssertionError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="10M", help="cells (e.g. 1.1M, 10M)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of each idiom (the best time is kept)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the dataset is built")
    parser.add_argument("--keep", action="store_true", help="reuse a dataset built before in --workdir")
    parser.add_argument("--quick", action="store_true", help="1.1M cells, one round (CI)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-view", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    started = now()
    if args.child:
        print(json.dumps(open_child(*json.loads(args.child))))
        return 0
    if args.child_view:
        print(json.dumps(view_child(*json.loads(args.child_view))))
        return 0
    if args.quick:
        args.cells, args.repeat = "1.1M", 1
    n_cells = int(float(args.cells.rstrip("Mk")) * {"M": 1_000_000, "k": 1000}.get(args.cells[-1], 1))

    import warnings

    import anndata as ad

    import deltacells

    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="bench-atlas-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        built = sd.build(sd.Params(n_cells=n_cells, link="hard"), workdir, reuse=args.keep, log=lambda *a: None)
        print(f"dataset: {n_cells:,} cells x 500 genes, built in {time.perf_counter() - t:.1f} s")
        cache = workdir / "obs-cache"
        deltacells.read_deltacells(built.path, cache_dir=cache, lazy_obs=False)  # the obs cache warm for both
        opened = {
            "lazy (default)": _open_in_child(built.path, cache, lazy=True),
            "lazy_obs=False": _open_in_child(built.path, cache, lazy=False),
        }
        for name, o in opened.items():
            memory = f"+{o['rss_mb']:.0f} MB RSS (peak +{o['peak_mb']:.0f})"
            print(f"open {name:<15} {o['seconds']:.3f} s, {memory}, {o['obs_type']}")

        rng = np.random.default_rng(0)
        cells = np.sort(rng.choice(n_cells, 5000, replace=False))
        names = [f"c{i:0{sd.name_width(n_cells)}d}" for i in (13, 53, n_cells // 2, n_cells - 1)]
        category = built.info["category"]
        calls = idioms(category, names, cells, workdir)
        adatas = {
            "lazy": deltacells.read_deltacells(built.path, cache_dir=cache),
            "eager": deltacells.read_deltacells(built.path, cache_dir=cache, lazy_obs=False),
        }
        assert isinstance(adatas["eager"].obs, __import__("pandas").DataFrame)
        counts = adatas["eager"].obs["cell_type"].value_counts()
        categories = _large_mask_categories({str(k): int(v) for k, v in counts.items()}, n_cells)
        reference = _reference_zarr(adatas["eager"], workdir / "reference-obs.zarr")
        large_mask: dict[str, Any] = {"categories": categories}
        for kind, where in (("deltacells", built.path), ("read_lazy (zarr)", reference)):
            large_mask[kind] = min(
                (_view_in_child(kind, where, cache, categories) for _ in range(args.repeat)),
                key=lambda run: run["seconds"],
            )
            run = large_mask[kind]
            steps = ", ".join(f"{k} {v['seconds']:.3f} s (+{v['rss_mb']:.0f} MB)" for k, v in run["steps"].items())
            print(f"view over a mask of {run['n_obs']:,} cells, {kind:<16} {steps}; peak +{run['peak_mb']:.0f} MB")
        rows = []
        for name, call in calls.items():
            times: dict[str, float] = {}
            results: dict[str, Any] = {}
            for kind, adata in adatas.items():
                best = float("inf")
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    try:
                        results[kind] = call(adata)
                    except Exception as exc:  # reported in the table, as the "today" column did
                        results[kind] = f"{type(exc).__name__}: {str(exc)[:80]}"
                    best = min(best, time.perf_counter() - t)
                times[kind] = best
            failed = [k for k, v in results.items() if isinstance(v, str) and ":" in v and "Error" in v]
            same = not failed and _same(results["lazy"], results["eager"])
            rows.append({"idiom": name, "lazy_s": round(times["lazy"], 3), "eager_s": round(times["eager"], 3),
                         "same": same, "errors": {k: results[k] for k in failed}})  # fmt: skip
            print(f"{name:<62} lazy {times['lazy']:7.3f} s  eager {times['eager']:7.3f} s  "
                  f"{'same' if same else 'DIFFERENT ' + str(rows[-1]['errors'])}")  # fmt: skip
        del adatas
    report = {
        "benchmark": "bench_atlas_idioms",
        "command": command(argv),
        "repeat": args.repeat,
        "n_cells": n_cells,
        "anndata": ad.__version__,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "machine": f"{os.uname().machine}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
        "open": opened,
        "idioms": rows,
        "large_mask_view": large_mask,
    }
    write_json(args.json, report, started=started, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
