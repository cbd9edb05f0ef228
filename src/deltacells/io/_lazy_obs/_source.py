"""What a lazy obs reads: a dataset's obs columns and cell names for chosen cells, as an eager read gives them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from deltacells.errors import UnknownKeyError
from deltacells.format import INDEX_COLUMN
from deltacells.io._names import default_names

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["LazyObsStore", "ObsSource"]


class _NamedIndex(Protocol):
    """A column of an obs schema, as a lazy obs sees it: the name of the cells' index."""

    @property
    def index_name(self) -> str | None:
        """The name of the pandas index (``_index`` only)."""


class _LazyObsSchema(Protocol):
    """An obs schema, as a lazy obs sees it: whether cell names are stored, and their column."""

    @property
    def has_index(self) -> bool:
        """Whether the cells' names are stored."""

    def column(self, name: str) -> _NamedIndex:
        """Column ``name``."""


class LazyObsStore(Protocol):
    """What a lazy obs reads from: one dataset's :class:`~deltacells.obs.ObsStore`, or a collection's obs."""

    @property
    def schema(self) -> _LazyObsSchema:
        """The columns stored."""

    @property
    def n_obs(self) -> int:
        """Cells."""

    def take(self, name: str, cells: np.ndarray | None = None) -> Any:
        """Column ``name`` for ``cells`` (``None``: every cell)."""

    def dtype(self, name: str) -> Any:
        """The dtype :meth:`take` gives for column ``name``."""

    def arrow_column(self, name: str) -> pa.ChunkedArray:
        """Column ``name`` as Arrow, one chunk per tile."""


class ObsSource:
    """One dataset's obs, read for chosen cells with the dtypes :func:`~deltacells.read_deltacells` gives eagerly.

    Parameters
    ----------
    obs_store
        The dataset's obs (``None`` for a dataset without one).
    n_cells
        Cells in the dataset.
    names
        Use the stored names (``_index``) as the cells' names; otherwise (or when none are stored) the names
        are ``"0" .. "n-1"``, as anndata names cells by default.
    """

    def __init__(self, obs_store: LazyObsStore | None, n_cells: int, *, names: bool) -> None:
        self.obs_store = obs_store
        self.n_cells = int(n_cells)
        self.stored_names = bool(names) and obs_store is not None and obs_store.schema.has_index

    def __repr__(self) -> str:
        return f"ObsSource({self.obs_store!r}, {self.n_cells} cells, stored_names={self.stored_names})"

    def values(self, name: str, cells: np.ndarray | None) -> Any:
        """Column ``name`` for ``cells`` (``None``: every cell), as numpy or a pandas array."""
        if self.obs_store is None:
            raise UnknownKeyError(name)
        return self.obs_store.take(name, cells)

    def dtype(self, name: str) -> Any:
        """The dtype :meth:`values` gives for column ``name``, found without reading it."""
        if self.obs_store is None:
            raise UnknownKeyError(name)
        return self.obs_store.dtype(name)

    def names(self, cells: np.ndarray | None) -> pd.Index:
        """The names of ``cells`` (``None``: every cell) as a pandas Index, read only for those cells."""
        if not self.stored_names:
            return default_names(np.arange(self.n_cells) if cells is None else cells)
        assert self.obs_store is not None
        values = self.obs_store.take(INDEX_COLUMN, cells)
        index_name = self.obs_store.schema.column(INDEX_COLUMN).index_name
        index: pd.Index = pd.Index(values, dtype=getattr(values, "dtype", None), name=index_name)
        return index

    def positions(self, keys: Sequence[str] | np.ndarray) -> np.ndarray:
        """The cell number of each name in ``keys`` (the first cell of that name), ``-1`` where none has it.

        The stored names are searched as Arrow strings, memory-mapped from the local cache: no Python string
        is made per cell, whatever the size of the dataset.
        """
        keys = np.asarray(keys, dtype=object)
        if keys.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        unique, inverse = np.unique(keys.astype(str), return_inverse=True)
        found = self._unique_positions(unique) if self.stored_names else self._number_positions(unique)
        return found[inverse.reshape(-1)]

    def _unique_positions(self, unique: np.ndarray) -> np.ndarray:
        assert self.obs_store is not None
        column = self.obs_store.arrow_column(INDEX_COLUMN)
        wanted = pa.array(unique.tolist(), type=column.type)
        which = pc.fill_null(pc.index_in(column, value_set=wanted), -1)
        which = np.concatenate([chunk.to_numpy() for chunk in which.chunks]) if which.num_chunks else np.zeros(0)
        cells = np.flatnonzero(which >= 0)
        found = np.full(unique.shape[0], -1, dtype=np.int64)
        found[which[cells][::-1]] = cells[::-1]  # reversed, so that the first cell of a repeated name wins
        return found

    def _number_positions(self, unique: np.ndarray) -> np.ndarray:
        """Positions of the default names ``"0" .. "n-1"``: the canonical decimal numbers below ``n_cells``."""
        text = pa.array(unique.tolist(), type=pa.string())
        canonical = pc.match_substring_regex(text, r"^(0|[1-9][0-9]{0,17})$").to_numpy(zero_copy_only=False)
        found = np.full(unique.shape[0], -1, dtype=np.int64)
        if canonical.any():
            numbers = pc.cast(pc.filter(text, pa.array(canonical)), pa.int64()).to_numpy()
            found[np.flatnonzero(canonical)] = np.where(numbers < self.n_cells, numbers, -1)
        return found
