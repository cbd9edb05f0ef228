"""``deltacells._sparse``: rows of a CSR matrix as views."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from deltacells._sparse import csr_rows


@pytest.mark.parametrize("kind", [sparse.csr_matrix, sparse.csr_array])
@pytest.mark.parametrize(("start", "stop"), [(0, 50), (3, 17), (20, 20), (49, 50), (0, 0)])
def test_csr_rows_are_the_rows_as_views(kind: type, start: int, stop: int) -> None:
    rng = np.random.default_rng(start * 100 + stop)
    matrix = kind(sparse.random(50, 30, density=0.2, format="csr", dtype=np.float32, random_state=rng))
    rows = csr_rows(matrix, start, stop)
    assert isinstance(rows, sparse.csr_matrix) and rows.shape == (stop - start, 30)
    assert rows.indptr[0] == 0
    np.testing.assert_array_equal(rows.toarray(), matrix[start:stop].toarray())
    if rows.nnz:
        assert np.shares_memory(rows.data, matrix.data) and np.shares_memory(rows.indices, matrix.indices)
    assert not np.shares_memory(rows.indptr, matrix.indptr)  # shifted: the source's are left as they are
