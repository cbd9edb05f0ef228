"""The numpy versions of the row-copying kernels give what the compiled kernels give (see ``_gather_vectorised``)."""

from __future__ import annotations

import numpy as np
import pytest

from deltacells.tiles import _gather, _gather_vectorised


def source(seed: int, n_rows: int = 12, n_columns: int = 400) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, size=n_rows)
    lengths[3] = 0
    indices = np.concatenate([np.sort(rng.choice(n_columns, k, replace=False)) for k in lengths]).astype(np.int32)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return indptr, indices, rng.integers(1, 1000, size=indices.shape[0]).astype(np.int32)


def outputs(indptr: np.ndarray, rows: np.ndarray, slots: np.ndarray, dtype: type):
    lengths = np.zeros(slots.max() + 1, dtype=np.int64)
    lengths[slots] = indptr[rows + 1] - indptr[rows]
    out_indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return out_indptr, np.full(out_indptr[-1], -1, np.int32), np.full(out_indptr[-1], -1, dtype)


CASES = {
    "all in order": (np.arange(12), np.arange(12)),
    "scattered with repeats": (np.array([5, 0, 5, 11, 3, 7]), np.array([2, 0, 5, 1, 3, 4])),
    "runs": (np.array([4, 5, 6, 0, 1]), np.array([0, 1, 2, 3, 4])),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mapped", ["no", "unsorted", "sorted"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_gathered_rows_are_the_same(case: str, mapped: str, dtype: type) -> None:
    indptr, indices, data = source(len(case))
    rows, slots = (np.asarray(a, dtype=np.int64) for a in CASES[case])
    columns = np.random.default_rng(0).permutation(400).astype(np.int32)
    results = []
    for implementation in (_gather, _gather_vectorised):
        out_indptr, out_indices, out_data = outputs(indptr, rows, slots, dtype)
        if mapped == "no":
            implementation.gather_rows(indptr, indices, data, rows, out_indptr, slots, out_indices, out_data)
        else:
            implementation.gather_rows_mapped(
                indptr, indices, data, rows, out_indptr, slots, out_indices, out_data, columns, mapped == "sorted"
            )
        results.append((out_indices, out_data))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert (results[1][0] >= 0).all()


def test_dropped_columns_are_dropped_the_same() -> None:
    indptr, indices, data = source(9)
    indptr = indptr + 3  # rows from nonzero 3 on (the first three are not the matrix's)
    indices = np.concatenate(([7, 8, 9], indices)).astype(np.int32)
    data = np.concatenate(([1, 1, 1], data)).astype(np.int32)
    results = []
    for implementation in (_gather, _gather_vectorised):
        p, i, d = indptr.copy(), indices.copy(), data.copy()
        n = implementation.drop_dropped_columns(p, i, d, 250)  # rows are sorted: the dropped ones end each row
        results.append((int(n), p, i[3 : 3 + int(n)], d[3 : 3 + int(n)]))
    assert results[0][0] == results[1][0] < indices.shape[0] - 3
    for a, b in zip(results[0][1:], results[1][1:], strict=True):
        np.testing.assert_array_equal(a, b)
