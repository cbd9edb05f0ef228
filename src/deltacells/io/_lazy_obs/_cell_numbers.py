"""The obs_names of a whole lazy atlas: the cell numbers, which the stored names also find."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from deltacells.errors import UnknownKeyError

__all__ = ["CellNumbers"]


class CellNumbers(pd.RangeIndex):
    """The cell numbers ``0 .. n-1`` of a whole lazy atlas, as its ``obs_names``: free to make and to hold.

    A :class:`pandas.RangeIndex` (which anndata accepts as names without reading anything) that also finds
    cells by their stored names: ``get_indexer``, ``get_loc`` and ``in`` given strings look them up in the
    dataset's names (as Arrow strings, memory-mapped from the local cache), so ``adata[["cell_a", "cell_b"]]``
    and ``adata["cell_a"]`` select cells by name as they do with a pandas obs. Integers are cell numbers.
    """

    #: Finds names: strings in, cell numbers out (``-1`` for a name no cell has).
    _lookup: Callable[[np.ndarray], np.ndarray] | None = None

    @classmethod
    def of(cls, n_cells: int, lookup: Callable[[np.ndarray], np.ndarray], name: str | None = None) -> CellNumbers:
        """``0 .. n_cells - 1``, finding names with ``lookup``."""
        index = cls(int(n_cells), name=name)
        index._lookup = lookup
        return index

    def get_indexer(self, target: Any, method: Any = None, limit: Any = None, tolerance: Any = None) -> np.ndarray:
        """Positions of ``target``: stored names when it holds strings, else cell numbers (as pandas does)."""
        keys = _names_in(target)
        if keys is None or self._lookup is None or method is not None:
            return super().get_indexer(target, method=method, limit=limit, tolerance=tolerance)
        return self._lookup(keys)

    def get_loc(self, key: Any) -> Any:
        """The position of a stored name (``KeyError`` if no cell has it), or of a cell number."""
        if isinstance(key, str) and self._lookup is not None:
            (position,) = self._lookup(np.array([key], dtype=object))
            if position < 0:
                raise UnknownKeyError(key)
            return int(position)
        return super().get_loc(key)

    def __contains__(self, key: Any) -> bool:
        if isinstance(key, str) and self._lookup is not None:
            return bool(self._lookup(np.array([key], dtype=object))[0] >= 0)
        return super().__contains__(key)


def _names_in(target: Any) -> np.ndarray | None:
    """``target`` as an object array of strings when it is a non-empty collection of strings, else ``None``."""
    if isinstance(target, (str, bytes)) or not hasattr(target, "__len__") or len(target) == 0:
        return None
    values = np.asarray(target, dtype=object).reshape(-1)
    if values.dtype.kind == "U" or all(isinstance(value, str) for value in values.tolist()):
        return values.astype(object)
    return None
