"""A loader's obs values over a collection: each dataset's from its own cache, categories joined.

A categorical column's codes in a batch refer to the union of the datasets' categories (sorted, as
:func:`anndata.concat` joins them); a cell of a dataset without the column has code -1 (or NaN for a number).
The ``label`` column gives each cell's dataset, its categories the collection's keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from deltacells.errors import InvalidValueError

if TYPE_CHECKING:
    from deltacells.dataset import Collection

__all__ = ["CollectionObs"]


class CollectionObs:
    """The obs columns of a collection's datasets, read as one (the loader's ``take`` and ``categories``).

    Parameters
    ----------
    collection
        The datasets read as one.
    keys, label
        The datasets' names, and the column (if any) that gives them.
    columns
        The columns a loader gives; each is copied into the local cache now.
    cache_dir, verify
        As for :class:`~deltacells.obs.ObsStore`.

    Raises
    ------
    InvalidValueError
        If no dataset has a column, or datasets hold it in kinds that cannot be joined (categories in one,
        numbers in another).
    """

    def __init__(
        self,
        collection: Collection,
        keys: Sequence[str],
        label: str | None,
        columns: Sequence[str],
        *,
        cache_dir: Any,
        verify: bool,
    ) -> None:
        from deltacells.obs import ObsStore

        self.collection, self.keys, self.label = collection, list(keys), label
        self.stores = [
            ObsStore(m.store, m.manifest, cache_dir=cache_dir, verify=verify) if m.manifest.has_obs else None
            for m in collection.members
        ]
        self.kinds: dict[str, str] = {}
        self._codes: dict[str, list[np.ndarray | None]] = {}  # each dataset's category codes in the joined ones
        self.categories: dict[str, tuple[Any, ...]] = {}
        for name in columns:
            if name == label:
                self.kinds[name] = "category"
                self.categories[name] = tuple(self.keys)
                continue
            self._join_column(name)
            for store in self.stores:
                if store is not None and name in store.columns:
                    store.localize([name])

    def _join_column(self, name: str) -> None:
        columns = [None if s is None or name not in s.columns else s.schema.column(name) for s in self.stores]
        kinds = {column.kind for column in columns if column is not None}
        if not kinds:
            msg = f"obs column {name!r} was asked for, but no dataset of the collection has it"
            raise InvalidValueError(msg)
        if len(kinds) > 1:
            where = ", ".join(
                f"{key}: {column.kind}" for key, column in zip(self.keys, columns, strict=True) if column is not None
            )
            msg = f"obs column {name!r} cannot be joined: its kinds differ between datasets ({where})"
            raise InvalidValueError(msg)
        (kind,) = kinds
        self.kinds[name] = kind
        if kind != "category":
            return
        vocabularies = [pd.Index(column.categories or ()) for column in columns if column is not None]
        joined = vocabularies[0]
        for vocabulary in vocabularies[1:]:
            joined = joined.union(vocabulary)
        self.categories[name] = tuple(joined)
        self._codes[name] = [
            None if column is None else joined.get_indexer(pd.Index(column.categories or ())).astype(np.int64)
            for column in columns
        ]

    def take(self, name: str, cells: np.ndarray) -> Any:
        """The values of column ``name`` for the collection's ``cells`` (a Categorical for a categorical column).

        A number column is float64 with NaN where a dataset lacks it, else of its datasets' common dtype; a
        bool or string column is of objects (None where a dataset lacks it) unless every dataset has it.
        """
        cells = np.asarray(cells, dtype=np.int64)
        members, local = self.collection.member_of(cells)
        if name == self.label:
            return pd.Categorical.from_codes(members, categories=list(self.keys))
        parts = []
        for m in np.unique(members).tolist():
            mine = np.flatnonzero(members == m)
            store = self.stores[m]
            if store is not None and name in store.columns:
                parts.append((mine, store.take(name, local[mine]), m))
            else:
                parts.append((mine, None, m))
        if self.kinds[name] == "category":
            codes = np.full(cells.shape[0], -1, dtype=np.int64)
            for mine, got, m in parts:
                if got is not None:
                    own = np.asarray(got.codes, dtype=np.int64)
                    codes[mine] = np.where(own >= 0, self._codes[name][m][np.maximum(own, 0)], -1)
            return pd.Categorical.from_codes(codes, categories=list(self.categories[name]))
        arrays = [np.asarray(got) for _, got, _ in parts if got is not None]
        if len(arrays) == len(parts):  # every dataset has it: every value is set below
            values = np.empty(cells.shape[0], dtype=np.result_type(*arrays))
        elif self.kinds[name] == "numeric":
            values = np.full(cells.shape[0], np.nan)
        else:
            values = np.full(cells.shape[0], None, dtype=object)
        for mine, got, _ in parts:
            if got is not None:
                values[mine] = np.asarray(got)
        return values
