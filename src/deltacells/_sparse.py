"""scipy's ``issparse`` without the narrowing of its type stubs; rows of a CSR matrix as views, not copies."""

from __future__ import annotations

from scipy import sparse

__all__ = ["csr_rows", "issparse"]


def issparse(x: object) -> bool:
    """Whether ``x`` is a scipy sparse array or matrix (:func:`scipy.sparse.issparse`).

    scipy-stubs make :func:`scipy.sparse.issparse` narrow its argument to an abstract class without attributes
    (not even ``format`` or ``shape``), which hides what the callers then use; this one leaves the argument's
    type as it was.
    """
    return sparse.issparse(x)


def csr_rows(csr: sparse.csr_matrix | sparse.csr_array, start: int, stop: int) -> sparse.csr_matrix:
    """Rows ``start`` to ``stop`` (excluded) of a CSR matrix: its indices and values as views, no copy.

    What ``csr[start:stop]`` holds, but scipy's slicing copies the nonzeros (``get_csr_submatrix``): a writer
    reading a matrix in row blocks, then cutting the blocks into tiles, copied each nonzero twice more than it
    needed (its constructor also copies arrays that are small views of larger ones). Only the row pointers
    are new (shifted to start at 0). The result is a ``csr_matrix`` whatever
    ``csr`` is. Do not write into it: that would write into ``csr``.
    """
    indptr = csr.indptr[start : stop + 1]
    first, last = int(indptr[0]), int(indptr[-1])
    rows = sparse.csr_matrix((stop - start, csr.shape[1]), dtype=csr.data.dtype)
    # Set, not passed to the constructor: scipy copies an array that is a view of less than half of its base.
    rows.indptr = (indptr - indptr.dtype.type(first)).astype(csr.indices.dtype, copy=False)
    rows.indices, rows.data = csr.indices[first:last], csr.data[first:last]
    return rows
