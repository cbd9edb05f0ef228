"""scipy's ``issparse``, without the narrowing that its type stubs attach to it."""

from __future__ import annotations

from scipy import sparse

__all__ = ["issparse"]


def issparse(x: object) -> bool:
    """Whether ``x`` is a scipy sparse array or matrix (:func:`scipy.sparse.issparse`).

    scipy-stubs make :func:`scipy.sparse.issparse` narrow its argument to an abstract class without attributes
    (not even ``format`` or ``shape``), which hides what the callers then use; this one leaves the argument's
    type as it was.
    """
    return sparse.issparse(x)
