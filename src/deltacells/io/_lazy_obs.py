"""obs as a lazy :class:`anndata.experimental.backed.Dataset2D`: constant-time opening at atlas scale.

A pandas obs costs a Python string per cell for its names and a full load per column, and anndata checks
the names for duplicates: time and memory that grow with the cells. Above a million cells (the rule is
``read_deltacells``'s ``lazy_obs``) obs is instead the xarray-backed ``Dataset2D`` that anndata's own
:func:`anndata.experimental.read_lazy` returns, with each column a lazily indexed array over the local
Arrow cache:

- the index is a :class:`pandas.RangeIndex` of cell numbers (``obs_names`` are ``0 .. n-1``, costing
  nothing); the stored names are the ``_index`` variable, anndata's "true index", read only for the cells
  a subset keeps when it is brought into memory;
- a column is read (and localized into the cache on first use) when it is indexed: ``adata.obs["cell_type"]
  == "B cell"`` loads that column's codes (1-2 bytes per cell), ``adata[mask].to_memory()`` reads the
  selected cells' values of every column from the memory-mapped cache files.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import anndata as ad
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import xarray as xr
from anndata.experimental.backed import Dataset2D
from xarray.backends import BackendArray
from xarray.core.extension_array import PandasExtensionArray
from xarray.core.indexing import IndexingSupport, LazilyIndexedArray, explicit_indexing_adapter

from deltacells.format import INDEX_COLUMN
from deltacells.obs._decode import to_pandas_values

if TYPE_CHECKING:
    from collections.abc import Sequence

    from deltacells.obs import ObsStore

__all__ = ["OBS_DIM", "CachedObsColumn", "CellNumberIndex", "NumberNames", "add_lazy_columns", "lazy_obs_frame"]

#: Name of the obs dimension (and of the index of cell numbers) of a lazy obs.
OBS_DIM = "cell"


def lazy_obs_frame(obs_store: ObsStore | None, n_cells: int, columns: Sequence[str], *, names: bool) -> Any:
    """A ``Dataset2D`` over ``n_cells`` cells with the obs ``columns`` of ``obs_store``, read lazily.

    Parameters
    ----------
    obs_store
        The dataset's obs (``None`` when it has none: the frame has the index only).
    n_cells
        Rows.
    columns
        The columns (names checked by the caller).
    names
        Make the stored names (``_index``) the frame's true index, so that ``to_memory()`` gives them.
    """
    index = CellNumberIndex(pd.RangeIndex(n_cells, name=OBS_DIM), OBS_DIM)
    frame = Dataset2D(xr.Dataset(coords=xr.Coordinates.from_xindex(index)))
    if obs_store is not None:
        add_lazy_columns(frame, obs_store, columns)
    if names and obs_store is not None and obs_store.schema.has_index:
        add_lazy_columns(frame, obs_store, [INDEX_COLUMN])
    else:  # the names anndata gives cells by default, made for the cells brought into memory
        frame.ds[INDEX_COLUMN] = xr.Variable((OBS_DIM,), LazilyIndexedArray(NumberNames(n_cells)))
    frame.true_index_dim = INDEX_COLUMN
    return frame


class CellNumberIndex(xr.indexes.PandasIndex):
    """xarray's index over a :class:`pandas.RangeIndex` of cell numbers, selecting without materializing it.

    pandas answers ``range_index[positions]`` by building the whole ``arange`` first (800 MB for 100 million
    cells, kept in the index's cache); this index computes the selected cell numbers only.
    """

    def isel(self, indexers: Any) -> Any:
        """Select positions: a slice keeps a ``RangeIndex``, an array gives the selected cell numbers."""
        indxr = indexers[self.dim]
        if isinstance(indxr, xr.Variable) and indxr.dims == (self.dim,):
            indxr = indxr.data
        index = self.index
        if isinstance(index, pd.RangeIndex) and isinstance(indxr, np.ndarray) and indxr.ndim == 1:
            if indxr.dtype == bool:
                if indxr.shape[0] != len(index):
                    msg = f"a boolean mask of {indxr.shape[0]} values for {len(index)} cells"
                    raise IndexError(msg)
                positions = np.flatnonzero(indxr)
            elif indxr.dtype.kind in "iu":
                positions = indxr.astype(np.int64, copy=False)
                if positions.size and (positions.min() < -len(index) or positions.max() >= len(index)):
                    msg = f"cell positions must lie in -{len(index)} .. {len(index) - 1}"
                    raise IndexError(msg)
                positions = np.where(positions < 0, positions + len(index), positions)
            else:
                return super().isel(indexers)
            numbers = index.start + index.step * positions
            return self._replace(pd.Index(numbers, dtype=np.int64, name=index.name))
        return super().isel(indexers)


def add_lazy_columns(frame: Any, obs_store: ObsStore, columns: Sequence[str]) -> None:
    """Add the obs ``columns`` of ``obs_store`` to the lazy obs ``frame`` (in place), each read when used."""
    for name in columns:
        frame.ds[name] = xr.Variable((frame.index_dim,), LazilyIndexedArray(CachedObsColumn(obs_store, name)))


class CachedObsColumn(BackendArray):
    """One obs column of the local Arrow cache as a lazily indexed xarray array.

    Indexing it reads the values of the cells asked for (localizing the column on first use), from the
    record batches of their tiles only. Categorical columns come back as :class:`pandas.Categorical`
    (their codes), strings and nullable columns in the pandas dtypes :meth:`ObsStore.take` gives.

    Parameters
    ----------
    obs_store
        The dataset's obs.
    name
        The column.
    """

    def __init__(self, obs_store: ObsStore, name: str) -> None:
        self.obs_store = obs_store
        self.name = name
        self.shape = (obs_store.n_obs,)
        self.dtype = _dtype_of(obs_store, name)
        self._last: tuple[np.ndarray | None, Any] | None = None

    def _take(self, cells: np.ndarray | None) -> Any:
        """The values of ``cells``, remembering the last selection.

        anndata and xarray read a view's columns more than once when bringing it into memory.
        """
        last = self._last
        if last is not None and (
            (cells is None and last[0] is None)
            or (cells is not None and last[0] is not None and np.array_equal(cells, last[0]))
        ):
            return last[1]
        values = self.obs_store.take(self.name, cells)
        self._last = (cells, values)
        return values

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_last": None}

    def __repr__(self) -> str:
        return f"CachedObsColumn({self.name!r}, {self.shape[0]} cells, {self.dtype})"

    def __getitem__(self, key: Any) -> Any:
        return explicit_indexing_adapter(key, self.shape, IndexingSupport.OUTER, self._getitem)

    def _getitem(self, key: tuple[Any, ...]) -> Any:
        (selection,) = key
        n = self.shape[0]
        if isinstance(selection, slice):
            cells = None if selection == slice(None) else np.arange(n, dtype=np.int64)[selection]
        elif isinstance(selection, (int, np.integer)):
            cells = np.array([operator.index(selection)], dtype=np.int64)
        else:
            cells = np.asarray(selection, dtype=np.int64)
        if cells is not None and cells.size and (cells.min() < -n or cells.max() >= n):
            msg = f"cell numbers must lie in -{n} .. {n - 1}"
            raise IndexError(msg)
        if cells is not None:
            cells = np.where(cells < 0, cells + n, cells)
        values = self._take(cells)
        if isinstance(selection, (int, np.integer)):
            values = values[:1]
            return _wrap(values).reshape(()) if isinstance(values, np.ndarray) else _wrap(values)
        return _wrap(values)


class NumberNames(BackendArray):
    """The names ``"0" .. "n-1"`` anndata gives cells without names, made only for the cells indexed.

    Parameters
    ----------
    n_cells
        Cells.
    """

    def __init__(self, n_cells: int) -> None:
        self.shape = (int(n_cells),)
        self.dtype = np.dtype(object)

    def __getitem__(self, key: Any) -> Any:
        return explicit_indexing_adapter(key, self.shape, IndexingSupport.OUTER, self._getitem)

    def _getitem(self, key: tuple[Any, ...]) -> np.ndarray:
        numbers = np.arange(self.shape[0], dtype=np.int64)[key[0]]
        return np.asarray(pa.array(np.atleast_1d(numbers)).cast(pa.string()).to_numpy(zero_copy_only=False)).reshape(
            numbers.shape
        )


def _wrap(values: Any) -> Any:
    """Return numpy arrays as they are, strings as numpy object arrays, pandas arrays in xarray's wrapper.

    Categories no value uses are dropped when anndata's ``remove_unused_categories`` setting says so, as
    anndata's own lazy categoricals do (and its views of a pandas obs).
    """
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values.dtype, pd.StringDtype):  # xarray holds strings in numpy arrays
        return values.to_numpy(dtype=object, na_value=None)
    if isinstance(values, pd.Categorical) and ad.settings.remove_unused_categories:
        values = _without_unused_categories(values)
    return PandasExtensionArray(values)


def _without_unused_categories(values: pd.Categorical) -> pd.Categorical:
    """``values.remove_unused_categories()``, finding the codes used by hashing (pandas sorts every code)."""
    used = pc.unique(pa.array(values.codes)).to_numpy()
    used = used[used >= 0]
    if used.shape[0] == len(values.categories):
        return values
    unused = np.ones(len(values.categories), dtype=bool)
    unused[used] = False
    return values.remove_categories(values.categories[unused])


def _dtype_of(obs_store: ObsStore, name: str) -> Any:
    """The dtype :meth:`ObsStore.take` gives for column ``name``, found without reading it."""
    column = obs_store.schema.column(name)
    dtype = to_pandas_values(column, pa.array([], type=column.pa_type)).dtype
    return np.dtype(object) if isinstance(dtype, pd.StringDtype) else dtype  # as _wrap gives strings
