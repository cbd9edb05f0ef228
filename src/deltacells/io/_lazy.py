"""``TiledCSRDataset``: a deltacells dataset as a lazy CSR matrix that AnnData accepts as ``X``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from anndata.abc import CSRDataset
from scipy import sparse

from deltacells import _internals
from deltacells._checks import is_integer
from deltacells._sparse import issparse
from deltacells.core import normalize_rows
from deltacells.errors import InvalidTypeError, NotInMemoryError, OutOfRangeError
from deltacells.io._dask import Chunks, dask_array, source_of
from deltacells.io._read_options import DEFAULT_READ_OPTIONS, ReadOptions

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from deltacells.core import RowSource

__all__ = ["TiledCSRDataset", "read_options_of", "with_read_options"]

#: dtypes X may be read as (docs/format.md, decision 9).
READ_DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float64))


def parse_read_dtype(dtype: DTypeLike | None, dataset: RowSource | None = None) -> np.dtype:
    """Check that ``dtype`` is one the reader offers: float32, int32, int64 or float64.

    ``None`` is the dataset's own dtype (docs/format.md, decision 9): the counts' as written, float32 for a dataset that
    records none; a collection's, its datasets' promoted as :func:`anndata.concat` would.
    """
    if dataset is not None and (dtype is None or _same_dtype(dtype, dataset.dtype)):
        return dataset.dtype  # the dataset's own: any dtype counts were written in (uint16...)
    try:
        parsed = np.dtype(dtype)
    except TypeError as exc:
        msg = f"dtype must be one of float32, int32, int64, float64; got {dtype!r}"
        raise InvalidTypeError(msg) from exc
    if parsed not in READ_DTYPES:
        msg = f"dtype must be one of float32, int32, int64, float64; got {parsed}"
        raise InvalidTypeError(msg)
    return parsed


class TiledCSRDataset:
    """A deltacells dataset seen as a CSR matrix that is read lazily, tile by tile.

    It implements :class:`anndata.abc.CSRDataset` (and is registered as one: ``isinstance(X,
    anndata.abc.CSRDataset)`` holds), so it can be an AnnData's ``X``:
    indexing (``X[rows]``, ``X[rows, cols]``, ``X[np.ix_(rows, cols)]``) decodes only
    the tiles that hold the requested cells and returns a
    :class:`scipy.sparse.csr_matrix`, exactly as indexing the in-memory matrix would.

    It behaves as anndata's own backed sparse datasets (``read_h5ad(..., backed="r").X``):

    - with ``anndata.settings.use_sparse_array_on_read`` on, indexing and :meth:`to_memory`
      return :class:`scipy.sparse.csr_array` instead of ``csr_matrix``;
    - ``np.asarray(X)`` raises :class:`~deltacells.errors.InvalidTypeError` (load it with
      :meth:`to_memory` first), while ``anndata.utils.asarray(X)`` gives the dense matrix;
    - ``X.T`` and ``adata.transpose()`` raise :class:`~deltacells.errors.InvalidValueError`, a
      :class:`ValueError` (``"Cannot transpose ..."``);
    - its attributes cannot be set (``X.group = ...`` raises :class:`AttributeError`);
    - an index of the wrong kind (a float, ``None``, a string, a 2-D sparse mask) or out of range
      raises :class:`~deltacells.errors.OutOfRangeError`, an :class:`IndexError`;
    - ``adata.write_h5ad(path, as_dense=("X",))`` writes ``X`` as a dense array;
    - ``adata.__sizeof__(with_disk=True)`` counts ``X`` as the bytes of the CSR matrix :meth:`to_memory` gives
      (as anndata counts its backed datasets: their arrays' bytes), ``adata.__sizeof__()`` the Python object only;
    - ``anndata.tests.helpers.assert_equal(X, other)`` compares its values (once anndata's test helpers are
      imported).

    It is not a subclass of :class:`anndata.abc.CSRDataset`, only registered as one: the ABC types its
    ``backend`` as ``Literal["zarr", "hdf5"]`` (which file type holds the matrix), and a deltacells dataset is
    neither: its :attr:`backend` is ``"deltacells"``. ``X.to_memory()`` takes about
    ``X.nnz * (X.dtype.itemsize + 4)`` bytes (values and int32 column indices), plus the row pointers.

    Parameters
    ----------
    dataset
        The open dataset, or a :class:`~deltacells.core.Collection` of datasets read as one.
    dtype
        dtype of the values returned: float32, int32, int64 or float64; ``None`` (default) the dataset's own, the
        counts' dtype as written (docs/format.md, decision 9), float32 for a dataset that records none.
    """

    #: The sparse format of the matrix (as anndata's CSR datasets).
    format: ClassVar[Literal["csr"]] = "csr"
    #: What holds the matrix, a deltacells dataset (anndata's own CSR datasets say ``"zarr"`` or ``"hdf5"``).
    backend: ClassVar[str] = "deltacells"

    def __init__(self, dataset: RowSource, dtype: DTypeLike | None = None) -> None:
        self._dataset = dataset
        self._dtype = parse_read_dtype(dtype, dataset)
        self._read_options = DEFAULT_READ_OPTIONS  # what read_deltacells was given (with_read_options)

    def __setattr__(self, name: str, value: Any) -> None:
        # Like anndata's backed datasets (whose ``group`` cannot be reset): a new dtype or
        # dataset makes a new object (``astype``, ``read_deltacells``), never a changed one.
        if not name.startswith("_"):
            msg = (
                f"cannot set {name!r} on a {type(self).__name__}: it is read-only; use .astype() for "
                "another dtype or read_deltacells() for another dataset"
            )
            raise AttributeError(msg)
        super().__setattr__(name, value)

    # ------------------------------------------------------------------ properties

    @property
    def dataset(self) -> RowSource:
        """The underlying :class:`~deltacells.Dataset` (or :class:`~deltacells.core.Collection`)."""
        return self._dataset

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_cells, n_genes)``."""
        return self._dataset.shape

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the values returned."""
        return self._dtype

    @property
    def nnz(self) -> int:
        """Stored nonzeros (from the manifests; nothing is decoded; an inner join of datasets reads fewer)."""
        return self._dataset.nnz

    @property
    def ndim(self) -> int:
        """Always 2."""
        return 2

    def __len__(self) -> int:
        return self.shape[0]

    def __sizeof__(self) -> int:
        """The object's size; within ``AnnData.__sizeof__(with_disk=True)``, that of the matrix in memory.

        As anndata counts its own backed sparse datasets with ``with_disk=True``: the bytes of the CSR arrays
        :meth:`to_memory` gives (values in :attr:`dtype`, column indices and row pointers), from the manifests'
        counts, nothing read. An inner join of datasets holds fewer nonzeros than its datasets store.
        """
        if _internals.sizeof_with_disk():
            return csr_bytes(self.shape[0], self.nnz, self._dtype)
        return object.__sizeof__(self)

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        """Refuse to become a numpy array (and keep numpy from iterating the rows into an object array)."""
        n_cells, n_genes = self.shape
        msg = (
            f"a lazy {type(self).__name__} ({n_cells:,} x {n_genes:,}) cannot be converted to a numpy array: "
            "load it with .to_memory() (then .toarray() for a dense array), or read part of it with X[rows]"
        )
        raise InvalidTypeError(msg)

    @property
    def T(self) -> Any:
        """Not available, since a lazy matrix cannot be transposed; load it with :meth:`to_memory` first."""
        msg = (
            f"Cannot transpose a lazy {type(self).__name__} (an AnnData's X read by read_deltacells): "
            "load it first with .to_memory() (adata.to_memory().T)"
        )
        raise NotInMemoryError(msg)

    def _compare(self, other: Any) -> Any:
        msg = (
            f"a lazy {type(self).__name__} cannot be compared element-wise (as scanpy's filters do): call it on "
            "adata[cells].to_memory() (or adata.to_memory())"
        )
        raise InvalidTypeError(msg)

    __gt__ = __ge__ = __lt__ = __le__ = _compare

    def __repr__(self) -> str:
        n_cells, n_genes = self.shape
        return (
            f"TiledCSRDataset: {n_cells:,} x {n_genes:,}, {self._dtype}, {self._dataset.n_tiles} tiles "
            f"at {self._dataset.url!r}"
        )

    def astype(self, dtype: DTypeLike) -> TiledCSRDataset:
        """The same dataset, returning values of another dtype (nothing is read)."""
        return with_read_options(TiledCSRDataset(self._dataset, dtype), self._read_options)

    def copy(self) -> TiledCSRDataset:
        """A new lazy view of the same dataset (the data on disk is immutable)."""
        return with_read_options(TiledCSRDataset(self._dataset, self._dtype), self._read_options)

    # ------------------------------------------------------------------ reading

    def __getitem__(self, index: Any) -> sparse.csr_matrix | sparse.csr_array | Any:
        """Read the selected cells (and genes) into memory.

        Accepts a row index, or a pair ``(rows, cols)``, where each is an int, a slice
        (any step), an integer array (any order, repeats, negative values) or a boolean
        mask; ``np.ix_`` pairs work too. ``X[i, j]`` with two ints gives a scalar.
        The result is a ``csr_array`` when ``anndata.settings.use_sparse_array_on_read`` is on.

        Raises
        ------
        OutOfRangeError
            (an :class:`IndexError`) for an index out of range or of a kind that cannot select rows
            or columns (a float, ``None``, a string, a 2-D sparse mask).
        """
        rows, cols = _split_index(index, self.shape)
        rows = _check_index_kind(rows, "row")
        cols = _check_index_kind(cols, "column")
        if is_integer(rows) and is_integer(cols):
            column = normalize_rows(cols, self.shape[1], what="column")
            assert isinstance(column, np.ndarray)  # an int selects by position
            return self._dataset.read_rows(rows, dtype=self._dtype)[0, int(column[0])]
        matrix = self._dataset.read_rows(rows, dtype=self._dtype)
        if not (isinstance(cols, slice) and cols == slice(None)):
            # scipy-stubs' overloads take an array or a slice of columns, not either
            matrix = matrix[:, _column_index(cols, self.shape[1])]  # type: ignore[index]
        return _memory_class(matrix)

    def to_memory(self) -> sparse.csr_matrix | sparse.csr_array:
        """The whole matrix in memory, in arrays of its own (nothing shared with the tile cache).

        Returns
        -------
        scipy.sparse.csr_matrix or scipy.sparse.csr_array
            A ``csr_array`` when ``anndata.settings.use_sparse_array_on_read`` is on, as anndata's
            own backed datasets return.
        """
        return _memory_class(self._dataset.read_rows(slice(None), dtype=self._dtype))

    def to_dask(self, chunks: Chunks = "auto") -> Any:  # a dask.array.Array (dask is optional: not imported here)
        """The matrix as a :class:`dask.array.Array` of CSR blocks of whole tiles (nothing is read yet).

        ``read_deltacells(path, chunks=...)`` gives the same as ``adata.X``. Each block is what
        :meth:`to_memory` would give for its rows: a ``csr_matrix`` (``csr_array`` with
        ``anndata.settings.use_sparse_array_on_read`` on) of this dtype, in this gene order; ``meta`` is an
        empty ``(0, 0)`` one. A block's task pickles to the dataset's store (its URL and options) and settings,
        never to decoded data, so dask.distributed workers read the tiles themselves, opening the dataset once
        per process. A block's tiles are read and decoded as a range of cells is (``Dataset.read_rows``): the
        small tiles of an atlas in groups, their checks and reads spread over the decoding threads.

        Parameters
        ----------
        chunks
            ``"auto"`` (default): blocks of whole tiles holding about dask's ``array.chunk-size`` (128 MiB unless
            configured: ``dask.config.set({"array.chunk-size": "256MiB"})``) of decoded CSR each, as equal as
            whole tiles allow, as dask's own ``chunks="auto"`` sizes blocks: few tasks, each of many tiles.
            ``"tiles"``: one block per tile, the manifest's ``tile_cells`` rows each (a task per tile: for
            work that wants the tiles themselves). An int: blocks of about that many cells, rounded to whole
            tiles (never less than one tile; the last block holds what is left). A single column block holds
            every gene.

        Returns
        -------
        dask.array.Array

        Raises
        ------
        InvalidValueError
            For another string, an int below 1, or ``None``.
        InvalidTypeError
            For a value of another type (a float, a tuple or dict of chunk sizes).
        """
        return dask_array(
            self._dataset, self._dtype, chunks, sparse_array=_use_sparse_array(), read_options=self._read_options
        )

    def iter_row_blocks(
        self, rows: np.ndarray | slice | None = None
    ) -> Iterator[tuple[np.ndarray | slice, sparse.csr_matrix]]:
        """Yield ``(rows, block)`` covering the selected rows, about one tile at a time.

        This is how AnnData's writers and :func:`deltacells.write_deltacells` stream a
        dataset without holding more than a few tiles in memory.
        """
        selected = normalize_rows(slice(None) if rows is None else rows, self.shape[0])
        tile_size = max(1, self._dataset.tile_size)
        if isinstance(selected, slice):
            for lo in range(selected.start, selected.stop, tile_size):
                block = slice(lo, min(selected.stop, lo + tile_size))
                yield block, self._dataset.read_rows(block, dtype=self._dtype)
            return
        for lo in range(0, selected.shape[0], tile_size):
            picked = selected[lo : lo + tile_size]
            yield picked, self._dataset.read_rows(picked, dtype=self._dtype)


def _same_dtype(dtype: DTypeLike, other: np.dtype) -> bool:
    try:
        return bool(np.dtype(dtype) == other)
    except TypeError:
        return False


def csr_bytes(n_rows: int, nnz: int, dtype: np.dtype) -> int:
    """The bytes of a CSR matrix as the readers make it: int32 indices and row pointers unless ``nnz`` needs int64."""
    index_bytes = 4 if nnz < 2**31 else 8
    return int(nnz * (np.dtype(dtype).itemsize + index_bytes) + (n_rows + 1) * index_bytes)


def with_read_options(matrix: TiledCSRDataset, options: ReadOptions) -> TiledCSRDataset:
    """``matrix``, remembering what ``read_deltacells`` was given (set in place; returned for convenience)."""
    matrix._read_options = options
    return matrix


def read_options_of(matrix: Any) -> ReadOptions:
    """What the tiles' matrix of an AnnData (the lazy X, or a dask X computed from its blocks) was read with.

    The defaults for any other matrix, and for a dask X reading several datasets (a collection's).
    """
    if isinstance(matrix, TiledCSRDataset):
        return matrix._read_options
    source = source_of(matrix)
    return DEFAULT_READ_OPTIONS if source is None else source.read_options


def _use_sparse_array() -> bool:
    """Whether anndata asks for ``csr_array`` rather than ``csr_matrix`` (anndata >= 0.11)."""
    import anndata

    return bool(getattr(anndata.settings, "use_sparse_array_on_read", False))


def _memory_class(matrix: sparse.csr_matrix) -> sparse.csr_matrix | sparse.csr_array:
    """``matrix`` as the class anndata's backed datasets return (its arrays are shared, not copied)."""
    if _use_sparse_array() and not isinstance(matrix, sparse.csr_array):
        return sparse.csr_array(matrix)
    return matrix


def _check_index_kind(part: Any, what: str) -> Any:
    """Reject, with an IndexError as anndata does, index parts that cannot select rows or columns.

    A one-dimensional sparse boolean array (which anndata's backed datasets accept) becomes dense.
    """
    if isinstance(part, slice) or is_integer(part):
        return part
    if issparse(part):
        if part.ndim == 1:
            return part.toarray()
        msg = f"cannot select {what}s with a 2-D sparse matrix of shape {part.shape}; pass a 1-D array (.toarray())"
        raise OutOfRangeError(msg)
    if part is None:
        msg = f"cannot select {what}s with None (np.newaxis): the matrix is 2-D"
        raise OutOfRangeError(msg)
    arr = np.asarray(part)
    if arr.dtype != bool and arr.dtype.kind not in "iu" and arr.size > 0:
        msg = f"{what}s must be selected by integers, slices or a boolean mask, not {arr.dtype}"
        raise OutOfRangeError(msg)
    return part


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
    if isinstance(part, (slice, int, np.integer)) or part is None or issparse(part):
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
    return normalize_rows(cols, n_genes, what="column")


# Registered, not derived: anndata accepts it as X wherever it accepts its own CSR datasets, while its own
# attributes keep their types (the ABC's backend is Literal["zarr", "hdf5"]; see the class docstring).
CSRDataset.register(TiledCSRDataset)
