"""Checking and normalising blocks of a user's count matrix before they are encoded (docs/format.md, decision 8)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse

from deltacells._sparse import issparse
from deltacells.errors import RAW_COUNTS_HINT, InvalidTypeError, InvalidValueError

MAX_COUNT = 2**31 - 1


def to_count_csr(block: Any, *, first_row: int = 0, n_genes: int | None = None) -> sparse.csr_matrix:
    """Return ``block`` as a canonical int32 CSR matrix of counts, in arrays of its own.

    Canonical means: sorted indices, no duplicates (they are summed), no explicit
    zeros. Accepts scipy sparse matrices and arrays of any format and dense arrays.
    The input is never modified, and the result shares no memory with it.

    Parameters
    ----------
    block
        Rows ``first_row ..`` of the count matrix.
    first_row
        Global index of the block's first row (for error messages).
    n_genes
        Expected number of columns.

    Raises
    ------
    TypeError
        For a dtype that cannot hold counts (complex, object, strings, bool...).
    ValueError
        For values that are not whole numbers in ``[0, 2^31 - 1]`` (naming the first
        offending cell and gene) or a block of the wrong width.
    """
    dtype = block.dtype if hasattr(block, "dtype") else np.asarray(block).dtype
    if dtype.kind not in "iuf":
        msg = f"counts must have an integer or float dtype, got {dtype}. {RAW_COUNTS_HINT}."
        raise InvalidTypeError(msg)
    if issparse(block):
        csr = sparse.csr_matrix(block)
    else:
        dense = np.asarray(block)
        if dense.ndim != 2:
            msg = f"a block of the count matrix must be two-dimensional, got shape {dense.shape}"
            raise InvalidValueError(msg)
        if dense.dtype.kind == "f" and dense.dtype.itemsize < 4:  # float16: scipy's sparse matrices have none
            dense = dense.astype(np.float32)
        csr = sparse.csr_matrix(dense)
    if n_genes is not None and csr.shape[1] != n_genes:
        msg = f"a block of the count matrix has {csr.shape[1]} columns, expected {n_genes}"
        raise InvalidValueError(msg)
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()
    data = csr.data
    bad = (data < 0) | (data > MAX_COUNT)
    if data.dtype.kind == "f":
        bad |= ~np.isfinite(data) | (data != np.floor(data))
    if bad.any():
        _raise_at(csr, int(np.flatnonzero(bad)[0]), first_row)
    result = sparse.csr_matrix(
        (data.astype(np.int32), csr.indices.astype(np.int32), csr.indptr.astype(np.int64)), shape=csr.shape
    )
    if result.nnz and not result.data.all():
        result.eliminate_zeros()
    return result


def _raise_at(csr: sparse.csr_matrix, position: int, first_row: int) -> None:
    row = int(np.searchsorted(csr.indptr, position, side="right")) - 1
    gene = int(csr.indices[position])
    value = csr.data[position].item()
    if not np.isfinite(value) or value != np.floor(value):
        problem = "is not a whole number"
    else:
        problem = "is outside [0, 2^31 - 1]"
    msg = f"the count of cell {first_row + row}, gene {gene} ({value!r}) {problem}. {RAW_COUNTS_HINT}."
    raise InvalidValueError(msg)


def column_totals(block: Any, *, first_row: int = 0, n_genes: int | None = None) -> np.ndarray:
    """The column sums of a block of counts, its values checked on the way.

    A scipy sparse block of valid counts is summed as it is (no copy, no conversion to the canonical CSR that
    tiles need); any other block, or one with a value that is not a count, goes through :func:`to_count_csr`,
    which raises the usual error for it.

    Parameters
    ----------
    block
        Rows ``first_row ..`` of the count matrix (sparse or dense).
    first_row
        Global index of the block's first row (for error messages).
    n_genes
        Expected number of columns.

    Returns
    -------
    numpy.ndarray
        ``float64[n_columns]``, exact for totals below 2^53.

    Raises
    ------
    InvalidValueError, InvalidTypeError
        As :func:`to_count_csr`.
    """
    if not _sums_as_is(block, block.shape[1] if n_genes is None else n_genes):
        block = to_count_csr(block, first_row=first_row, n_genes=n_genes)
    return np.asarray(block.sum(axis=0, dtype=np.float64)).ravel()


def _sums_as_is(block: Any, n_genes: int) -> bool:
    """Whether ``block`` is a sparse matrix of counts (values whole numbers in ``[0, 2^31 - 1]``) to sum as is.

    Duplicates and explicit zeros do not change column sums; a block that fails a check is left to
    :func:`to_count_csr` to name the offending value.
    """
    if not (issparse(block) and block.format in ("csr", "csc", "coo")) or block.shape[1] != n_genes:
        return False
    data = block.data
    if data.dtype.kind not in "iuf":
        return False
    if not data.size:
        return True
    low, high = data.min(), data.max()  # NaN makes both comparisons false
    if not (low >= 0 and high <= MAX_COUNT):
        return False
    return data.dtype.kind != "f" or bool(np.array_equal(np.floor(data), data))
