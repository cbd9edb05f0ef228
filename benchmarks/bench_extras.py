"""The AnnData's other elements beside the tiles (``anndata.zarr``): their bytes and their cost, and an atlas's.

Two measures:

* **Visium** (the shared 10x data): scanpy's tutorial (QC, a ``counts`` layer, normalize, log1p, raw, 2,000
  highly variable genes, PCA, neighbours, UMAP, leiden, rank_genes_groups), then ``write_deltacells(adata,
  layer="counts")`` with and without ``extras``: the bytes of the tiles, obs, var and ``anndata.zarr``, the write
  times (wall and CPU) and what the extras add to them, and ``read_deltacells(...).to_memory()`` with and
  without the extras; ``write_h5ad`` of the same AnnData (anndata's defaults), and of an AnnData of the same
  elements as ``anndata.zarr`` holds (no counts layer, obs and var names only): what the extras should cost
  at most (their ratio is taken within each round; best and median reported). Each round runs in a fresh
  interpreter (each step once unmeasured first), the best of ``--repeat`` rounds is kept; ``--baseline
  PYTHON`` runs the rounds with another interpreter too, whose environment has another checkout installed
  (the code before a change), alternating with this one: before and after figures of one run;
* **atlas**: a dataset of ``--atlas-cells`` cells built as ``bench_scale.py`` builds its own, with a cells x 50
  float32 embedding in ``anndata.zarr`` (the values are the cell numbers, so that subsets can be checked),
  opened in a fresh interpreter (imports and numba's kernels loaded first): seconds and resident memory above
  that baseline, then a random 0.1% of the cells brought into memory, their embedding rows checked.

Nothing is asserted. ``--quick`` (CI): one round of Visium (when the data is there) and the atlas of 200,000
cells; ``--atlas-cells 0``: Visium alone.

Usage::

    python benchmarks/bench_extras.py --visium ../shared/data/visium-cytassist --json out.json
    python benchmarks/bench_extras.py --baseline ../main/.venv/bin/python --json docs/_data/extras.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _scale_data as sd  # noqa: E402
from _record import command, now, shown, write_json  # noqa: E402
from _visium import VISIUM  # noqa: E402

MiB = 2**20
EMBEDDING = 50


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _best(repeat: int, run: Any) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - t)
    return best, result


def tutorial(data: Path) -> Any:
    """scanpy's tutorial on the 10x matrix, counts kept as a layer and every result in the AnnData."""
    import scanpy as sc

    adata = sc.read_10x_mtx(data)
    adata.var["mt"] = adata.var_names.str.startswith("MT-")
    sc.pp.calculate_qc_metrics(adata, qc_vars=["mt"], inplace=True)
    adata.layers["counts"] = adata.X.copy()
    sc.pp.normalize_total(adata)
    sc.pp.log1p(adata)
    adata.raw = adata
    sc.pp.highly_variable_genes(adata, n_top_genes=2000)
    adata = adata[:, adata.var["highly_variable"]].copy()
    sc.pp.pca(adata, n_comps=50)
    sc.pp.neighbors(adata)
    sc.tl.umap(adata)
    sc.tl.leiden(adata, flavor="igraph", n_iterations=2, directed=False)
    sc.tl.rank_genes_groups(adata, "leiden")
    return adata


def same_elements(adata: Any) -> Any:
    """The AnnData's elements that ``anndata.zarr`` holds (all but the counts layer, obs and var: their names only)."""
    import anndata as ad
    import pandas as pd

    kept = ad.AnnData(
        X=adata.X,
        obs=pd.DataFrame(index=adata.obs_names),
        var=pd.DataFrame(index=adata.var_names),
        obsm=dict(adata.obsm),
        varm=dict(adata.varm),
        obsp=dict(adata.obsp),
        uns=dict(adata.uns),
    )
    kept.raw = adata.raw.to_adata()
    return kept


def visium_child(h5ad: str, workdir: str) -> dict[str, Any]:
    """In a fresh interpreter: one round of the Visium writes and reads (after one of each unmeasured), timed."""
    import anndata as ad

    import deltacells

    adata = ad.read_h5ad(h5ad)
    same = same_elements(adata)
    work = Path(workdir)
    steps: dict[str, Any] = {}
    for extras in (False, True):
        path = work / f"visium-{extras}"
        steps[f"write_extras_{extras}"] = lambda path=path, extras=extras: deltacells.write_deltacells(
            adata, path, layer="counts", extras=extras, overwrite=True, progress=False
        )
        steps[f"read_extras_{extras}"] = lambda path=path, extras=extras: deltacells.read_deltacells(
            path, cache_dir=work / "cache", extras=extras
        ).to_memory()
    steps["write_h5ad"] = lambda: adata.write_h5ad(work / "visium.h5ad")
    steps["read_h5ad"] = lambda: ad.read_h5ad(work / "visium.h5ad")
    steps["write_h5ad_same_elements"] = lambda: same.write_h5ad(work / "same.h5ad")
    out: dict[str, Any] = {}
    for name, step in steps.items():
        step()  # the first call of each pays for imports and warm-ups
        wall, cpu = time.perf_counter(), time.process_time()
        step()
        out[name] = {"s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
    return out


def _run_visium_child(python: str, h5ad: Path, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [python, __file__, "--visium-child", json.dumps([str(h5ad), str(workdir)])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode:
        msg = f"{python}: the Visium round failed (exit {out.returncode}):\n{out.stderr.strip()[-3000:]}"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _visium_figures(rounds: list[dict[str, Any]], path: Path, workdir: Path) -> dict[str, Any]:
    """The best of the rounds of one interpreter, in the layout the documentation reads."""

    def best(step: str, field: str = "s") -> float:
        return round(min(r[step][field] for r in rounds), 3)

    added = sorted(r["write_extras_True"]["s"] - r["write_extras_False"]["s"] for r in rounds)
    extras_cpu = min(r["write_extras_True"]["cpu_s"] - r["write_extras_False"]["cpu_s"] for r in rounds)
    # what the extras add over write_h5ad of the same elements, within each round (the machine's drift cancels)
    ratios = sorted(
        (r["write_extras_True"]["s"] - r["write_extras_False"]["s"]) / r["write_h5ad_same_elements"]["s"]
        for r in rounds
    )
    out: dict[str, Any] = {"rounds": len(rounds)}
    for extras in (False, True):
        out[f"write_s_extras_{extras}"] = best(f"write_extras_{extras}")
        out[f"write_cpu_s_extras_{extras}"] = best(f"write_extras_{extras}", "cpu_s")
        out[f"read_s_extras_{extras}"] = best(f"read_extras_{extras}")
    out["extras_write_s"] = round(added[0], 3)  # what the extras add to a write (in one round)
    out["extras_write_s_median"] = round(added[len(added) // 2], 3)
    out["extras_write_cpu_s"] = round(extras_cpu, 3)
    out["extras_over_h5ad_same_elements"] = {"best": round(ratios[0], 2), "median": round(ratios[len(ratios) // 2], 2)}
    out["bytes"] = {
        "tiles": _du(path / "tiles"),
        "obs": _du(path / "obs"),
        "var and gene order": sum(_du(path / n) for n in ("var.parquet", "var_names.txt", "gene_order.npy")),
        "anndata.zarr": _du(path / "anndata.zarr"),
    }
    out["bytes_by_element"] = {
        child.name: _du(child) for child in sorted((path / "anndata.zarr").iterdir()) if child.is_dir()
    }
    out["h5ad"] = {
        "bytes": _du(workdir / "visium.h5ad"),
        "write_s": best("write_h5ad"),
        "write_cpu_s": best("write_h5ad", "cpu_s"),
        "read_s": best("read_h5ad"),
    }
    out["h5ad_same_elements"] = {
        "bytes": _du(workdir / "same.h5ad"),
        "write_s": best("write_h5ad_same_elements"),
        "write_cpu_s": best("write_h5ad_same_elements", "cpu_s"),
    }
    return out


def measure_visium(
    data: Path, workdir: Path, repeat: int, baseline: str | None = None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The Visium figures of this interpreter, and of ``baseline`` (rounds alternating) when given."""
    adata = tutorial(data)
    h5ad = workdir / "visium-processed.h5ad"
    adata.write_h5ad(h5ad)
    shape = {"shape": list(adata.shape), "raw_shape": list(adata.raw.shape)}
    pythons = {"this": sys.executable, **({"baseline": baseline} if baseline else {})}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in pythons}
    for _ in range(repeat):
        for name, python in pythons.items():
            rounds[name].append(_run_visium_child(python, h5ad, workdir / name))
    figures = {
        name: {**shape, **_visium_figures(found, workdir / name / "visium-True", workdir / name)}
        for name, found in rounds.items()
    }
    for name, f in figures.items():
        same, ratio = f["h5ad_same_elements"], f["extras_over_h5ad_same_elements"]
        print(
            f"Visium ({name}): the extras add {f['extras_write_s']:.3f} s (CPU {f['extras_write_cpu_s']:.3f} s) to a "
            f"write ({f['write_s_extras_False']:.3f} s without them; median {f['extras_write_s_median']:.3f} s); "
            f"write_h5ad {f['h5ad']['write_s']:.3f} s, of the same elements {same['write_s']:.3f} s (CPU "
            f"{same['write_cpu_s']:.3f} s); the extras over the latter in a round: {ratio['best']:.2f}x best, "
            f"{ratio['median']:.2f}x median"
        )
    return figures["this"], figures.get("baseline")


def build_atlas(n_cells: int, workdir: Path) -> Path:
    """A bench_scale dataset with a cells x 50 embedding in anndata.zarr (a dask array, written block by block)."""
    import dask.array as da

    from deltacells.format import EXTRAS_NAME, MANIFEST_NAME
    from deltacells.io._extras import write_extras
    from deltacells.storage import open_store

    built = sd.build(sd.Params(n_cells=n_cells, link="hard"), workdir, reuse=True, log=lambda *a: None)
    path = built.path
    if (path / EXTRAS_NAME).exists():
        return path
    numbers = da.arange(n_cells, dtype=np.float32, chunks=65_536)[:, None]
    embedding = da.broadcast_to(numbers, (n_cells, EMBEDDING)).rechunk((65_536, EMBEDDING))
    extras = write_extras(open_store(str(path)), "X", {"obsm/X_emb": embedding})
    manifest = json.loads((path / MANIFEST_NAME).read_text())  # the builder wrote it already: add the entry
    manifest["metadata"] = {**manifest.get("metadata", {}), "deltacells": {"anndata": extras.to_dict()}}
    (path / MANIFEST_NAME).write_text(json.dumps(manifest))
    return path


def atlas_child(path: str, cache_dir: str) -> dict[str, Any]:
    """In a fresh interpreter: open the atlas, then 0.1% of its cells to memory, their embedding rows checked."""
    import anndata  # noqa: F401
    import scanpy  # noqa: F401

    import deltacells
    from deltacells.format import tile_path

    deltacells.decode_tile(Path(path, tile_path(0)).read_bytes())
    from deltacells._kernel_loading import load_compiled_kernels

    load_compiled_kernels()  # a small decode runs numpy's versions: numba's kernels wait for nothing after
    import gc

    gc.collect()
    status = Path("/proc/self/status")

    def rss(field: str) -> float:
        line = next(x for x in status.read_text().splitlines() if x.startswith(field + ":"))
        return int(line.split()[1]) * 1024 / MiB

    base = rss("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    t = time.perf_counter()
    adata = deltacells.read_deltacells(path, cache_dir=cache_dir)
    open_s = time.perf_counter() - t
    out = {"open_s": round(open_s, 3), "open_rss_mb": round(rss("VmRSS") - base, 1)}
    out["embedding_type"] = type(adata.obsm["X_emb"]).__name__
    cells = np.sort(np.random.default_rng(0).choice(adata.n_obs, max(1, adata.n_obs // 1000), replace=False))
    t = time.perf_counter()
    subset = adata[cells].to_memory()
    out["subset_s"] = round(time.perf_counter() - t, 3)
    out["subset_cells"] = int(cells.shape[0])
    out["rows_right"] = bool(np.array_equal(subset.obsm["X_emb"][:, 0], cells.astype(np.float32)))
    out["peak_mb"] = round(rss("VmHWM") - base, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visium", type=Path, default=VISIUM, help="the 10x matrix (skipped when absent)")
    parser.add_argument("--atlas-cells", default="2M", help="cells of the atlas (e.g. 200k, 2M; 0: no atlas)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="the atlas of 200,000 cells, one round (CI)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--baseline", default=None, help="another interpreter (checkout) measured alongside")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--visium-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    started = now()
    if args.child:
        print(json.dumps(atlas_child(*json.loads(args.child))))
        return 0
    if args.visium_child:
        warnings.simplefilter("ignore")
        print(json.dumps(visium_child(*json.loads(args.visium_child))))
        return 0
    if args.quick:
        args.atlas_cells, args.repeat = "200k", 1
    n_cells = int(float(args.atlas_cells.rstrip("Mk")) * {"M": 1_000_000, "k": 1000}.get(args.atlas_cells[-1], 1))
    warnings.simplefilter("ignore")
    report: dict[str, Any] = {
        "benchmark": "bench_extras",
        "command": command(argv),
        "machine": f"{os.uname().machine}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
    }
    with tempfile.TemporaryDirectory(prefix="bench-extras-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if (args.visium / "matrix.mtx.gz").exists():
            report["visium"], baseline = measure_visium(args.visium, workdir, args.repeat, args.baseline)
            if baseline is not None:
                report["visium_baseline"] = {"python": shown(args.baseline), **baseline}
        if not n_cells:  # Visium alone
            write_json(args.json, report, started=started, quick=args.quick)
            return 0
        path = build_atlas(n_cells, workdir)
        child = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps([str(path), str(workdir / "atlas-cache")])],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        report["atlas"] = {"n_cells": n_cells, "embedding": [n_cells, EMBEDDING], **json.loads(child.stdout)}
        print(json.dumps(report["atlas"], indent=1))
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    write_json(args.json, report, started=started, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
