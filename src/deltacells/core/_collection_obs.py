"""A collection's obs: each dataset's columns from its own cache, joined as :func:`anndata.concat` joins them.

What a lazy obs (:mod:`deltacells.io._lazy_obs`) and a training loader read from a collection of datasets,
through the calls they make of one dataset's :class:`~deltacells.obs.ObsStore`: ``take`` for chosen cells,
``dtype`` without reading, ``arrow_column`` of the names. The joined columns are those of every dataset
(``join="inner"``) or of any (``"outer"``), each of the dtype :func:`anndata.concat` gives it, found from the
datasets' dtypes alone (:mod:`deltacells.obs._concat`): categories joined in concat's order, bool columns some
dataset lacks as ``boolean``, integers some dataset lacks as floats, categories beside strings as strings...;
a cell of a dataset without a column has a missing value. The ``label`` column gives each cell's dataset, its
categories the keys. Cell names are the stored names (``"0" .. "n-1"`` in a dataset without), with
``index_unique`` and the key appended as :func:`anndata.concat` appends them (a missing name stays missing).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from deltacells._threads import map_members
from deltacells.errors import UnknownKeyError
from deltacells.format import INDEX_COLUMN
from deltacells.obs import (
    ObsStore,
    as_joined,
    default_string_dtype,
    empty_values,
    joined_dtypes,
    missing_values,
    renumbered,
)

if TYPE_CHECKING:
    from deltacells.core._collection import Collection

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
        If datasets hold a column in dtypes that pandas cannot concatenate.
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
        frames = [
            {} if store is None else {name: store.dtype(name) for name in names if columns is None or name in columns}
            for store, names in zip(self.stores, every, strict=True)
        ]
        if columns is not None:
            missing = [c for c in columns if c != label and not any(c in names_ for names_ in every)]
            if missing:
                msg = f"no dataset of the collection has obs column(s) {missing}"
                raise UnknownKeyError(msg)
        self._dtypes: dict[str, Any] = joined_dtypes(frames, join)
        if columns is not None:  # in the order asked
            self._dtypes = {c: self._dtypes[c] for c in dict.fromkeys(columns) if c in self._dtypes}
        stored = [c for c in self._dtypes if c != label]  # a column named as the label is the label's, as in concat
        # Each dataset's category codes in the joined categories, for the columns that stay categorical.
        self._codes: dict[str, list[np.ndarray | None]] = {}
        self.categories: dict[str, tuple[Any, ...]] = {}
        for name in stored:
            dtype = self._dtypes[name]
            if isinstance(dtype, pd.CategoricalDtype):
                self.categories[name] = tuple(dtype.categories)
                self._codes[name] = [
                    None if name not in frame else dtype.categories.get_indexer(frame[name].categories).astype(np.int64)
                    for frame in frames
                ]
        self.columns = list(self._dtypes) if columns is None else stored
        if label is not None:
            self.categories[label] = tuple(self.keys)
            self._dtypes[label] = pd.CategoricalDtype(list(self.keys))
            if label not in self.columns:
                self.columns.append(label)
        joined = stored
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

    def dtype(self, name: str) -> Any:
        """The pandas dtype :meth:`take` gives for column ``name`` (nothing read)."""
        if name == INDEX_COLUMN:
            return np.dtype(object)
        self._check(name)
        return self._dtypes[name]

    def _check(self, name: str) -> None:
        if name not in self._dtypes:
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
        for m, mine in _by_member(members):
            store = self.stores[m]
            got = store.take(name, local[mine]) if store is not None and name in store.columns else None
            parts.append((mine, got, m))
        dtype = self._dtypes[name]
        if isinstance(dtype, pd.CategoricalDtype):
            codes = np.full(cells.shape[0], -1, dtype=np.int64)
            for mine, got, m in parts:
                if got is not None:
                    mapping = self._codes[name][m]
                    assert mapping is not None  # the dataset has the column
                    codes[mine] = renumbered(np.asarray(got.codes, dtype=np.int64), mapping)
            return pd.Categorical.from_codes(codes, dtype=dtype)
        present = [(mine, got) for mine, got, _ in parts if got is not None]
        if len(present) == len(parts) == 1:
            return as_joined(present[0][1], dtype)  # one dataset's cells: its values, cast
        values = missing_values(dtype, cells.shape[0]) if len(present) < len(parts) else empty_values(dtype, len(cells))
        for mine, got in present:
            values[mine] = as_joined(got, dtype)
        return values

    def _names(self, members: np.ndarray, local: np.ndarray) -> np.ndarray:
        names = np.empty(members.shape[0], dtype=object)
        for m, mine in _by_member(members):
            store = self.stores[m]
            if self.stored_names and store is not None and store.schema.has_index:
                own = np.asarray(store.take(INDEX_COLUMN, local[mine]), dtype=object)
            else:
                own = local[mine].astype(str).astype(object)
            if self.index_unique is not None:  # a missing name stays missing, as concat's str.cat leaves it
                named = ~pd.isna(own)
                own[named] = own[named] + f"{self.index_unique}{self.keys[m]}"
                own[~named] = np.nan
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


def _by_member(members: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each dataset among ``members`` (in order) with the positions of its cells (ascending).

    One sort, not a pass over every cell per dataset (which a collection of thousands of datasets would pay
    thousands of times over).
    """
    if members.shape[0] == 0:
        return
    order = np.argsort(members, kind="stable")
    ordered = members[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    ends = [*starts[1:].tolist(), int(members.shape[0])]
    for start, end in zip(starts.tolist(), ends, strict=True):
        yield int(ordered[start]), order[start:end]
