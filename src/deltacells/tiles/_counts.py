"""Checking and normalising blocks of a user's count matrix before they are encoded (DECISIONS.md 8)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse

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
    if sparse.issparse(block):
        csr = sparse.csr_matrix(block)
    else:
        dense = np.asarray(block)
        if dense.ndim != 2:
            msg = f"a block of the count matrix must be two-dimensional, got shape {dense.shape}"
            raise InvalidValueError(msg)
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
