"""``TiledCSRDataset``: a deltacells dataset as a lazy CSR matrix that AnnData accepts as ``X``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from anndata.abc import CSRDataset
from scipy import sparse

from deltacells.dataset._indexing import normalize_rows
from deltacells.errors import InvalidTypeError, OutOfRangeError

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from deltacells.dataset import Dataset

__all__ = ["TiledCSRDataset"]

#: dtypes X may be read as (DECISIONS.md 9).
READ_DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float64))


def parse_read_dtype(dtype: DTypeLike) -> np.dtype:
    """Check that ``dtype`` is one the reader offers: float32 (default), int32, int64 or float64."""
    try:
        parsed = np.dtype(dtype)
    except TypeError as exc:
        msg = f"dtype must be one of float32, int32, int64, float64; got {dtype!r}"
        raise InvalidTypeError(msg) from exc
    if parsed not in READ_DTYPES:
        msg = f"dtype must be one of float32, int32, int64, float64; got {parsed}"
        raise InvalidTypeError(msg)
    return parsed


class TiledCSRDataset(CSRDataset):
    """A deltacells dataset seen as a CSR matrix that is read lazily, tile by tile.

    It implements :class:`anndata.abc.CSRDataset`, so it can be an AnnData's ``X``:
    indexing (``X[rows]``, ``X[rows, cols]``, ``X[np.ix_(rows, cols)]``) decodes only
    the tiles that hold the requested cells and returns a
    :class:`scipy.sparse.csr_matrix`, exactly as indexing the in-memory matrix would.

    Parameters
    ----------
    dataset
        The open dataset.
    dtype
        dtype of the values returned: float32 (default), int32, int64 or float64.
    """

    format: ClassVar[str] = "csr"
    backend = "deltacells"

    def __init__(self, dataset: Dataset, dtype: DTypeLike = np.float32) -> None:
        self._dataset = dataset
        self._dtype = parse_read_dtype(dtype)

    # ------------------------------------------------------------------ properties

    @property
    def dataset(self) -> Dataset:
        """The underlying :class:`~deltacells.Dataset`."""
        return self._dataset

    @property
    def shape(self) -> tuple[int, int]:  # type: ignore[override]
        """``(n_cells, n_genes)``."""
        return self._dataset.shape

    @property
    def dtype(self) -> np.dtype:  # type: ignore[override]
        """The dtype of the values returned."""
        return self._dtype

    @property
    def nnz(self) -> int:
        """Stored nonzeros (from the manifest; nothing is decoded)."""
        return self._dataset.manifest.nnz

    @property
    def ndim(self) -> int:
        """Always 2."""
        return 2

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        n_cells, n_genes = self.shape
        return (
            f"TiledCSRDataset: {n_cells:,} x {n_genes:,}, {self._dtype}, {self._dataset.n_tiles} tiles "
            f"at {self._dataset.store.url!r}"
        )

    def astype(self, dtype: DTypeLike) -> TiledCSRDataset:
        """The same dataset, returning values of another dtype (nothing is read)."""
        return TiledCSRDataset(self._dataset, dtype)

    def copy(self) -> TiledCSRDataset:
        """A new lazy view of the same dataset (the data on disk is immutable)."""
        return TiledCSRDataset(self._dataset, self._dtype)

    # ------------------------------------------------------------------ reading

    def __getitem__(self, index: Any) -> sparse.csr_matrix | Any:
        """Read the selected cells (and genes) into memory.

        Accepts a row index, or a pair ``(rows, cols)``, where each is an int, a slice
        (any step), an integer array (any order, repeats, negative values) or a boolean
        mask; ``np.ix_`` pairs work too. ``X[i, j]`` with two ints gives a scalar.
        """
        rows, cols = _split_index(index, self.shape)
        if _is_int(rows) and _is_int(cols):
            return self._dataset.read_rows(rows, dtype=self._dtype)[0, cols]
        matrix = self._dataset.read_rows(rows, dtype=self._dtype)
        if not (isinstance(cols, slice) and cols == slice(None)):
            matrix = matrix[:, _column_index(cols, self.shape[1])]
        return matrix

    def to_memory(self) -> sparse.csr_matrix:
        """The whole matrix as a :class:`scipy.sparse.csr_matrix`."""
        return self._dataset.read_rows(slice(None), dtype=self._dtype)

    def iter_row_blocks(
        self, rows: np.ndarray | slice | None = None
    ) -> Iterator[tuple[np.ndarray | slice, sparse.csr_matrix]]:
        """Yield ``(rows, block)`` covering the selected rows, about one tile at a time.

        This is how AnnData's writers and :func:`deltacells.write_deltacells` stream a
        dataset without holding more than a few tiles in memory.
        """
        selected = normalize_rows(slice(None) if rows is None else rows, self.shape[0])
        tile_size = max(1, self._dataset.manifest.tile_size)
        if isinstance(selected, slice):
            for lo in range(selected.start, selected.stop, tile_size):
                block = slice(lo, min(selected.stop, lo + tile_size))
                yield block, self._dataset.read_rows(block, dtype=self._dtype)
            return
        for lo in range(0, selected.shape[0], tile_size):
            block = selected[lo : lo + tile_size]
            yield block, self._dataset.read_rows(block, dtype=self._dtype)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _split_index(index: Any, shape: tuple[int, int]) -> tuple[Any, Any]:
    """Split an index into a row part and a column part (resolving Ellipsis and ``np.ix_``)."""
    if not isinstance(index, tuple):
        index = (index,)
    ellipses = [k for k, part in enumerate(index) if part is Ellipsis]
    if len(ellipses) > 1:
        msg = "an index can only have a single ellipsis ('...')"
        raise OutOfRangeError(msg)
    if ellipses:
        k = ellipses[0]
        index = (*index[:k], *(slice(None),) * max(0, 3 - len(index)), *index[k + 1 :])
    if len(index) == 0:
        return slice(None), slice(None)
    if len(index) == 1:
        return _flatten(index[0]), slice(None)
    if len(index) == 2:
        return _flatten(index[0]), _flatten(index[1])
    msg = f"too many indices for a 2-D matrix: {len(index)}"
    raise OutOfRangeError(msg)


def _flatten(part: Any) -> Any:
    """``np.ix_`` gives (n, 1) and (1, m) arrays: flatten 2-D index arrays with one long axis."""
    if isinstance(part, (slice, int, np.integer)) or part is None:
        return part
    arr = np.asarray(part)
    if arr.ndim == 2 and 1 in arr.shape:
        return arr.reshape(-1)
    if arr.ndim > 1:
        msg = f"index arrays must be one-dimensional (or np.ix_ pairs), got shape {arr.shape}"
        raise OutOfRangeError(msg)
    return arr


def _column_index(cols: Any, n_genes: int) -> np.ndarray | slice:
    """A column index scipy understands, checked like a row index (an int keeps its axis)."""
    return normalize_rows(cols, n_genes)
