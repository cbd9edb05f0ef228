"""The AnnData's other elements beside the tiles (``anndata.zarr``): their bytes and their cost, and an atlas's.

Two measures:

* **Visium** (the shared 10x data): scanpy's tutorial (QC, a ``counts`` layer, normalize, log1p, raw, 2,000
  highly variable genes, PCA, neighbours, UMAP, leiden, rank_genes_groups), then ``write_deltacells(adata,
  layer="counts")`` with and without ``extras`` (best of ``--repeat``): the bytes of the tiles, obs, var and
  ``anndata.zarr``, the write times, and ``read_deltacells(...).to_memory()`` with and without the extras; an
  h5ad of the same AnnData (anndata's defaults) for scale;
* **atlas**: a dataset of ``--atlas-cells`` cells built as ``bench_scale.py`` builds its own, with a cells x 50
  float32 embedding in ``anndata.zarr`` (the values are the cell numbers, so that subsets can be checked),
  opened in a fresh interpreter (imports and numba's kernels loaded first): seconds and resident memory above
  that baseline, then a random 0.1% of the cells brought into memory, their embedding rows checked.

Nothing is asserted. ``--quick`` (CI): the atlas of 200,000 cells, one round.

Usage::

    python benchmarks/bench_extras.py --visium ../shared/data/visium-cytassist --json out.json
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
from _record import now, write_json  # noqa: E402
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


def measure_visium(data: Path, workdir: Path, repeat: int) -> dict[str, Any]:
    import anndata as ad

    import deltacells

    adata = tutorial(data)
    out: dict[str, Any] = {"shape": list(adata.shape), "raw_shape": list(adata.raw.shape)}
    for extras in (False, True):
        path = workdir / f"visium-{extras}"

        def write(path: Path = path, extras: bool = extras) -> None:
            deltacells.write_deltacells(adata, path, layer="counts", extras=extras, overwrite=True, progress=False)

        seconds, _ = _best(repeat, write)
        out[f"write_s_extras_{extras}"] = round(seconds, 3)

        def read(path: Path = path, extras: bool = extras) -> Any:
            return deltacells.read_deltacells(path, cache_dir=workdir / "cache", extras=extras).to_memory()

        seconds, _ = _best(repeat, read)
        out[f"read_s_extras_{extras}"] = round(seconds, 3)
    path = workdir / "visium-True"
    out["bytes"] = {
        "tiles": _du(path / "tiles"),
        "obs": _du(path / "obs"),
        "var and gene order": sum(_du(path / n) for n in ("var.parquet", "var_names.txt", "gene_order.npy")),
        "anndata.zarr": _du(path / "anndata.zarr"),
    }
    out["bytes_by_element"] = {
        child.name: _du(child) for child in sorted((path / "anndata.zarr").iterdir()) if child.is_dir()
    }
    seconds, _ = _best(repeat, lambda: adata.write_h5ad(workdir / "visium.h5ad"))
    out["h5ad"] = {
        "bytes": _du(workdir / "visium.h5ad"),
        "write_s": round(seconds, 3),
        "read_s": round(_best(repeat, lambda: ad.read_h5ad(workdir / "visium.h5ad"))[0], 3),
    }
    return out


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
    parser.add_argument("--atlas-cells", default="2M", help="cells of the atlas (e.g. 200k, 2M)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="the atlas of 200,000 cells, one round (CI)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    started = now()
    if args.child:
        print(json.dumps(atlas_child(*json.loads(args.child))))
        return 0
    if args.quick:
        args.atlas_cells, args.repeat = "200k", 1
    n_cells = int(float(args.atlas_cells.rstrip("Mk")) * {"M": 1_000_000, "k": 1000}.get(args.atlas_cells[-1], 1))
    warnings.simplefilter("ignore")
    report: dict[str, Any] = {
        "benchmark": "bench_extras",
        "command": "python benchmarks/bench_extras.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{os.uname().machine}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
    }
    with tempfile.TemporaryDirectory(prefix="bench-extras-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if (args.visium / "matrix.mtx.gz").exists() and not args.quick:
            report["visium"] = visium = measure_visium(args.visium, workdir, args.repeat)
            print(json.dumps(visium, indent=1))
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
