"""The CSR blocks of a dask X: scipy's CSR classes whose reductions also take numpy's ``keepdims``.

dask reduces each block with numpy's functions (``np.sum(block, axis=..., keepdims=True)``), which call the
block's own method with ``keepdims``; scipy's sparse ``sum``, ``mean``, ``max`` and ``min`` do not take it
(dask/dask#11880), so ``adata.X.sum(axis=0)`` failed on plain scipy blocks. These subclasses take it, and an
axis given as a tuple, and give numpy arrays with the reduced axes kept, as numpy does; called without
``keepdims`` they return exactly what scipy's methods return. Everything else is scipy's: the blocks are
``csr_matrix`` / ``csr_array`` instances to scanpy and anndata.

dask stacks blocks (and the empty ``meta`` it reduces first to learn a result's type) with the function its
``concatenate_lookup`` gives for their type; :func:`register_with_dask` registers one that keeps these
classes, so reductions of stacked blocks take ``keepdims`` too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse

from deltacells import _internals
from deltacells._sparse import issparse

__all__ = ["CSRArrayBlock", "CSRMatrixBlock", "block_class", "register_with_dask"]


def _axis(axis: Any) -> int | None:
    """Numpy's axis (an int, a tuple of ints, or None) of a 2-D block as scipy takes it (0, 1 or None)."""
    if axis is None:
        return None
    axes = {int(a) % 2 for a in (axis if isinstance(axis, tuple) else (axis,))}
    return None if len(axes) != 1 else axes.pop()


def _kept(result: Any, axis: int | None, keepdims: bool) -> Any:
    """``result`` of a reduction along ``axis``, as numpy gives it with ``keepdims``."""
    if not keepdims:
        return result
    values = np.asarray(result.toarray() if issparse(result) else result)
    if axis is None:
        return values.reshape(1, 1)
    return values.reshape((1, -1) if axis == 0 else (-1, 1))


class _Reductions:
    """``sum``, ``mean``, ``max`` and ``min`` that take numpy's ``keepdims`` and tuple axes."""

    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        """As scipy's ``sum``; with ``keepdims`` a numpy array keeping the reduced axes."""
        axis = _axis(axis)
        return _kept(super().sum(axis=axis, dtype=dtype, out=out), axis, keepdims)  # type: ignore[misc]

    def mean(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        """As scipy's ``mean``; with ``keepdims`` a numpy array keeping the reduced axes."""
        axis = _axis(axis)
        return _kept(super().mean(axis=axis, dtype=dtype, out=out), axis, keepdims)  # type: ignore[misc]

    def max(self, axis: Any = None, out: Any = None, keepdims: bool = False, **options: Any) -> Any:
        """As scipy's ``max``; with ``keepdims`` a numpy array keeping the reduced axes."""
        axis = _axis(axis)
        return _kept(super().max(axis=axis, out=out, **options), axis, keepdims)  # type: ignore[misc]

    def min(self, axis: Any = None, out: Any = None, keepdims: bool = False, **options: Any) -> Any:
        """As scipy's ``min``; with ``keepdims`` a numpy array keeping the reduced axes."""
        axis = _axis(axis)
        return _kept(super().min(axis=axis, out=out, **options), axis, keepdims)  # type: ignore[misc]


class CSRMatrixBlock(_Reductions, sparse.csr_matrix):  # type: ignore[misc]  # scipy-stubs: spmatrix's * is not _spbase's
    """A block of a dask X as :class:`scipy.sparse.csr_matrix`, whose reductions take ``keepdims``."""


class CSRArrayBlock(_Reductions, sparse.csr_array):
    """A block of a dask X as :class:`scipy.sparse.csr_array`, whose reductions take ``keepdims``."""


def block_class(*, sparse_array: bool) -> type[CSRMatrixBlock] | type[CSRArrayBlock]:
    """The class of a dask X's blocks: the ``csr_array`` one when anndata reads sparse arrays."""
    return CSRArrayBlock if sparse_array else CSRMatrixBlock


def _concatenate(blocks: list[Any], axis: int = 0) -> CSRMatrixBlock | CSRArrayBlock:
    """Stack blocks along ``axis`` as scipy does, keeping the first block's class (dask's ``concatenate_lookup``)."""
    stack = sparse.vstack if axis == 0 else sparse.hstack
    stacked: CSRMatrixBlock | CSRArrayBlock = type(blocks[0])(stack(blocks, format="csr"))
    return stacked


_registered = False


def register_with_dask() -> None:
    """Make dask stack these blocks into blocks of the same class (idempotent; imports dask)."""
    global _registered
    if _registered:
        return
    for cls in (CSRMatrixBlock, CSRArrayBlock):
        _internals.register_dask_concatenate(cls, _concatenate)
    _registered = True
