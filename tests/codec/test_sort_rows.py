"""``sort_rows``: each row's mapped columns put in order with their values, by radix (sparse rows) or bitmap (dense)."""

from __future__ import annotations

import numpy as np
import pytest

from deltacells.codec._kernels import bitmap_sorts, radix_passes, sort_rows


def _rows(n_columns: int, lengths: list[int], seed: int, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    indices = np.concatenate([rng.choice(n_columns, n, replace=False) for n in lengths]).astype(np.int32)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    data = rng.integers(1, 1000, size=indices.shape[0]).astype(dtype)
    return indptr, indices, data


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize(
    ("n_columns", "lengths"),
    [
        (19_465, [368, 0, 1, 2, 500, 17]),  # sparse rows: radix, two passes
        (200, [150, 3, 199, 200]),  # one radix pass: short rows through the bitmap, long ones by radix
        (1_000, [20, 60, 400, 900]),  # short rows through the bitmap, long ones by radix
        (70_000, [300, 2, 5000]),  # three passes
        (3_000_000, [400, 64]),  # three passes, a wide id range
        (20_000_000, [400, 3, 1000]),  # four passes
        (256, [16, 100, 256]),  # the widest matrix of one radix pass, both ways
        (2_000, [2, 3, 180, 500]),  # two passes and 32 words: always by radix
    ],
)
def test_rows_are_sorted_with_their_values(n_columns: int, lengths: list[int], dtype: type) -> None:
    indptr, indices, data = _rows(n_columns, lengths, seed=n_columns, dtype=dtype)
    want_indices, want_data = indices.copy(), data.copy()
    for r in range(len(lengths)):
        lo, hi = indptr[r], indptr[r + 1]
        order = np.argsort(indices[lo:hi])
        want_indices[lo:hi], want_data[lo:hi] = indices[lo:hi][order], data[lo:hi][order]
    sort_rows(indptr, 0, len(lengths), 0, indices, data, n_columns)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(data, want_data)


@pytest.mark.parametrize(
    ("n_columns", "n", "bitmap"),
    [
        (256, 40, True),
        (256, 200, False),
        (1_000, 60, True),
        (1_000, 250, False),
        (2_000, 2, False),
        (19_465, 2, False),
        (19_465, 15_000, False),
        (20_000_000, 2, False),
    ],
)
def test_the_cost_model_picks_the_bitmap_on_narrow_matrices_only(n_columns: int, n: int, bitmap: bool) -> None:
    """As measured by ``bench_row_sort.py --classes``: the radix sort wins on every row of a genome-wide matrix."""
    assert bitmap_sorts((n_columns + 63) >> 6, n, radix_passes(n_columns)) == bitmap


def test_a_range_of_rows_at_an_offset_and_rows_in_order() -> None:
    indptr, indices, data = _rows(1000, [10, 20, 30], seed=1, dtype=np.float32)
    indices[30:60].sort()  # the last row is in order already
    before = indices.copy(), data.copy()
    sort_rows(indptr[1:] - 0, 0, 2, 10, indices[10:], data[10:], 1000)  # rows 1 and 2 only, from offset 10
    np.testing.assert_array_equal(indices[:10], before[0][:10])  # row 0 untouched
    assert np.all(np.diff(indices[10:30]) > 0)
    np.testing.assert_array_equal(indices[30:], before[0][30:])
    np.testing.assert_array_equal(data[30:], before[1][30:])
