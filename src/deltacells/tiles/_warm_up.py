"""What the loading thread runs to load the row-copying kernels: rows of a tiny tile copied as reads copy theirs."""

from __future__ import annotations

import numpy as np

from deltacells.codec import read_only
from deltacells.tiles._gathering import gather_rows, gather_rows_mapped, sort_output_rows

__all__ = ["warm_up"]


def warm_up() -> None:
    """Copy rows of a tiny decoded tile as reads do, to load the kernels (int32 counts to float32 ones).

    Run by the loading thread (``deltacells._kernel_loading``) after ``deltacells.codec._warm_up.warm_up``.
    """
    src_indptr = read_only(np.array([0, 2, 3], dtype=np.int64))
    src_indices = read_only(np.array([0, 2, 1], dtype=np.int32))
    src_data = read_only(np.array([1, 5, 2], dtype=np.int32))
    rows = np.array([1, 0], dtype=np.int64)
    out_indptr = np.array([0, 1, 3], dtype=np.int64)
    slots = np.array([0, 1], dtype=np.int64)
    columns = read_only(np.array([2, 0, 1], dtype=np.int32))
    out = (np.empty(3, dtype=np.int32), np.empty(3, dtype=np.float32))
    gather_rows(src_indptr, src_indices, src_data, rows, out_indptr, slots, *out)
    gather_rows_mapped(src_indptr, src_indices, src_data, rows, out_indptr, slots, *out, columns, False)
    sort_output_rows(out_indptr, *out, 3)
