"""The xarray side of a lazy obs: columns as lazily indexed arrays over the local cache, and the cell index.

These are what anndata's own machinery (views, ``to_memory``, ``concat``) sees of a lazy obs: each column is
an xarray variable whose values are read (and the column localized on first use) only for the cells
indexed, and the dimension's index holds cell numbers without ever building the whole range.
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
from xarray.backends import BackendArray

from deltacells import _internals
from deltacells.errors import OutOfRangeError

if TYPE_CHECKING:
    from deltacells.io._lazy_obs._source import LazyObsStore

__all__ = [
    "OBS_DIM",
    "SOURCE_KEY",
    "CachedObsColumn",
    "CellNumberIndex",
    "NumberNames",
    "cached_column_variable",
    "restrict_categories",
    "without_unused_categories",
]

#: Name of the obs dimension (and of the index of cell numbers) of a lazy obs.
OBS_DIM = "cell"

#: The key, in a variable's ``encoding``, that names the stored obs column the variable reads. A column the
#: user sets in place of it is a new variable without the key, which is how a lazy obs tells the two apart.
SOURCE_KEY = "deltacells_obs_column"


def cached_column_variable(obs_store: LazyObsStore, name: str, dim: str = OBS_DIM) -> xr.Variable:
    """Column ``name`` of ``obs_store`` as a lazily indexed xarray variable along ``dim``."""
    return xr.Variable(
        (dim,), _internals.lazily_indexed_array(CachedObsColumn(obs_store, name)), encoding={SOURCE_KEY: name}
    )


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
                    raise OutOfRangeError(msg)
                positions = np.flatnonzero(indxr)
            elif indxr.dtype.kind in "iu":
                positions = indxr.astype(np.int64, copy=False)
                if positions.size and (positions.min() < -len(index) or positions.max() >= len(index)):
                    msg = f"cell positions must lie in -{len(index)} .. {len(index) - 1}"
                    raise OutOfRangeError(msg)
                positions = np.where(positions < 0, positions + len(index), positions)
            else:
                return super().isel(indexers)
            numbers = index.start + index.step * positions
            return _internals.pandas_index_replace(self, pd.Index(numbers, dtype=np.int64, name=index.name))
        return super().isel(indexers)


class CachedObsColumn(BackendArray):
    """One obs column of the local Arrow cache as a lazily indexed xarray array.

    Indexing it reads the values of the cells asked for (localizing the column on first use), from the
    record batches of their tiles only. Categorical columns come back as :class:`pandas.Categorical`
    (their codes), strings as numpy object arrays (xarray keeps text in numpy), other columns in the dtypes
    :meth:`ObsStore.take` gives.

    Parameters
    ----------
    obs_store
        The dataset's obs.
    name
        The column.
    """

    def __init__(self, obs_store: LazyObsStore, name: str) -> None:
        self.obs_store = obs_store
        self.name = name
        self.shape = (obs_store.n_obs,)
        dtype = obs_store.dtype(name)
        self.dtype = np.dtype(object) if isinstance(dtype, pd.StringDtype) else dtype  # as _wrap gives strings
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
        return _internals.outer_indexing_adapter(key, self.shape, self._getitem)

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
            raise OutOfRangeError(msg)
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
        return _internals.outer_indexing_adapter(key, self.shape, self._getitem)

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
        values = without_unused_categories(values)
    return _internals.pandas_extension_array(values)


def without_unused_categories(values: pd.Categorical) -> pd.Categorical:
    """``values.remove_unused_categories()``: the categories in their order, found by hashing the codes.

    pandas sorts every code to find the ones used; here they are hashed, and the codes renumbered by a lookup.
    """
    codes = values.codes
    used = pc.unique(pa.array(codes)).to_numpy()
    used = used[used >= 0]
    if used.shape[0] == len(values.categories):
        return values
    kept = np.zeros(len(values.categories), dtype=bool)
    kept[used] = True
    return _keep_categories(values, kept)


def restrict_categories(values: pd.Categorical, categories: pd.Index) -> pd.Categorical:
    """``values`` with only ``categories`` (a subset of its own, which every value lies in), in their order."""
    if len(categories) == len(values.categories):
        return values
    return _keep_categories(values, values.categories.isin(categories))


def _keep_categories(values: pd.Categorical, kept: np.ndarray) -> pd.Categorical:
    """``values`` with the categories ``kept`` marks, the codes renumbered by a lookup (no value has another)."""
    codes = values.codes
    renumbered = (np.cumsum(kept) - 1).astype(codes.dtype)
    new_codes = np.where(codes >= 0, renumbered[np.maximum(codes, 0)], codes)
    dtype = pd.CategoricalDtype(values.categories[kept], ordered=values.ordered)
    return pd.Categorical.from_codes(new_codes, dtype=dtype)
