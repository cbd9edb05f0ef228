"""Reading any AnnData matrix in row blocks: in memory, backed h5ad/zarr, dask, views, deltacells."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from deltacells import _internals
from deltacells._sparse import csr_rows, issparse
from deltacells.core import normalize_rows
from deltacells.errors import InvalidValueError, UnknownKeyError

if TYPE_CHECKING:
    import anndata as ad


@dataclass
class MatrixSource:
    """A count matrix to convert: the array, and the rows and columns of it that are wanted."""

    matrix: Any
    rows: np.ndarray | slice
    cols: np.ndarray | slice
    label: str

    @property
    def n_rows(self) -> int:
        """Rows selected."""
        return _length(self.rows)

    @property
    def n_cols(self) -> int:
        """Columns selected."""
        return _length(self.cols)

    def blocks(self, block_rows: int) -> Iterator[Any]:
        """Yield consecutive blocks of about ``block_rows`` selected rows (sparse or dense)."""
        matrix = self.matrix
        if issparse(matrix) and matrix.format != "csr":
            # Row slices of CSC/COO are slow; one conversion of an in-memory matrix is not.
            matrix = sparse.csr_matrix(matrix)
        for rows in _row_chunks(self.rows, block_rows, matrix):
            block = _read_rows(matrix, rows)
            if not (isinstance(self.cols, slice) and self.cols == slice(0, _ncols(matrix), 1)):
                block = block[:, self.cols]
            yield block


def matrix_source(adata: ad.AnnData, *, layer: str | None = None, raw: bool = False) -> MatrixSource:
    """The matrix to convert: ``X``, ``layers[layer]`` or ``raw.X``, without materialising views."""
    if layer is not None and raw:
        msg = "pass either layer= or raw=True, not both"
        raise InvalidValueError(msg)
    ref, rows, cols = view_parts(adata)
    matrix: Any  # whatever AnnData holds: in memory, backed, dask, a lazy X
    if raw:
        if ref.raw is None:
            msg = "raw=True but this AnnData has no .raw"
            raise InvalidValueError(msg)
        matrix, cols, label = ref.raw.X, slice(None), "raw.X"
    elif layer is not None:
        if layer not in ref.layers:
            # anndata 0.13 lists X as None (keys(): anndata's Layers.__iter__ is annotated as returning a key)
            names = [k for k in ref.layers.keys() if k is not None]  # noqa: SIM118
            msg = f"layer {layer!r} not found; this AnnData has layers {names}"
            raise UnknownKeyError(msg)
        matrix, label = ref.layers[layer], f"layers[{layer!r}]"
    else:
        matrix, label = ref.X, "X"
    if matrix is None:
        msg = f"this AnnData has no {label} to write"
        raise InvalidValueError(msg)
    n_rows, n_cols = matrix.shape
    return MatrixSource(matrix, normalize_rows(rows, n_rows), normalize_rows(cols, n_cols), label)


def view_parts(adata: ad.AnnData) -> tuple[ad.AnnData, np.ndarray | slice, np.ndarray | slice]:
    """``(actual AnnData, rows, cols)`` of a view (slices or numpy arrays); an actual AnnData gives itself and ``:``."""
    if not adata.is_view:
        return adata, slice(None), slice(None)

    def as_index(index: Any) -> np.ndarray | slice:
        # anndata >= 0.13 wraps index arrays in an IndexManager that converts with np.asarray.
        return index if isinstance(index, slice) else np.asarray(index)

    ref, rows, cols = _internals.anndata_view_parts(adata)  # anndata has no public accessor for them
    assert ref is not None  # a view's actual AnnData
    return ref, as_index(rows), as_index(cols)


def _length(index: np.ndarray | slice) -> int:
    if isinstance(index, slice):
        return int(index.stop - index.start)
    return int(index.shape[0])


def _ncols(matrix: Any) -> int:
    return int(matrix.shape[1])


def _row_chunks(rows: np.ndarray | slice, block_rows: int, matrix: Any) -> Iterator[np.ndarray | slice]:
    """Row selections of about ``block_rows``, aligned to a dask array's chunks when there are some."""
    if isinstance(rows, slice):
        bounds = [*range(rows.start, rows.stop, block_rows), rows.stop]
        chunks = getattr(matrix, "chunks", None)
        if is_dask(matrix) and chunks is not None:
            edges = np.concatenate(([0], np.cumsum(chunks[0])))
            edges = edges[(edges > rows.start) & (edges < rows.stop)]
            merged, last = [rows.start], rows.start
            for edge in edges:
                if edge - last >= block_rows:
                    merged.append(int(edge))
                    last = int(edge)
            bounds = [*merged, rows.stop]
        for lo, hi in itertools.pairwise(bounds):
            if hi > lo:
                yield slice(lo, hi)
        return
    for lo in range(0, rows.shape[0], block_rows):
        yield rows[lo : lo + block_rows]


def is_dask(matrix: Any) -> bool:
    """Whether ``matrix`` is a dask array."""
    return type(matrix).__module__.startswith("dask.")


def _read_rows(matrix: Any, rows: np.ndarray | slice) -> Any:
    """``matrix[rows]`` in memory, for every kind of matrix AnnData holds (a CSR's run of rows: views of it)."""
    if isinstance(rows, slice) and issparse(matrix) and matrix.format == "csr" and rows.step in (None, 1):
        return csr_rows(matrix, rows.start, rows.stop)  # the writer copies what it keeps (to_count_csr)
    if isinstance(rows, np.ndarray) and not isinstance(matrix, np.ndarray) and not issparse(matrix):
        # On-disk arrays (h5py, backed sparse) want increasing, unique indices: read those, then reorder.
        unique, inverse = np.unique(rows, return_inverse=True)
        block = _materialize(matrix[unique])
        return block[inverse]
    return _materialize(matrix[rows])


def _materialize(block: Any) -> Any:
    if hasattr(block, "compute"):
        block = block.compute()
    if hasattr(block, "to_memory"):
        block = block.to_memory()
    return block
