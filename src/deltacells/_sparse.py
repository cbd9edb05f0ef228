"""scipy's ``issparse``, typed so that the type checker knows what it found."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scipy import sparse

if TYPE_CHECKING:
    from typing_extensions import TypeIs

__all__ = ["issparse"]


def issparse(x: object) -> TypeIs[sparse.sparray | sparse.spmatrix]:
    """Whether ``x`` is a scipy sparse array or matrix (:func:`scipy.sparse.issparse`).

    scipy-stubs narrow :func:`scipy.sparse.issparse` to an abstract class without attributes; this one narrows
    to scipy's sparse arrays and matrices, whose ``format``, ``shape`` and methods are then known.
    """
    return sparse.issparse(x)
