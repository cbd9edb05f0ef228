"""``gather_rows_split_sorted``: rows copied into separate outputs, each row's columns sorted on the way."""

from __future__ import annotations

import numpy as np
import pytest
from numba.typed import List

from deltacells.codec._kernels import radix_passes
from deltacells.tiles._gather import gather_rows_split_sorted


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("n_columns", [7, 256, 19_465, 70_000, 20_000_000])  # 1, 1, 2, 3 and 4 radix passes
def test_rows_land_in_their_outputs_sorted_with_their_values(n_columns: int, dtype: type) -> None:
    rng = np.random.default_rng(n_columns)
    lengths = [min(n, n_columns) for n in (0, 1, 5, 300, 2, 40, 7, 120)]
    indices = np.concatenate([rng.choice(n_columns, n, replace=False) for n in lengths]).astype(np.int32)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    indices[indptr[3] : indptr[4]].sort()  # one row already in order: copied as it is
    data = rng.integers(1, 10_000, size=indices.shape[0]).astype(dtype)
    rows = np.array([6, 3, 0, 1, 7, 2, 5], dtype=np.int64)  # row 4 is not wanted
    pieces = np.array([1, 0, 1, 0, 0, 1, 1], dtype=np.int64)
    piece_rows = np.array([0, 0, 1, 1, 2, 2, 3], dtype=np.int64)
    outputs = []
    for p in (0, 1):
        mine = rows[pieces == p][np.argsort(piece_rows[pieces == p])]
        out_indptr = np.concatenate(([0], np.cumsum([lengths[r] for r in mine]))).astype(np.int64)
        outputs.append((mine, out_indptr, np.full(out_indptr[-1], -1, np.int32), np.zeros(out_indptr[-1], dtype)))
    gather_rows_split_sorted(
        indptr, indices, data, rows, pieces, piece_rows,
        List([o[1] for o in outputs]), List([o[2] for o in outputs]), List([o[3] for o in outputs]), n_columns,
    )  # fmt: skip
    assert 1 <= radix_passes(n_columns) <= 4
    for mine, out_indptr, out_indices, out_data in outputs:
        for k, r in enumerate(mine):
            source = slice(indptr[r], indptr[r + 1])
            order = np.argsort(indices[source])
            got = slice(out_indptr[k], out_indptr[k + 1])
            np.testing.assert_array_equal(out_indices[got], indices[source][order])
            np.testing.assert_array_equal(out_data[got], data[source][order])
