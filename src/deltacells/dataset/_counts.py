"""Checking and normalising blocks of a user's count matrix before they are encoded (DECISIONS.md 8)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse

MAX_COUNT = 2**31 - 1

_HINT = "deltacells stores raw counts; pass the raw counts (e.g. layer='counts' or raw=True)"


def to_count_csr(block: Any, *, first_row: int = 0, n_genes: int | None = None) -> sparse.csr_matrix:
    """Return ``block`` as a canonical int32 CSR matrix of counts.

    Canonical means: sorted indices, no duplicates (they are summed), no explicit
    zeros. Accepts scipy sparse matrices and arrays of any format and dense arrays.

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
        For a dtype that cannot hold counts (complex, object, bool...).
    ValueError
        For non-integer, negative or too large values, naming the first offending
        cell and gene.
    """
    if sparse.issparse(block):
        csr = sparse.csr_matrix(block)
    else:
        dense = np.asarray(block)
        if dense.ndim != 2:
            msg = f"a block of the count matrix must be two-dimensional, got shape {dense.shape}"
            raise ValueError(msg)
        csr = sparse.csr_matrix(dense)
    if n_genes is not None and csr.shape[1] != n_genes:
        msg = f"a block of the count matrix has {csr.shape[1]} columns, expected {n_genes}"
        raise ValueError(msg)
    kind = csr.dtype.kind
    if kind not in "iuf":
        msg = f"counts must have an integer or float dtype, got {csr.dtype}. {_HINT}."
        raise TypeError(msg)
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()
    data = csr.data
    if kind == "f":
        bad = ~np.isfinite(data) | (data != np.floor(data))
        if bad.any():
            _raise_at(csr, int(np.flatnonzero(bad)[0]), first_row, "is not a whole number")
    if data.size and (data.min() < 0 or data.max() > MAX_COUNT):
        bad = (data < 0) | (data > MAX_COUNT)
        _raise_at(csr, int(np.flatnonzero(bad)[0]), first_row, "is outside [0, 2^31 - 1]")
    values = data.astype(np.int32)
    if values.size and not values.all():
        csr = sparse.csr_matrix((values, csr.indices, csr.indptr), shape=csr.shape)
        csr.eliminate_zeros()
        return csr
    return sparse.csr_matrix((values, csr.indices, csr.indptr), shape=csr.shape, copy=False)


def _raise_at(csr: sparse.csr_matrix, position: int, first_row: int, problem: str) -> None:
    row = int(np.searchsorted(csr.indptr, position, side="right")) - 1
    gene = int(csr.indices[position])
    msg = f"the count of cell {first_row + row}, gene {gene} ({csr.data[position]!r}) {problem}. {_HINT}."
    raise ValueError(msg)
