"""``LazyObs``: an atlas's obs, opened in constant time, answering the calls a pandas obs answers.

It is anndata's own lazy data frame (:class:`anndata.experimental.backed.Dataset2D`, what
:func:`anndata.experimental.read_lazy` gives), so anndata's views, ``to_memory`` and ``concat`` work on it
as they do on any lazy AnnData; on top of that it answers as a :class:`pandas.DataFrame` does:

- ``obs["cell_type"]`` and ``obs.cell_type`` are :class:`pandas.Series` (a column is read when it is used,
  for the cells the frame holds: the codes of a categorical, 1-2 bytes a cell), ``obs[["a", "b"]]`` a
  :class:`pandas.DataFrame`, ``obs.head()`` / ``obs.tail()`` the first / last rows;
- ``obs.iloc[...]`` and ``obs.loc[...]`` select rows lazily; ``columns``, ``dtypes``, ``shape``, ``len()``,
  ``in`` and iteration are a data frame's;
- its ``index`` (the AnnData's ``obs_names``) is the stored names of the cells it holds, read for those
  cells only; a frame holding every cell of the atlas has the cell numbers instead
  (:class:`~deltacells.io._lazy_obs._cell_numbers.CellNumbers`), which the stored names also find;
- ``copy()`` and ``to_memory()`` of a subset give a pandas obs with the dtypes an eager read gives.

The values of the stored columns are read straight from the local cache with the dtypes of an eager read;
anndata's own code reads them through the xarray variables (:mod:`._backend`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr
from anndata.experimental.backed import Dataset2D

from deltacells import _internals
from deltacells._checks import is_integer
from deltacells.errors import InvalidValueError, OutOfRangeError, UnknownKeyError
from deltacells.format import INDEX_COLUMN
from deltacells.io._lazy_obs._backend import (
    OBS_DIM,
    SOURCE_KEY,
    CellNumberIndex,
    NumberNames,
    cached_column_variable,
    restrict_categories,
    without_unused_categories,
)
from deltacells.io._lazy_obs._cell_numbers import CellNumbers
from deltacells.io._lazy_obs._source import ObsSource

if TYPE_CHECKING:
    from collections.abc import Sequence

    from deltacells.io._lazy_obs._source import LazyObsStore

__all__ = ["LazyObs", "add_lazy_columns", "lazy_obs_frame"]

#: The key, in a variable's ``encoding``, of the pandas string dtype of a column set from one (xarray keeps the
#: text in a numpy object array; reading the column gives it back in that dtype).
STRING_DTYPE_KEY = "deltacells_string_dtype"

#: Rows :meth:`LazyObs.head` and :meth:`LazyObs.tail` give by default, as pandas.
DEFAULT_ROWS = 5


def lazy_obs_frame(obs_store: LazyObsStore | None, n_cells: int, columns: Sequence[str], *, names: bool) -> LazyObs:
    """A :class:`LazyObs` over ``n_cells`` cells with the obs ``columns`` of ``obs_store``, read when used.

    Parameters
    ----------
    obs_store
        The dataset's obs (``None`` when it has none: the frame has the index only).
    n_cells
        Rows.
    columns
        The columns (names checked by the caller).
    names
        Make the stored names (``_index``) the cells' names; otherwise they are ``"0" .. "n-1"``.
    """
    source = ObsSource(obs_store, n_cells, names=names)
    index = CellNumberIndex(pd.RangeIndex(n_cells, name=OBS_DIM), OBS_DIM)
    frame = LazyObs(xr.Dataset(coords=xr.Coordinates.from_xindex(index)), source)
    add_lazy_columns(frame, columns)
    if source.stored_names:
        assert obs_store is not None
        frame.ds[INDEX_COLUMN] = cached_column_variable(obs_store, INDEX_COLUMN, frame.index_dim)
    else:  # the names anndata gives cells by default, made for the cells brought into memory
        frame.ds[INDEX_COLUMN] = xr.Variable((OBS_DIM,), _internals.lazily_indexed_array(NumberNames(n_cells)))
    frame.true_index_dim = INDEX_COLUMN
    return frame


def add_lazy_columns(frame: LazyObs, columns: Sequence[str]) -> None:
    """Add the stored obs ``columns`` of ``frame``'s dataset to ``frame`` (in place), each read when used."""
    obs_store = frame.source.obs_store if frame.source is not None else None
    for name in columns:
        if obs_store is None:
            raise UnknownKeyError(name)
        frame.ds[name] = cached_column_variable(obs_store, name, frame.index_dim)


class LazyObs(Dataset2D):
    """The obs of a lazy atlas: anndata's lazy ``Dataset2D``, answering as a :class:`pandas.DataFrame` does.

    Made by :func:`~deltacells.read_deltacells` for datasets above ``lazy_obs``'s threshold (see the user
    guide's "Atlases" page); never needed directly.

    Parameters
    ----------
    ds
        The xarray dataset: one dimension (cell numbers), a variable per column, the names as ``_index``.
    source
        The dataset's obs, which the stored columns are read from.
    """

    def __init__(self, ds: xr.Dataset, source: ObsSource | None = None) -> None:
        super().__init__(ds)
        self._source = source
        self._names: pd.Index | None = None  # the stored names of the cells a subset holds, read once
        self._drop_unused = False  # an AnnData view's obs: categories no cell of it has are dropped
        self._categories_of: LazyObs | None = None  # rows selected from such a view keep the view's categories
        self._dtypes: dict[Hashable, pd.CategoricalDtype] = {}  # the categories kept, per column read

    def drop_unused_categories(self) -> None:
        """Drop, from the categorical columns read from now on, the categories no row has.

        What anndata does to the obs of a view (``anndata.settings.remove_unused_categories``); a lazy obs does
        it when a column is read. A frame selected with pandas' calls (``iloc``, ``loc``, a mask) keeps them,
        as pandas does.
        """
        self._drop_unused = True

    @property
    def source(self) -> ObsSource | None:
        """The dataset's obs, which the stored columns are read from."""
        return self._source

    # ------------------------------------------------------------------ rows and names

    def _cells(self) -> np.ndarray | slice | None:
        """The dataset cell numbers of the rows: ``slice(None)`` for every cell in order, ``None`` if unknown.

        Unknown once the index was replaced (``obs_names = ...``): then only the xarray variables are read.
        """
        if self._source is None:
            return None
        numbers = self.ds.indexes[self.index_dim]
        if isinstance(numbers, pd.RangeIndex):
            if numbers.start == 0 and numbers.step == 1 and len(numbers) == self._source.n_cells:
                return slice(None)
            return np.arange(numbers.start, numbers.stop, numbers.step, dtype=np.int64)
        if numbers.dtype.kind in "iu":
            return numbers.to_numpy(dtype=np.int64)
        return None

    @property
    def index(self) -> pd.Index:
        """The rows' names: the stored names of a subset's cells, the cell numbers of the whole atlas.

        The whole atlas's names are never read at once (:class:`CellNumbers` finds cells by name instead); a
        subset's are read for its cells the first time they are asked for.
        """
        cells = self._cells()
        if cells is None:
            return super().index
        assert self._source is not None
        if isinstance(cells, slice):
            return CellNumbers.of(self._source.n_cells, self._source.positions, name=self.index_dim)
        if self._names is None:
            self._names = self._source.names(cells)
        return self._names

    @index.setter
    def index(self, value: Any) -> None:
        Dataset2D.index.fset(self, value)  # type: ignore[attr-defined]  # a property with a setter, to mypy an overload
        # (anndata's setter above replaces the cell numbers)
        self._names = None

    @property
    def columns(self) -> pd.Index:
        """The column names, in the order they were stored (or added)."""
        return pd.Index([name for name in self.ds.data_vars if name != self.true_index_dim])

    @columns.setter
    def columns(self, value: Any) -> None:
        Dataset2D.columns.fset(self, value)  # type: ignore[attr-defined]  # as index's above

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)``, as a data frame's."""
        return (self.ds.sizes[self.index_dim], len(self.columns))

    @property
    def dtypes(self) -> pd.Series:  # type: ignore[override]  # pandas' Series of dtypes, not anndata's Mapping
        """Each column's pandas dtype, from the schema (a view's categoricals read, for the categories it has)."""
        return pd.Series({name: self._dtype(name) for name in self.columns}, dtype=object)

    def __len__(self) -> int:
        return self.ds.sizes[self.index_dim]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.columns)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, Hashable) and key in self.ds.data_vars and key != self.true_index_dim

    def keys(self) -> pd.Index:  # type: ignore[override]
        """The column names (as :meth:`pandas.DataFrame.keys`)."""
        return self.columns

    @_internals.overrides("anndata.experimental.backed.Dataset2D._items")
    def _items(self) -> Iterator[tuple[Hashable, xr.DataArray]]:
        """Every variable (the names too) as an xarray ``DataArray``, as anndata's own code reads them."""
        for name in self.ds.data_vars:
            yield name, self.ds[name]

    # ------------------------------------------------------------------ values

    def column_dtype(self, name: Hashable) -> Any:
        """Column ``name``'s pandas dtype, as :attr:`dtypes` gives it, without the others' (nor the names).

        For a view's categorical column, its categories are those of the view's cells (the column's codes
        are read for them), as anndata's views of a pandas obs have.
        """
        return self._dtype(name)

    def _dtype(self, name: Hashable) -> Any:
        variable = self.ds[name].variable
        if self._source is None or variable.encoding.get(SOURCE_KEY) != name:
            dtype = variable.encoding.get(STRING_DTYPE_KEY, variable.dtype)
        else:
            dtype = self._source.dtype(str(name))
        if isinstance(dtype, pd.CategoricalDtype) and self._categories_of is not None:
            return self._categories_of._view_dtype(name)
        if isinstance(dtype, pd.CategoricalDtype) and self._drop_unused:
            return self._view_dtype(name)  # a view's categories: those of its cells (reads the column)
        return dtype

    def _values(self, name: Hashable) -> Any:
        """Column ``name`` for the frame's cells, as numpy or a pandas array (with an eager read's dtypes)."""
        values = self._read(name)
        if isinstance(values, pd.Categorical) and (self._drop_unused or self._categories_of is not None):
            values = self._with_view_categories(name, values)
        return values

    def _read(self, name: Hashable) -> Any:
        """Column ``name`` as stored (from the source) or set (the xarray variable), for the frame's cells."""
        variable = self.ds[name].variable
        cells = self._cells()
        if self._source is None or cells is None or variable.encoding.get(SOURCE_KEY) != name:
            values = _unwrapped(variable.data)
            string_dtype = variable.encoding.get(STRING_DTYPE_KEY)
            return values if string_dtype is None else pd.array(values, dtype=string_dtype)
        if name == INDEX_COLUMN:
            return self.index.array if not isinstance(cells, slice) else self._source.names(None).array
        return self._source.values(str(name), None if isinstance(cells, slice) else cells)

    def _with_view_categories(self, name: Hashable, values: pd.Categorical) -> pd.Categorical:
        """``values`` with the categories of the AnnData view this frame is, or was selected from."""
        if self._categories_of is not None:
            return restrict_categories(values, self._categories_of._view_dtype(name).categories)
        values = without_unused_categories(values)  # as anndata's views of a pandas obs do
        self._dtypes[name] = values.dtype
        return values

    def _view_dtype(self, name: Hashable) -> pd.CategoricalDtype:
        """The dtype column ``name`` has in this view (its categories that the view's cells have)."""
        if name not in self._dtypes:
            self._values(name)
        return self._dtypes[name]

    def __getitem__(self, key: Any) -> Any:
        """A column as a :class:`pandas.Series`, several as a :class:`pandas.DataFrame`, a row mask as a subset."""
        if isinstance(key, Hashable) and not isinstance(key, tuple) and key in self.ds.data_vars:
            return _as_series(self._values(key), self.index, key)
        if _is_row_mask(key, len(self)):
            return self.iloc[np.asarray(key, dtype=bool)]
        if _is_name_list(key):
            names = list(key)
            missing = [name for name in names if name not in self.ds.data_vars]
            if missing:
                msg = f"{missing} not in the obs columns {list(self.columns)}"
                raise UnknownKeyError(msg)
            data = {name: _as_series(self._values(name), self.index, name) for name in names}
            return pd.DataFrame(data, index=self.index, columns=names, copy=False)
        if isinstance(key, Hashable) and not isinstance(key, tuple):
            msg = f"{key!r} is not an obs column; the columns are {list(self.columns)}"
            raise UnknownKeyError(msg)
        return super().__getitem__(key)

    def __setitem__(self, key: Hashable, value: Any) -> None:  # type: ignore[override]  # one column, as pandas
        """Set a column, as pandas does: an array, a list or a Series of the frame's length (by position)."""
        dtype = None
        if isinstance(value, pd.Series | pd.Index):
            value = value.array
        if isinstance(value, pd.api.extensions.ExtensionArray) and isinstance(value.dtype, pd.StringDtype):
            # xarray keeps text in numpy; pandas-stubs leave None out of na_value's types
            dtype, value = value.dtype, value.to_numpy(dtype=object, na_value=None)  # type: ignore[arg-type]
        elif isinstance(value, pd.arrays.NumpyExtensionArray):
            value = value.to_numpy()
        super().__setitem__(key, value)
        if dtype is not None:
            self.ds[key].variable.encoding[STRING_DTYPE_KEY] = dtype

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            try:  # not self.ds: while a frame is being made or unpickled, its ds is missing (and would recurse)
                ds = object.__getattribute__(self, "ds")
            except AttributeError:
                ds = None
            if ds is not None and name in ds.data_vars:
                return self[name]
        if name.startswith("_") or not hasattr(pd.DataFrame, name):
            msg = f"{type(self).__name__!r} object has no attribute {name!r}"
            raise AttributeError(msg)
        msg = (
            f"a lazy obs has no .{name}: it answers column access (obs['col'] is a pandas Series, obs[['a', 'b']] "
            "a pandas DataFrame), .head(), .iloc and .loc; for other pandas calls bring the rows you need into "
            "memory (obs.to_memory(), adata[cells].to_memory().obs), or read with lazy_obs=False"
        )
        raise AttributeError(msg)

    def head(self, n: int = DEFAULT_ROWS) -> pd.DataFrame:
        """The first ``n`` rows as a :class:`pandas.DataFrame` (all but the last ``-n`` for a negative ``n``)."""
        rows: pd.DataFrame = self.iloc[:n].to_memory()
        return rows

    def tail(self, n: int = DEFAULT_ROWS) -> pd.DataFrame:
        """The last ``n`` rows as a :class:`pandas.DataFrame` (all but the first ``-n`` for a negative ``n``)."""
        rows: pd.DataFrame = self.iloc[max(len(self) - n, 0) if n >= 0 else -n :].to_memory()
        return rows

    # ------------------------------------------------------------------ selecting rows

    @property
    def iloc(self) -> _Iloc:
        """Rows by position: a slice, integers or a boolean mask give a lazy subset, an int one row (a Series)."""
        return _Iloc(self)

    @property
    def loc(self) -> _Loc:
        """Rows by name (or a boolean mask), optionally with columns: ``obs.loc[names, "cell_type"]``."""
        return _Loc(self)

    def _subset(self, rows: Any) -> LazyObs:
        ds = self.ds.isel({self.index_dim: rows})
        frame = LazyObs(ds, self._source)
        frame.is_backed = self.is_backed
        frame._categories_of = self if self._drop_unused else self._categories_of  # as pandas keeps categories
        return frame

    # ------------------------------------------------------------------ into memory

    def to_memory(self, *, copy: bool = False, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The frame as a :class:`pandas.DataFrame` indexed by the stored names, as an eager read gives it.

        Parameters
        ----------
        copy
            Unused (the values read are always new arrays), as for anndata's ``Dataset2D``.
        columns
            Only these columns (``[]``: the names only); ``None`` for all.
        """
        cells = self._cells()
        names = list(self.columns) if columns is None else list(columns)
        missing = [name for name in names if name not in self]
        if missing:
            msg = f"{missing} not in the obs columns {list(self.columns)}"
            raise UnknownKeyError(msg)
        if cells is None:
            frame = super().to_memory(copy=copy)
            return frame if columns is None else frame[names]
        assert self._source is not None
        index = self._source.names(None) if isinstance(cells, slice) else self.index
        data = {name: _as_series(self._values(name), index, name) for name in names}
        if not data:
            return pd.DataFrame(index=index)
        return pd.DataFrame(data, index=index, columns=names, copy=False)

    def copy(self, data: Any = None, *, deep: bool = False) -> LazyObs | pd.DataFrame:  # type: ignore[override]
        """A subset as a pandas obs (so ``adata[cells].copy()`` is an in-memory AnnData); the whole atlas stays lazy.

        With ``data=`` (anndata's own use) the copy is a lazy obs holding those variables, as xarray's.
        """
        if data is None and isinstance(self._cells(), np.ndarray):
            return self.to_memory()
        copied = LazyObs(self.ds.copy(deep=deep, data=data), self._source)
        copied.is_backed = self.is_backed
        return copied

    # ------------------------------------------------------------------ display

    def __repr__(self) -> str:
        n_rows, n_columns = self.shape
        lines = [
            f"{type(self).__name__}: {n_rows:,} cells x {n_columns} columns, read from the local obs cache when "
            "used (.head() shows the first rows)"
        ]
        width = max((len(str(name)) for name in self.columns), default=0)
        lines.extend(f"    {name!s:<{width}}  {_describe(dtype)}" for name, dtype in self.dtypes.items())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(repr(self))}</pre>"


class _Iloc:
    """``LazyObs.iloc``: rows by position (and columns by position)."""

    def __init__(self, frame: LazyObs) -> None:
        self._frame = frame

    def __getitem__(self, key: Any) -> Any:
        frame = self._frame
        if isinstance(key, tuple):
            if len(key) == 1:
                key = key[0]
            elif len(key) == 2:
                rows, columns = key
                names = frame.columns[columns]
                selected = self[rows]
                return (
                    selected[names]
                    if isinstance(names, str) or not isinstance(names, pd.Index)
                    else selected[list(names)]
                )
            else:
                msg = f"too many indexers for a lazy obs: {len(key)} (rows and columns at most)"
                raise OutOfRangeError(msg)
        if is_integer(key):
            n = len(frame)
            if not -n <= key < n:
                msg = f"row {key} is out of range for {n:,} rows"
                raise OutOfRangeError(msg)
            return frame._subset(np.array([key % n])).to_memory().iloc[0]
        if isinstance(key, pd.Series | pd.Index):
            key = key.to_numpy()
        return frame._subset(key)


class _Loc:
    """``LazyObs.loc``: rows by name or boolean mask (and columns by name)."""

    def __init__(self, frame: LazyObs) -> None:
        self._frame = frame

    def __getitem__(self, key: Any) -> Any:
        frame = self._frame
        rows, columns = key if isinstance(key, tuple) and len(key) == 2 else (key, slice(None))
        if _is_row_mask(rows, len(frame)):
            selected = frame.iloc[np.asarray(rows, dtype=bool)]
        elif isinstance(rows, slice) and rows == slice(None):
            selected = frame
        elif isinstance(rows, slice):
            msg = "a lazy obs selects rows by names, a boolean mask, or positions with .iloc; not by a slice of names"
            raise InvalidValueError(msg)
        else:
            single = isinstance(rows, str) or not _is_name_list(rows)
            positions = frame.index.get_indexer(pd.Index([rows] if single else list(rows)))
            if (positions < 0).any():
                missing = np.asarray([rows] if single else list(rows), dtype=object)[positions < 0]
                msg = f"{missing.tolist()[:10]} not in the obs names"
                raise UnknownKeyError(msg)
            if single:
                row = frame.iloc[int(positions[0])]
                return row if isinstance(columns, slice) and columns == slice(None) else row[columns]
            selected = frame.iloc[positions]
        if isinstance(columns, slice) and columns == slice(None):
            return selected
        return selected[columns]


def _is_row_mask(key: Any, n_rows: int) -> bool:
    """Whether ``key`` is a boolean mask of the rows (a numpy array, a pandas Series or Index)."""
    if not isinstance(key, np.ndarray | pd.Series | pd.Index | pd.api.extensions.ExtensionArray):
        return False
    return getattr(key, "ndim", 1) == 1 and len(key) == n_rows and pd.api.types.is_bool_dtype(key.dtype)


def _is_name_list(key: Any) -> bool:
    """Whether ``key`` is a list-like of column (or row) names, not a string or a mask."""
    return isinstance(key, list | tuple | pd.Index | np.ndarray | pd.Series) and not _is_bool_array(key)


def _is_bool_array(key: Any) -> bool:
    return hasattr(key, "dtype") and pd.api.types.is_bool_dtype(key.dtype)


def _unwrapped(values: Any) -> Any:
    """An xarray variable's values as numpy or a pandas array (xarray wraps pandas arrays)."""
    if _internals.is_pandas_extension_array(values):
        return values.array
    return np.asarray(values) if not isinstance(values, np.ndarray | pd.api.extensions.ExtensionArray) else values


def _describe(dtype: Any) -> str:
    if isinstance(dtype, pd.CategoricalDtype):
        return f"category ({len(dtype.categories)} categories)"
    return str(dtype)


def _as_series(values: Any, index: pd.Index, name: Hashable) -> pd.Series:
    """``values`` as a :class:`pandas.Series` of their own dtype.

    pandas 3 infers ``str`` for an object array of strings; a column of dtype ``object`` (as an eager read gives
    it) must stay one.
    """
    dtype = values.dtype if isinstance(values, np.ndarray) and values.dtype == np.dtype(object) else None
    return pd.Series(values, index=index, name=name, dtype=dtype, copy=False)
