from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from deltacells.datasets import synthetic_counts


def test_shape_types_and_statistics():
    adata = synthetic_counts(3000, 2000, seed=3)
    X = adata.X
    assert sparse.issparse(X) and X.format == "csr" and X.dtype == np.int32
    assert adata.shape == (3000, 2000)
    assert X.data.min() >= 1
    density = X.nnz / np.prod(X.shape)
    assert 0.01 < density < 0.5
    totals = np.asarray(X.sum(axis=1)).ravel()
    np.testing.assert_array_equal(adata.obs["total_counts"].to_numpy(), totals)
    # Heavy-tailed genes: the top 1% of genes hold a large share of the counts.
    gene_totals = np.sort(np.asarray(X.sum(axis=0)).ravel())[::-1]
    assert gene_totals[:20].sum() > 0.2 * gene_totals.sum()
    assert isinstance(adata.obs["cell_type"].dtype, pd.CategoricalDtype)
    assert adata.var_names[0].startswith("MT-")
    assert adata.obs["pct_mito"].between(0, 100).all()


def test_seed_is_reproducible():
    a = synthetic_counts(300, 200, seed=7)
    b = synthetic_counts(300, 200, seed=7)
    c = synthetic_counts(300, 200, seed=8)
    assert (a.X != b.X).nnz == 0
    assert (a.X != c.X).nnz > 0


def test_zero_cells_and_bad_arguments():
    assert synthetic_counts(0, 50).shape == (0, 50)
    with pytest.raises(ValueError, match="n_genes"):
        synthetic_counts(10, 0)
