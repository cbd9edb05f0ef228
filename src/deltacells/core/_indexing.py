"""Turning whatever a user passes as a row index into global cell indices."""

from __future__ import annotations

from typing import Any

import numpy as np

from deltacells._checks import is_integer
from deltacells.errors import InvalidTypeError, OutOfRangeError


def normalize_rows(index: Any, n_rows: int, *, what: str = "row") -> np.ndarray | slice:
    """Return the rows selected by ``index`` among ``n_rows``.

    A slice with step 1 stays a (normalised) slice, which readers treat as a fast
    contiguous range; everything else becomes an ``int64`` array in the requested
    order (repeats kept, negative indices resolved).

    Parameters
    ----------
    index
        An ``int``, a ``slice``, a sequence or array of integers, or a boolean mask of
        length ``n_rows``.
    n_rows
        Number of rows to select from.
    what
        What the index selects, for error messages: ``"row"`` (default) or ``"column"``.

    Raises
    ------
    IndexError
        For an index out of range or a mask of the wrong length.
    TypeError
        For an index of an unsupported type.
    """
    if isinstance(index, slice):
        start, stop, step = index.indices(n_rows)
        if step == 1:
            return slice(start, max(start, stop), 1)
        return np.arange(start, stop, step, dtype=np.int64)
    if is_integer(index):
        i = int(index)
        if not -n_rows <= i < n_rows:
            msg = f"{what} {i} is out of range for {n_rows} {what}s"
            raise OutOfRangeError(msg)
        return np.array([i % n_rows], dtype=np.int64)
    arr = np.asarray(index)
    if arr.dtype == bool:
        if arr.ndim != 1 or arr.shape[0] != n_rows:
            msg = f"boolean index of shape {arr.shape} does not match {n_rows} {what}s"
            raise OutOfRangeError(msg)
        return np.flatnonzero(arr).astype(np.int64)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        msg = f"{what}s must be selected by integers, slices or a boolean mask, not {arr.dtype}"
        raise InvalidTypeError(msg)
    arr = arr.reshape(-1).astype(np.int64, copy=False)
    if arr.min() < -n_rows or arr.max() >= n_rows:
        bad = arr[(arr < -n_rows) | (arr >= n_rows)][0]
        msg = f"{what} {bad} is out of range for {n_rows} {what}s"
        raise OutOfRangeError(msg)
    return np.where(arr < 0, arr + n_rows, arr)


def expected_nnz(rows: np.ndarray | slice, nnz: int, n_cells: int) -> int:
    """About how many nonzeros a read of ``rows`` (from :func:`normalize_rows`) decodes.

    Their number times a cell's mean (``nnz / n_cells``).
    """
    n = len(range(rows.start, rows.stop, rows.step)) if isinstance(rows, slice) else rows.shape[0]
    return n * nnz // max(n_cells, 1)
