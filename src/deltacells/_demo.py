"""The end-to-end demo behind ``deltacells demo``: the package's main job, on generated data.

Generate a realistic count matrix (with obs and var), convert it with :func:`~deltacells.write_deltacells`,
read it back lazily with :func:`~deltacells.read_deltacells`, check that it is identical to the source,
subset cells (by an obs category, a random 1% sample, a run of consecutive cells) counting the tiles
decoded, run a short scanpy pipeline on one subset, and report sizes and speeds.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import anndata as ad
    import pandas as pd

__all__ = ["DemoMismatchError", "run_demo"]


class DemoMismatchError(RuntimeError):
    """The data read back differs from what was written (a bug: please report it)."""


def run_demo(
    *,
    n_cells: int = 10_000,
    n_genes: int = 6_000,
    tile_size: int = 2048,
    level: int = 19,
    out: str | Path | None = None,
    seed: int = 0,
    threads: int | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Generate, write, read back lazily, check, subset, run scanpy, and report.

    Parameters
    ----------
    n_cells, n_genes
        Size of the generated matrix.
    tile_size
        Cells per tile.
    level
        zstd level of the tiles.
    out
        Where to keep the dataset (its obs cache goes beside it, in ``<out>.obs-cache``); by default
        everything goes to a temporary directory that is removed afterwards.
    seed
        Seed of the generator (and of the random sample).
    threads
        Threads writing and decoding (default: the usable CPUs).
    echo
        Where the report goes, line by line.

    Returns
    -------
    dict
        The figures reported (sizes, times, speeds, tiles decoded).

    Raises
    ------
    DemoMismatchError
        If anything read back differs from the source.
    """
    import deltacells
    from deltacells._threads import default_threads
    from deltacells.datasets import synthetic_counts

    n_threads = default_threads() if threads is None else threads
    figures: dict[str, Any] = {"n_cells": n_cells, "n_genes": n_genes}
    with tempfile.TemporaryDirectory(prefix="deltacells-demo-") as tmp_name:
        tmp = Path(tmp_name)
        if out is not None:
            path = Path(out)
            cache_dir = path.with_name(path.name + ".obs-cache")
        else:
            path, cache_dir = tmp / "demo.deltacells", tmp / "obs-cache"

        # ------------------------------------------------------------ generate
        t0 = time.perf_counter()
        adata = synthetic_counts(n_cells, n_genes, seed=seed)
        t_gen = time.perf_counter() - t0
        nnz = int(adata.X.nnz)
        figures["nnz"] = nnz
        echo(
            f"generated   {n_cells:,} cells x {n_genes:,} genes, {nnz:,} nonzeros "
            f"({100 * nnz / (n_cells * n_genes):.1f}% dense), obs {list(adata.obs.columns)}, "
            f"var {list(adata.var.columns)} ({t_gen:.1f} s)"
        )

        # ------------------------------------------------------------ the h5ad it would be
        h5ad = tmp / "demo.h5ad"
        t0 = time.perf_counter()
        adata.write_h5ad(h5ad, compression="gzip")
        t_h5ad = time.perf_counter() - t0
        h5ad_bytes = h5ad.stat().st_size
        figures["h5ad_gzip_bytes"] = h5ad_bytes
        echo(f"h5ad        the same AnnData as h5ad (gzip): {_mb(h5ad_bytes)} ({t_h5ad:.1f} s to write)")

        # ------------------------------------------------------------ convert
        t0 = time.perf_counter()
        deltacells.write_deltacells(
            adata,
            path,
            tile_size=tile_size,
            level=level,
            metadata={"source": "deltacells demo", "seed": seed},
            overwrite=out is not None,
            threads=threads,
            progress=False,
        )
        t_write = time.perf_counter() - t0
        dataset = deltacells.open_dataset(path)
        m = dataset.manifest
        tile_bytes = int(m.tile_bytes.sum())
        stored = tile_bytes + int(sum(m.obs_shard_bytes)) + _other_bytes(dataset)
        figures.update(
            bytes=stored,
            tile_bytes=tile_bytes,
            bytes_per_nnz=tile_bytes / max(nnz, 1),
            ratio_vs_h5ad=h5ad_bytes / max(stored, 1),
            write_cells_per_s=n_cells / t_write,
            n_tiles=m.n_tiles,
        )
        echo(
            f"wrote       {path} with write_deltacells: {m.n_tiles} tiles of {tile_size:,} cells, zstd level {level}, "
            f"{n_threads} thread{'s' if n_threads != 1 else ''}; {_mb(stored)} in all (tiles {_mb(tile_bytes)}, "
            f"{tile_bytes / max(nnz, 1):.2f} bytes per nonzero); {t_write:.1f} s, {n_cells / t_write:,.0f} cells/s"
        )

        # ------------------------------------------------------------ read back lazily
        t0 = time.perf_counter()
        back = deltacells.read_deltacells(path, cache_dir=cache_dir, tile_cache_bytes=0, threads=threads)
        t_open = time.perf_counter() - t0
        lazy = back.X.dataset
        echo(
            f"opened      read_deltacells: {back.n_obs:,} x {back.n_vars:,} AnnData, X lazy "
            f"({lazy.tiles_decoded} tiles decoded), obs localized into {cache_dir} ({t_open * 1e3:.0f} ms)"
        )
        t0 = time.perf_counter()
        back.X[0]
        t_warm = time.perf_counter() - t0
        echo(
            f"warm-up     the first read in a process loads the compiled decoding kernels: {t_warm * 1e3:.0f} ms "
            "(done once here so that the timings below are honest)"
        )

        order = np.asarray(back.uns["deltacells"]["gene_order"])
        expected_X = adata.X[:, order].tocsr()
        lazy.tiles_decoded = 0
        t0 = time.perf_counter()
        full = back.X[:]
        t_read = time.perf_counter() - t0
        tiles_read = lazy.tiles_decoded
        figures["read_nnz_per_s"] = nnz / t_read
        t0 = time.perf_counter()
        back.X[:]
        t_again = time.perf_counter() - t0
        figures["read_again_nnz_per_s"] = nnz / t_again
        same = _same_matrix(full, expected_X)
        same_obs = _same_frame(back.obs, adata.obs)
        restored = deltacells.restore_gene_order(back)
        same_var = _same_frame(restored.var, adata.var)
        echo(
            f"read all    {tiles_read} tiles decoded in {t_read * 1e3:.0f} ms "
            f"({nnz / t_read / 1e6:,.0f} M nonzeros/s; {t_again * 1e3:.0f} ms, {nnz / t_again / 1e6:,.0f} M/s when "
            f"repeated, in memory already touched); identical to the source: {same and same_obs and same_var} "
            f"(X {same}, obs {same_obs}, var {same_var})"
        )
        if not (same and same_obs and same_var):
            msg = (
                f"the data read back from {path} differs from what was written (X identical: {same}, obs: "
                f"{same_obs}, var: {same_var}); this is a bug in deltacells, please report it"
            )
            raise DemoMismatchError(msg)

        # ------------------------------------------------------------ subsets
        counts = adata.obs["cell_type"].value_counts()
        cell_type = counts.index[0]
        mask = (back.obs["cell_type"] == cell_type).to_numpy()
        rng = np.random.default_rng(seed)
        sample = np.sort(rng.choice(n_cells, size=max(1, n_cells // 100), replace=False))
        run = min(1000, tile_size, n_cells)
        subsets = [
            (f"cell_type == {cell_type!r}", mask),
            ("a random 1% sample", sample),
            (f"cells 0:{run:,} (consecutive)", slice(0, run)),
        ]
        category_subset = None
        figures["subsets"] = []
        for label, index in subsets:
            before = lazy.tiles_decoded
            t0 = time.perf_counter()
            sub = back[index].to_memory()
            t_sub = time.perf_counter() - t0
            decoded = lazy.tiles_decoded - before
            identical = _same_matrix(sub.X, expected_X[index])
            echo(
                f"subset      {label}: {sub.n_obs:,} cells from {decoded} of {m.n_tiles} tiles in "
                f"{t_sub * 1e3:.0f} ms; identical: {identical}"
            )
            if not identical:
                msg = f"the cells of the subset {label} read back differ from the source; this is a bug in deltacells"
                raise DemoMismatchError(msg)
            figures["subsets"].append({"subset": label, "cells": sub.n_obs, "tiles": decoded, "seconds": t_sub})
            if category_subset is None:
                category_subset = (label, sub)

        # ------------------------------------------------------------ scanpy
        assert category_subset is not None
        figures["scanpy"] = _scanpy_pipeline(*category_subset, echo=echo)

        echo(
            f"summary     {tile_bytes / max(nnz, 1):.2f} bytes per nonzero; {_mb(stored)} against {_mb(h5ad_bytes)} "
            f"as gzip h5ad ({h5ad_bytes / max(stored, 1):.1f}x smaller); write {n_cells / t_write:,.0f} cells/s "
            f"(zstd level {level}); full read {nnz / t_read / 1e6:,.0f} M nonzeros/s (after the warm-up)"
        )
        return figures


def _scanpy_pipeline(label: str, sub: ad.AnnData, *, echo: Callable[[str], None]) -> dict[str, Any]:
    """QC metrics, normalisation, log1p, highly variable genes and PCA on an in-memory subset."""
    import scanpy as sc

    # scanpy compiles numba functions on first use (seconds, once per process): run on a few cells first.
    t0 = time.perf_counter()
    _scanpy_steps(sub[: min(50, sub.n_obs)].copy(), n_top=max(2, min(20, sub.n_vars // 3)), n_comps=2)
    t_compile = time.perf_counter() - t0
    echo(
        f"scanpy      on the subset {label} ({sub.n_obs:,} cells x {sub.n_vars:,} genes, from to_memory()); "
        f"warm-up on a few cells first, for scanpy's own first-call compilation: {t_compile:.1f} s"
    )
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    sc.pp.calculate_qc_metrics(sub, qc_vars=["mito"], percent_top=None, log1p=False, inplace=True)
    timings["calculate_qc_metrics"] = time.perf_counter() - t0
    obs = sub.obs
    echo(
        f"              calculate_qc_metrics   median per cell: {obs['total_counts'].median():,.0f} counts, "
        f"{obs['n_genes_by_counts'].median():,.0f} genes, {obs['pct_counts_mito'].median():.1f}% mitochondrial "
        f"({timings['calculate_qc_metrics'] * 1e3:.0f} ms)"
    )
    t0 = time.perf_counter()
    sc.pp.normalize_total(sub, target_sum=1e4)
    sc.pp.log1p(sub)
    timings["normalize_total+log1p"] = time.perf_counter() - t0
    echo(f"              normalize_total, log1p ({timings['normalize_total+log1p'] * 1e3:.0f} ms)")
    n_top = max(2, min(2000, sub.n_vars // 3))
    t0 = time.perf_counter()
    sc.pp.highly_variable_genes(sub, n_top_genes=n_top)
    timings["highly_variable_genes"] = time.perf_counter() - t0
    n_hvg = int(sub.var["highly_variable"].sum())
    echo(f"              highly_variable_genes  {n_hvg:,} genes ({timings['highly_variable_genes'] * 1e3:.0f} ms)")
    n_comps = max(1, min(30, sub.n_obs - 1, n_hvg - 1))
    t0 = time.perf_counter()
    sc.pp.pca(sub, n_comps=n_comps)
    timings["pca"] = time.perf_counter() - t0
    explained = float(np.sum(sub.uns["pca"]["variance_ratio"]))
    echo(
        f"              pca                    {n_comps} components, {100 * explained:.1f}% of the variance of the "
        f"highly variable genes ({timings['pca'] * 1e3:.0f} ms)"
    )
    return {"cells": sub.n_obs, "highly_variable": n_hvg, "n_comps": n_comps, "seconds": timings}


def _scanpy_steps(adata: ad.AnnData, *, n_top: int, n_comps: int) -> None:
    """The pipeline, untimed (the warm-up)."""
    import scanpy as sc

    sc.pp.calculate_qc_metrics(adata, qc_vars=["mito"], percent_top=None, log1p=False, inplace=True)
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    sc.pp.highly_variable_genes(adata, n_top_genes=n_top)
    sc.pp.pca(adata, n_comps=max(1, min(n_comps, adata.n_obs - 1, n_top - 1)))


def _same_matrix(a: Any, b: Any) -> bool:
    return a.shape == b.shape and (a != b).nnz == 0


def _same_frame(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Same index, columns and values (categoricals by category; dtypes of strings may differ)."""
    import pandas as pd

    if list(map(str, a.index)) != list(map(str, b.index)) or list(a.columns) != list(b.columns):
        return False
    for name in a.columns:
        x, y = a[name], b[name]
        if isinstance(x.dtype, pd.CategoricalDtype) or isinstance(y.dtype, pd.CategoricalDtype):
            if not (isinstance(x.dtype, pd.CategoricalDtype) and isinstance(y.dtype, pd.CategoricalDtype)):
                return False
            if list(x.cat.categories) != list(y.cat.categories) or not np.array_equal(x.cat.codes, y.cat.codes):
                return False
        elif not np.array_equal(x.to_numpy(), y.to_numpy(), equal_nan=x.dtype.kind == "f"):
            return False
    return True


def _other_bytes(dataset: Any) -> int:
    total = 0
    for name in ("manifest.json", "gene_order.npy", "var_names.txt", "var.parquet", "obs/schema.json"):
        if dataset.store.exists(name):
            total += dataset.store.size(name)
    return total


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"
