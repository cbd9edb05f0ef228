"""The demo's analysis: QC metrics, normalisation, log1p, highly variable genes and PCA with scanpy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from deltacells.demo._clock import Stopwatch
from deltacells.demo._report import ScanpyRun

if TYPE_CHECKING:
    import anndata as ad

__all__ = ["run_scanpy"]


def run_scanpy(label: str, sub: ad.AnnData) -> ScanpyRun:
    """Run the pipeline on the in-memory subset ``sub`` (modified in place), timing each part.

    scanpy compiles numba functions on first use (seconds, once per process): the pipeline runs on a few
    cells first, so that the timings are those of the work.
    """
    import scanpy as sc

    with Stopwatch() as compile_watch:
        _untimed_pipeline(sub[: min(50, sub.n_obs)].copy(), n_top=max(2, min(20, sub.n_vars // 3)), n_comps=2)
    n_cells, n_genes = sub.n_obs, sub.n_vars
    seconds: dict[str, float] = {}

    with Stopwatch() as watch:
        sc.pp.calculate_qc_metrics(sub, qc_vars=["mito"], percent_top=None, log1p=False, inplace=True)
    seconds["calculate_qc_metrics"] = watch.seconds
    with Stopwatch() as watch:
        sc.pp.normalize_total(sub, target_sum=1e4)
        sc.pp.log1p(sub)
    seconds["normalize_total+log1p"] = watch.seconds
    with Stopwatch() as watch:
        sc.pp.highly_variable_genes(sub, n_top_genes=max(2, min(2000, n_genes // 3)))
    seconds["highly_variable_genes"] = watch.seconds
    n_hvg = int(sub.var["highly_variable"].sum())
    n_comps = max(1, min(30, n_cells - 1, n_hvg - 1))
    with Stopwatch() as watch:
        sc.pp.pca(sub, n_comps=n_comps)
    seconds["pca"] = watch.seconds

    obs = sub.obs
    return ScanpyRun(
        label=label,
        n_cells=n_cells,
        n_genes=n_genes,
        warm_up_seconds=compile_watch.seconds,
        median_counts=float(obs["total_counts"].median()),
        median_genes=float(obs["n_genes_by_counts"].median()),
        median_pct_mito=float(obs["pct_counts_mito"].median()),
        n_highly_variable=n_hvg,
        n_comps=n_comps,
        explained_variance=float(np.sum(sub.uns["pca"]["variance_ratio"])),
        seconds=seconds,
    )


def _untimed_pipeline(adata: ad.AnnData, *, n_top: int, n_comps: int) -> None:
    """The pipeline on a few cells, for scanpy's first-call compilation."""
    import scanpy as sc

    sc.pp.calculate_qc_metrics(adata, qc_vars=["mito"], percent_top=None, log1p=False, inplace=True)
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    sc.pp.highly_variable_genes(adata, n_top_genes=n_top)
    sc.pp.pca(adata, n_comps=max(1, min(n_comps, adata.n_obs - 1, n_top - 1)))
