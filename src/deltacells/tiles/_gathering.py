"""Copying rows of decoded tiles into outputs: numba's kernels once loaded, numpy's until then.

Each function here runs the kernel of its name from ``deltacells.tiles._gather`` (compiled by numba) when
``deltacells._kernel_loading.compiled_kernels()`` says so, else its numpy version from
``deltacells.tiles._gather_vectorised`` (whose first call starts loading numba's kernels in the background).
"""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

import numpy as np

from deltacells._kernel_loading import compiled_kernels
from deltacells._threads import shared_pool
from deltacells.codec import read_only, sort_rows
from deltacells.tiles import _gather_vectorised

__all__ = [
    "SORT_TASK_NNZ",
    "drop_dropped_columns",
    "gather_rows",
    "gather_rows_mapped",
    "gather_rows_split",
    "gather_rows_split_sorted",
    "sort_output_rows",
]


def gather_rows(*args: Any) -> None:
    """``gather_rows`` (see ``deltacells.tiles._gather``)."""
    _kernels().gather_rows(*args)


def gather_rows_mapped(*args: Any) -> None:
    """``gather_rows_mapped`` (see ``deltacells.tiles._gather``)."""
    _kernels().gather_rows_mapped(*args)


def gather_rows_split(*args: Any) -> None:
    """``gather_rows_split`` (see ``deltacells.tiles._gather``)."""
    _kernels().gather_rows_split(*args)


def gather_rows_split_sorted(*args: Any) -> None:
    """``gather_rows_split_sorted`` (see ``deltacells.tiles._gather``)."""
    _kernels().gather_rows_split_sorted(*args)


def drop_dropped_columns(*args: Any) -> int:
    """``drop_dropped_columns`` (see ``deltacells.tiles._gather``): the nonzeros kept."""
    return int(_kernels().drop_dropped_columns(*args))


#: Nonzeros per task when the rows of an output are sorted on the decoding pool (:func:`sort_output_rows`).
SORT_TASK_NNZ = 1 << 20


def sort_output_rows(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_columns: int, rows: Any = None
) -> None:
    """Sort the columns of output rows (mapped to the source's gene order) in place, with their values.

    Parameters
    ----------
    indptr, indices, data
        The output CSR arrays.
    n_columns
        Columns of the output.
    rows
        ``(first, end)`` row ranges to sort; ``None``: every row. Large ones are cut into tasks of about
        :data:`SORT_TASK_NNZ` nonzeros run on the decoding pool (the kernel releases the GIL, as numpy's sort
        does).
    """
    indptr = read_only(indptr)
    spans = [(0, indptr.shape[0] - 1)] if rows is None else list(rows)
    tasks = []
    for first, end in spans:
        if end - first < 1:
            continue
        nnz = int(indptr[end] - indptr[first])
        n_tasks = max(1, nnz // SORT_TASK_NNZ)
        cuts = np.searchsorted(indptr[first : end + 1], np.linspace(indptr[first], indptr[end], n_tasks + 1)) + first
        cuts[0], cuts[-1] = first, end
        tasks += [(int(a), int(b)) for a, b in itertools.pairwise(cuts) if b > a]
    if len(tasks) <= 1:
        for a, b in tasks:
            sort_rows(indptr, a, b, 0, indices, data, n_columns)
        return
    futures = [shared_pool().submit(sort_rows, indptr, a, b, 0, indices, data, n_columns) for a, b in tasks]
    for future in futures:
        future.result()


def _kernels() -> ModuleType:
    if compiled_kernels():
        from deltacells.tiles import _gather  # numba loads on the loading thread, not on import

        return _gather
    return _gather_vectorised
