"""The demo's input: a generated AnnData, and the size of the same AnnData as a gzip h5ad."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scipy import sparse

from deltacells.datasets import synthetic_counts
from deltacells.demo._clock import Stopwatch
from deltacells.demo._report import Generated, H5adWritten

if TYPE_CHECKING:
    from pathlib import Path

    import anndata as ad

__all__ = ["generate", "source_x", "write_h5ad_gzip"]


def source_x(adata: ad.AnnData) -> sparse.csr_matrix:
    """The X of an AnnData made by :func:`generate`: a CSR matrix of counts."""
    x = adata.X
    assert isinstance(x, sparse.csr_matrix)  # what synthetic_counts makes
    return x


def generate(n_cells: int, n_genes: int, *, seed: int) -> tuple[ad.AnnData, Generated]:
    """Generate realistic counts with obs and var (see :func:`~deltacells.datasets.synthetic_counts`).

    Returns
    -------
    tuple
        The AnnData, and what was generated.
    """
    with Stopwatch() as watch:
        adata = synthetic_counts(n_cells, n_genes, seed=seed)
    generated = Generated(
        n_cells=adata.n_obs,
        n_genes=adata.n_vars,
        nnz=int(source_x(adata).nnz),
        obs_columns=tuple(map(str, adata.obs.columns)),
        var_columns=tuple(map(str, adata.var.columns)),
        seconds=watch.seconds,
    )
    return adata, generated


def write_h5ad_gzip(adata: ad.AnnData, path: Path) -> H5adWritten:
    """Write ``adata`` as a gzip-compressed h5ad at ``path``: the usual way, to compare with."""
    with Stopwatch() as watch:
        adata.write_h5ad(path, compression="gzip")
    return H5adWritten(bytes=path.stat().st_size, seconds=watch.seconds)
