"""A collection's obs: each dataset's columns from its own cache, joined as :func:`anndata.concat` joins them.

What a lazy obs (:mod:`deltacells.io._lazy_obs`) and a training loader read from a collection of datasets,
through the calls they make of one dataset's :class:`~deltacells.obs.ObsStore`: ``take`` for chosen cells,
``dtype`` without reading, ``arrow_column`` of the names. The joined columns are those of every dataset
(``join="inner"``) or of any (``"outer"``); a categorical column's categories are the union of the datasets'
(sorted, as pandas' ``union`` sorts them, unless they are the same everywhere); a cell of a dataset without a
column has a missing value (NaN, or code -1). The ``label`` column gives each cell's dataset, its categories
the keys. Cell names are the stored names (``"0" .. "n-1"`` in a dataset without), with ``index_unique`` and
the key appended as :func:`anndata.concat` appends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from deltacells._threads import map_members
from deltacells.errors import InvalidValueError, UnknownKeyError
from deltacells.format import INDEX_COLUMN
from deltacells.obs._cache import ObsStore
from deltacells.obs._dtypes import default_string_dtype

if TYPE_CHECKING:
    from deltacells.core import Collection

__all__ = ["CollectionObs"]


@dataclass(frozen=True)
class _IndexColumn:
    index_name: str | None


@dataclass(frozen=True)
class _JoinedSchema:
    """What a lazy obs asks of a schema: whether there are names, and the index's name."""

    index_name: str | None
    has_index: bool = True

    def column(self, name: str) -> _IndexColumn:
        return _IndexColumn(self.index_name)


class CollectionObs:
    """The obs columns of a collection's datasets, read as one.

    Parameters
    ----------
    collection
        The datasets read as one.
    keys, label
        The datasets' names, and the column (if any) that gives them.
    join
        ``"inner"`` (the columns every dataset has) or ``"outer"`` (those of any).
    columns
        The columns to give (None: every joined one); each is copied into the local caches now.
    names
        Give the stored cell names (else ``"0" .. "n-1"`` in each dataset, as an eager read without names).
    index_unique
        As :func:`anndata.concat`'s: appended to each name, with the dataset's key.
    cache_dir, verify
        As for :class:`~deltacells.obs.ObsStore`.

    Raises
    ------
    UnknownKeyError
        If no dataset has a column asked for.
    InvalidValueError
        If datasets hold a column in kinds that cannot be joined (categories in one, numbers in another).
    """

    def __init__(
        self,
        collection: Collection,
        keys: Sequence[str],
        *,
        label: str | None,
        join: str = "outer",
        columns: Sequence[str] | None = None,
        names: bool = True,
        index_unique: str | None = None,
        cache_dir: Any = None,
        verify: bool = True,
    ) -> None:
        self.collection, self.keys, self.label = collection, list(keys), label
        self.index_unique, self.stored_names = index_unique, bool(names)
        self.stores = [
            ObsStore(m.store, m.manifest, cache_dir=cache_dir, verify=verify) if m.manifest.has_obs else None
            for m in collection.members
        ]
        if names or columns is None or any(c != label for c in columns):
            every = map_members(lambda s: [] if s is None else list(s.columns), self.stores)  # schemas read
        else:  # neither names nor columns: nothing to read
            every = [[] for _ in self.stores]
        joined = _joined_names(every, join)
        if columns is not None:
            missing = [c for c in columns if c != label and not any(c in names_ for names_ in every)]
            if missing:
                msg = f"no dataset of the collection has obs column(s) {missing}"
                raise UnknownKeyError(msg)
            joined = [c for c in columns if c != label and c in joined]
        self.kinds: dict[str, str] = {}
        self._codes: dict[str, list[np.ndarray | None]] = {}  # each dataset's category codes in the joined ones
        self.categories: dict[str, tuple[Any, ...]] = {}
        self._dtypes: dict[str, Any] = {}
        for name in joined:
            self._join_column(name)
        if label is not None:
            self.kinds[label] = "category"
            self.categories[label] = tuple(self.keys)
            self._dtypes[label] = pd.CategoricalDtype(list(self.keys))
        self.columns = [*joined, *([label] if label is not None else [])]
        index_names = {s.schema.column(INDEX_COLUMN).index_name for s in self.stores if s} if names else {None}
        self.schema = _JoinedSchema(index_names.pop() if len(index_names) == 1 else None)

        def localize(store: Any, present: list[str]) -> None:  # the columns copied into the cache now
            wanted = [c for c in joined if c in present]
            if names and store.schema.has_index:
                wanted.append(INDEX_COLUMN)
            if wanted:
                store.localize(wanted)

        map_members(lambda pair: localize(*pair), [(s, p) for s, p in zip(self.stores, every, strict=True) if s])

    @property
    def n_obs(self) -> int:
        """Cells of all the datasets."""
        return self.collection.n_cells

    def _join_column(self, name: str) -> None:
        columns = [None if s is None or name not in s.columns else s.schema.column(name) for s in self.stores]
        kinds = {column.kind for column in columns if column is not None}
        if len(kinds) > 1:
            where = ", ".join(
                f"{key}: {column.kind}" for key, column in zip(self.keys, columns, strict=True) if column is not None
            )
            msg = f"obs column {name!r} cannot be joined: its kinds differ between datasets ({where})"
            raise InvalidValueError(msg)
        (kind,) = kinds
        self.kinds[name] = kind
        everywhere = all(column is not None for column in columns)
        dtypes = [s.dtype(name) for s, c in zip(self.stores, columns, strict=True) if c is not None and s is not None]
        if kind == "category":
            vocabularies = [pd.Index(column.categories or ()) for column in columns if column is not None]
            joined = vocabularies[0]
            for vocabulary in vocabularies[1:]:
                joined = joined.union(vocabulary)
            self.categories[name] = tuple(joined)
            self._codes[name] = [
                None if column is None else joined.get_indexer(pd.Index(column.categories or ())).astype(np.int64)
                for column in columns
            ]
            ordered = everywhere and all(getattr(d, "ordered", False) for d in dtypes)
            self._dtypes[name] = pd.CategoricalDtype(list(joined), ordered=ordered)
        elif everywhere and len({str(d) for d in dtypes}) == 1:
            self._dtypes[name] = dtypes[0]
        elif kind == "numeric":
            self._dtypes[name] = np.dtype(np.float64) if not everywhere else np.result_type(*dtypes)
        else:
            self._dtypes[name] = np.dtype(object)

    def dtype(self, name: str) -> Any:
        """The pandas dtype :meth:`take` gives for column ``name`` (nothing read)."""
        if name == INDEX_COLUMN:
            return np.dtype(object)
        self._check(name)
        return self._dtypes[name]

    def _check(self, name: str) -> None:
        if name not in self.kinds:
            msg = f"obs column {name!r} is not among the collection's joined columns {self.columns}"
            raise UnknownKeyError(msg)

    def take(self, name: str, cells: np.ndarray | None = None) -> Any:
        """The values of column ``name`` for the collection's ``cells`` (None: all), in the order asked.

        A categorical column gives a :class:`pandas.Categorical` of the joined categories; ``"_index"`` the
        cells' names.
        """
        cells = np.arange(self.n_obs, dtype=np.int64) if cells is None else np.asarray(cells, dtype=np.int64)
        members, local = self.collection.member_of(cells)
        if name == INDEX_COLUMN:
            return self._names(members, local)
        self._check(name)
        if name == self.label:
            return pd.Categorical.from_codes(members, dtype=self._dtypes[name])
        parts = []
        for m in np.unique(members).tolist():
            mine = np.flatnonzero(members == m)
            store = self.stores[m]
            got = store.take(name, local[mine]) if store is not None and name in store.columns else None
            parts.append((mine, got, m))
        dtype = self._dtypes[name]
        if self.kinds[name] == "category":
            codes = np.full(cells.shape[0], -1, dtype=np.int64)
            for mine, got, m in parts:
                if got is not None:
                    own = np.asarray(got.codes, dtype=np.int64)
                    codes[mine] = np.where(own >= 0, self._codes[name][m][np.maximum(own, 0)], -1)
            return pd.Categorical.from_codes(codes, dtype=dtype)
        if all(got is not None for _, got, _ in parts) and not isinstance(dtype, np.dtype):
            return pd.array(np.concatenate([np.asarray(got, dtype=object) for _, got, _ in parts]), dtype=dtype)[
                np.argsort(np.concatenate([mine for mine, _, _ in parts]), kind="stable")
            ]
        values = np.full(cells.shape[0], np.nan, dtype=dtype) if dtype.kind == "f" else np.empty(cells.shape[0], dtype)
        if dtype.kind == "O":
            values[:] = np.nan
        for mine, got, _ in parts:
            if got is not None:
                values[mine] = np.asarray(got)
        return values

    def _names(self, members: np.ndarray, local: np.ndarray) -> np.ndarray:
        names = np.empty(members.shape[0], dtype=object)
        for m in np.unique(members).tolist():
            mine = np.flatnonzero(members == m)
            store = self.stores[m]
            if self.stored_names and store is not None and store.schema.has_index:
                own = np.asarray(store.take(INDEX_COLUMN, local[mine]), dtype=object)
            else:
                own = local[mine].astype(str).astype(object)
            if self.index_unique is not None:
                own = own + f"{self.index_unique}{self.keys[m]}"
            names[mine] = own
        dtype = default_string_dtype()  # as a dataset's names come: pandas 3's str, else Python objects
        return names if dtype == np.dtype(object) else pd.array(names, dtype=dtype)

    def arrow_column(self, name: str) -> pa.ChunkedArray:
        """The cells' names as Arrow strings, one chunk per tile of each dataset (only ``"_index"``)."""
        if name != INDEX_COLUMN:
            msg = f"a collection's obs gives its names as Arrow (column {INDEX_COLUMN!r}), not {name!r}"
            raise UnknownKeyError(msg)
        chunks: list[pa.Array] = []
        for m, (member, store) in enumerate(zip(self.collection.members, self.stores, strict=True)):
            if self.stored_names and store is not None and store.schema.has_index:
                own = [pc.cast(chunk, pa.large_string()) for chunk in store.arrow_column(INDEX_COLUMN).chunks]
            else:
                own = [pa.array(np.arange(member.n_cells).astype(str), type=pa.large_string())]
            if self.index_unique is not None:
                suffix = pa.scalar(f"{self.index_unique}{self.keys[m]}", type=pa.large_string())
                empty = pa.scalar("", type=pa.large_string())
                own = [pc.binary_join_element_wise(chunk, suffix, empty) for chunk in own]
            chunks += own
        return pa.chunked_array(chunks, type=pa.large_string())


def _joined_names(every: list[list[str]], join: str) -> list[str]:
    """The columns of every dataset (inner) or of any (outer), in the order they first appear."""
    seen: dict[str, int] = {}
    for names in every:
        for name in names:
            seen[name] = seen.get(name, 0) + 1
    return [name for name, count in seen.items() if join == "outer" or count == len(every)]
