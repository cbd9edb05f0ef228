"""A realistic synthetic count matrix, generated in the package so that demos, docs and tests run anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import sparse

from deltacells._checks import check_integer

if TYPE_CHECKING:
    import anndata as ad

N_MITO_GENES = 13


def synthetic_counts(
    n_cells: int = 5000,
    n_genes: int = 4000,
    *,
    n_cell_types: int = 6,
    n_donors: int = 4,
    mean_library_size: float = 4000.0,
    seed: int = 0,
) -> ad.AnnData:
    """Generate a single-cell RNA count matrix with the statistics of real droplet data.

    Genes have heavy-tailed mean expression (a few very highly expressed, most rare),
    cells belong to cell types with their own marker genes, library sizes vary
    log-normally, and counts are negative-binomial (gamma-Poisson) around the
    resulting means. The share of nonzero entries depends on the number of genes: about 9% with
    20,000 genes (as in 10x data), 20% with 5,000, 35% with 1,000.

    Parameters
    ----------
    n_cells, n_genes
        Shape of the matrix.
    n_cell_types
        Number of cell types, each with its own marker genes.
    n_donors
        Number of donors (a categorical obs column with a mild batch effect).
    mean_library_size
        Typical total counts per cell.
    seed
        Seed of the random generator: the same seed gives the same data.

    Returns
    -------
    anndata.AnnData
        ``X`` is a CSR matrix of int32 counts; ``obs`` has ``cell_type``, ``donor``
        (categoricals), ``total_counts`` and ``pct_mito``; ``var`` has ``gene_ids`` and
        ``mito``; genes named ``MT-*`` are mitochondrial.

    Examples
    --------
    >>> from deltacells.datasets import synthetic_counts
    >>> adata = synthetic_counts(200, 300, seed=1)
    >>> adata.shape
    (200, 300)
    """
    import anndata as ad

    model = _Model(n_cells, n_genes, n_cell_types=n_cell_types, n_donors=n_donors, library=mean_library_size, seed=seed)
    blocks = list(model.blocks())
    X = sparse.vstack(blocks, format="csr") if blocks else sparse.csr_matrix((0, n_genes), dtype=np.int32)
    X = X.astype(np.int32)
    totals = np.asarray(X.sum(axis=1)).ravel()
    mito = np.asarray(X[:, :N_MITO_GENES].sum(axis=1)).ravel() if n_genes else np.zeros(n_cells)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical.from_codes(model.cell_type, categories=pd.Index(model.type_names)),
            "donor": pd.Categorical.from_codes(
                model.donor, categories=pd.Index([f"donor_{i}" for i in range(n_donors)])
            ),
            "total_counts": totals.astype(np.int64),
            "pct_mito": np.divide(100.0 * mito, totals, out=np.zeros(n_cells), where=totals > 0),
        },
        index=pd.Index([f"cell_{i:07d}" for i in range(n_cells)], dtype=object),
    )
    var = pd.DataFrame(
        {"gene_ids": [f"ENSG{i:011d}" for i in range(n_genes)], "mito": np.arange(n_genes) < N_MITO_GENES},
        index=pd.Index(model.gene_names, dtype=object),
    )
    return ad.AnnData(X=X, obs=obs, var=var)


class _Model:
    """The generative model behind :func:`synthetic_counts`, sampled in blocks of cells."""

    block_cells = 2048

    def __init__(
        self, n_cells: int, n_genes: int, *, n_cell_types: int, n_donors: int, library: float, seed: int
    ) -> None:
        check_integer("n_cells", n_cells, minimum=0)
        for name, value in (("n_genes", n_genes), ("n_cell_types", n_cell_types), ("n_donors", n_donors)):
            check_integer(name, value, minimum=1)
        self.rng = np.random.default_rng(seed)
        rng = self.rng
        self.n_cells, self.n_genes = n_cells, n_genes
        # Heavy-tailed gene means (log-normal), mitochondrial genes among the highest.
        base = rng.lognormal(mean=-2.0, sigma=2.2, size=n_genes)
        base[: min(N_MITO_GENES, n_genes)] = rng.lognormal(mean=3.0, sigma=0.5, size=min(N_MITO_GENES, n_genes))
        # Each cell type multiplies a few hundred marker genes by a log-normal fold change.
        profiles = np.tile(base, (n_cell_types, 1))
        n_markers = max(1, n_genes // 20)
        for t in range(n_cell_types):
            markers = rng.choice(n_genes, size=n_markers, replace=False)
            profiles[t, markers] *= rng.lognormal(mean=1.5, sigma=0.7, size=n_markers)
        self.profiles = profiles / profiles.sum(axis=1, keepdims=True)
        self.donor_effect = rng.lognormal(mean=0.0, sigma=0.15, size=(n_donors, n_genes))
        self.dispersion = 0.1 + rng.gamma(shape=2.0, scale=0.15, size=n_genes)
        weights = rng.dirichlet(np.full(n_cell_types, 2.0))
        self.cell_type = rng.choice(n_cell_types, size=n_cells, p=weights).astype(np.int16)
        self.donor = rng.integers(0, n_donors, size=n_cells).astype(np.int16)
        self.library = rng.lognormal(mean=np.log(library), sigma=0.5, size=n_cells)
        self.type_names = [f"type_{chr(ord('A') + t)}" if t < 26 else f"type_{t}" for t in range(n_cell_types)]
        mito_names = [
            f"MT-{name}"
            for name in ("ND1", "ND2", "CO1", "CO2", "ATP8", "ATP6", "CO3", "ND3", "ND4L", "ND4", "ND5", "ND6", "CYB")
        ]
        self.gene_names = mito_names[: min(N_MITO_GENES, n_genes)] + [
            f"GENE{i:05d}" for i in range(N_MITO_GENES, n_genes)
        ]

    def blocks(self) -> Iterator[sparse.csr_matrix]:
        """Yield the count matrix in CSR blocks of :attr:`block_cells` cells."""
        for lo in range(0, self.n_cells, self.block_cells):
            hi = min(self.n_cells, lo + self.block_cells)
            mu = self.profiles[self.cell_type[lo:hi]] * self.donor_effect[self.donor[lo:hi]]
            mu *= (self.library[lo:hi] / mu.sum(axis=1))[:, None]
            shape = np.broadcast_to((1.0 / self.dispersion).astype(np.float32), mu.shape)
            rate = self.rng.standard_gamma(shape, dtype=np.float32) * (mu * self.dispersion).astype(np.float32)
            counts = self.rng.poisson(rate)
            yield sparse.csr_matrix(counts.astype(np.int32))
