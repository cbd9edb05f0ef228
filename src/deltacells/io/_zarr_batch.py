"""A zarr group written in memory, then stored in one concurrent pass: anndata's elements without a write each.

anndata's element writer makes a zarr array for every array of an element (a sparse matrix is three, a data
frame one per column, ``uns`` dozens), and zarr stores each array's metadata and chunks as objects of their
own, one awaited write after the other: on a local disk a temporary file, a rename and directories made for
each, over the network a request each. Written into a :class:`zarr.storage.MemoryStore` instead, the same
objects cost nothing but their encoding, and are then stored all at once by the dataset's store
(:meth:`~deltacells.storage.BaseStore.write_many`: its client's concurrent requests, or on a local disk the
files one after the other, each directory made once), with the group's consolidated metadata among them: byte
for byte what zarr would have written.

Only elements already in memory go through memory, and only up to :data:`BATCH_BYTES` of them in all: the
others (dask arrays, elements larger than what is left of the budget, types whose size is unknown here) are
written by zarr at their place, after the batch, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deltacells.storage import BaseStore

__all__ = ["BATCH_BYTES", "BatchBudget", "element_bytes", "store_objects"]

#: The most bytes of elements (in memory, uncompressed) written into memory before they are stored together.
BATCH_BYTES = 256 * 2**20

#: What a Python object (a number, a string's overhead) is counted for.
_OBJECT_BYTES = 64


def element_bytes(value: Any) -> int | None:
    """The bytes an element holds in memory, or None when unknown or not in memory (a dask array, say).

    Numbers and strings, numpy arrays, scipy sparse matrices and arrays, pandas frames and series, lists and
    dicts of those, and AnnData's ``Raw`` (its X and var) are sized; anything else is None.
    """
    import numpy as np
    import pandas as pd
    from scipy import sparse

    if isinstance(value, str | bytes):
        return len(value) + _OBJECT_BYTES
    if value is None or isinstance(value, bool | int | float | complex | np.generic):
        return _OBJECT_BYTES
    if isinstance(value, np.ndarray):  # objects (strings) at a guess: counting them would be a loop over them
        return int(value.nbytes) + (_OBJECT_BYTES * value.size if value.dtype.hasobject else 0)
    if sparse.issparse(value):
        arrays = [getattr(value, name, None) for name in ("data", "indices", "indptr", "row", "col", "offsets")]
        return sum(int(a.nbytes) for a in arrays if isinstance(a, np.ndarray))
    if isinstance(value, pd.DataFrame):
        return sum(_column_bytes(column) for _, column in value.items()) + _column_bytes(value.index)
    if isinstance(value, pd.Series | pd.Index):
        return _column_bytes(value)
    if isinstance(value, Mapping):
        return _objects_bytes(list(value.values()))
    if isinstance(value, list | tuple):
        return _objects_bytes(list(value))
    import anndata as ad

    if isinstance(value, ad.Raw):
        parts = [element_bytes(value.X), element_bytes(value.var)]
        return None if None in parts else sum(p for p in parts if p is not None)
    return None


def _column_bytes(column: Any) -> int:
    """A pandas column's or index's bytes: objects (strings) at a guess, not one by one (``deep=True`` is a loop)."""
    objects = len(column) if column.dtype == object else 0
    return int(column.memory_usage(deep=False)) + _OBJECT_BYTES * objects


def _objects_bytes(values: list[Any]) -> int | None:
    total = 0
    for value in values:
        size = element_bytes(value)
        if size is None:
            return None
        total += size
    return total


class BatchBudget:
    """Which elements go through memory: those of known size, while the budget lasts, in the order asked."""

    def __init__(self, limit: int | None = None) -> None:
        self.left = BATCH_BYTES if limit is None else limit

    def takes(self, value: Any) -> bool:
        """Whether ``value`` is written into memory (its bytes then count against the budget)."""
        size = element_bytes(value)
        if size is None or size > self.left:
            return False
        self.left -= size
        return True


def store_objects(store: BaseStore, prefix: str, objects: Mapping[str, Any]) -> None:
    """Write every object of a memory store (``{key: zarr buffer}``) at ``prefix/key`` in ``store``.

    One :meth:`~deltacells.storage.BaseStore.write_many`: concurrent requests to an object store, the files one
    after the other on a local disk (each directory made once). Returns once all are stored.

    Raises
    ------
    Exception
        The first write that failed (naming its object).
    """
    store.write_many({f"{prefix}/{key}": buffer.to_bytes() for key, buffer in sorted(objects.items())})
