"""A dataset's obs and var as pandas frames: the gene table in either gene order, obs columns from the cache."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from deltacells._checks import check_names
from deltacells.errors import UnknownKeyError
from deltacells.format import obs_names_unique
from deltacells.io._names import default_names
from deltacells.io._var_frame import string_values, var_frame

if TYPE_CHECKING:
    import pyarrow as pa

    from deltacells.core import Dataset

__all__ = [
    "default_names_of",
    "column_order",
    "in_column_order",
    "names_known_unique",
    "obs_store_and_columns",
    "read_gene_keys",
    "read_obs_frame",
    "read_var",
    "without_validity",
]


def read_var(dataset: Dataset, rows: np.ndarray | None = None) -> pd.DataFrame:
    """The gene table: ``var.parquet`` (index kept), else ``var_names.txt``, else ``"0" .. "n-1"``.

    ``rows`` (stored gene numbers, e.g. :func:`column_order`'s) picks and orders the genes, before the table
    becomes pandas': under pandas 3 a ``str`` column taken in another order carries a validity bitmap that
    anndata's readers never make (a byte in ``AnnData.__sizeof__`` for every 8 genes).
    """
    table = dataset.var_table()
    if table is not None:
        var = var_frame(table if rows is None else without_validity(table.take(rows)))
        if not isinstance(var.index, pd.RangeIndex) or var.index.name is not None:
            var.index = var.index.astype(str)
        else:
            var.index = pd.Index(_names(dataset, rows))
        return var
    return pd.DataFrame(index=pd.Index(_names(dataset, rows)))


def without_validity(table: pa.Table) -> pa.Table:
    """``table`` with the validity bitmaps of columns without nulls dropped (those Arrow's ``take`` adds).

    Only flat columns (numbers, booleans, strings): their first buffer is the bitmap, and an array built
    without it is the same array.
    """
    import pyarrow as pa

    columns = []
    for column in table.columns:
        kind = column.type
        flat = pa.types.is_primitive(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
        if not flat or column.null_count:
            columns.append(column)
            continue
        chunks = [
            pa.Array.from_buffers(kind, len(chunk), [None, *chunk.buffers()[1:]], null_count=0, offset=chunk.offset)
            for chunk in column.chunks
        ]
        columns.append(pa.chunked_array(chunks, type=kind))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _names(dataset: Dataset, rows: np.ndarray | None) -> list[str] | np.ndarray:
    """``var_names.txt`` (``"0" .. "n-1"`` without it), its lines ``rows`` only, in that order."""
    names = dataset.var_names()
    if names is None:
        names = [str(i) for i in range(dataset.n_genes)]
    return names if rows is None else np.asarray(names, dtype=object)[rows]


def column_order(dataset: Dataset) -> np.ndarray | None:
    """The stored gene of each of the dataset's columns when it reads the genes in their original order, else None."""
    order = dataset.gene_permutation() if dataset.gene_order == "original" else None
    if order is None:
        return None
    stored_of = np.empty_like(order)  # the inverse permutation, without a sort
    stored_of[order] = np.arange(order.shape[0], dtype=order.dtype)
    return stored_of


def read_gene_keys(dataset: Dataset, var_key: str | None, *, table: pa.Table | None = None) -> pd.Index | None:
    """The var names (``var_key=None``) or var column ``var_key``'s values as strings, in stored order.

    What ``read_var(dataset)`` gives (its index, or the column as ``str``), read from that column alone when it
    is one of strings (building the whole frame costs milliseconds a dataset, which a collection of thousands
    pays at open); None if var has no column ``var_key``. ``table``: the gene table when it was read already
    (a collection fetches them all at once), else it is read.
    """
    if table is None:
        table = dataset.var_table()
    values = None if table is None else string_values(table, var_key)
    if values is not None:
        stored: pd.Index = pd.Index(values)
        return stored
    var = read_var(dataset)
    if var_key is None:
        names: pd.Index = pd.Index(var.index.astype(str))
        return names
    if var_key not in var.columns:
        return None
    return pd.Index(var[var_key].astype(str).to_numpy())


def default_names_of(n: int) -> pd.Index:
    """``"0" .. "n-1"`` as anndata names cells by default, built without a Python loop."""
    return default_names(np.arange(n, dtype=np.int64))


def obs_store_and_columns(
    dataset: Dataset, columns: Sequence[str] | None, *, cache_dir: Any, verify: bool
) -> tuple[Any, list[str]]:
    """The dataset's :class:`~deltacells.obs.ObsStore` (``None`` without obs) and the columns asked for, checked."""
    if columns is not None:
        check_names("obs_columns", columns, of="column names")
    if not dataset.manifest.has_obs:
        if columns:
            msg = f"{dataset.store.url} has no obs table; cannot read columns {list(columns)}"
            raise UnknownKeyError(msg)
        return None, []
    from deltacells.obs import ObsStore

    obs_store = ObsStore(dataset.store, dataset.manifest, cache_dir=cache_dir, verify=verify)
    available = list(obs_store.columns)
    if columns is None:
        return obs_store, available
    wanted = list(columns)
    missing = [c for c in wanted if c not in available]
    if missing:
        msg = f"obs column(s) {missing} are not in {dataset.store.url}; it has {available}"
        raise UnknownKeyError(msg)
    return obs_store, wanted


def read_obs_frame(
    dataset: Dataset,
    columns: Sequence[str] | None,
    *,
    obs_names: bool,
    cache_dir: str | os.PathLike[str] | None,
    verify: bool,
) -> pd.DataFrame:
    """A dataset's obs columns ``columns`` (None: all) as a pandas frame, from the local cache.

    Its index is the stored cell names with ``obs_names`` (and when there are some), else ``"0" .. "n-1"``.
    """
    n_cells = dataset.n_cells
    if columns is not None and len(columns) == 0 and not obs_names and not isinstance(columns, str):
        return pd.DataFrame(index=default_names_of(n_cells))
    obs_store, wanted = obs_store_and_columns(dataset, columns, cache_dir=cache_dir, verify=verify)
    if obs_store is None or (not wanted and not obs_names):
        return pd.DataFrame(index=default_names_of(n_cells))
    frame: pd.DataFrame = obs_store.to_dataframe(wanted)
    if not obs_names:
        frame.index = default_names_of(n_cells)
    return frame


def names_known_unique(dataset: Dataset, *, obs_names: bool, var: pd.DataFrame | None) -> bool:
    """Whether the obs names :func:`read_obs_frame` gives and the var names are known to be unique, unchecked.

    The obs names are ``"0" .. "n-1"`` (``obs_names=False``, or a dataset without obs), or the stored names
    when the writer found them unique (:func:`deltacells.format.obs_names_unique`); the var names (``None``:
    anndata's default ones) are checked here, where they are few. Then anndata need not hash every obs name
    again to find what is known (``anndata.settings.check_uniqueness``); otherwise it checks, and warns, as
    for any AnnData.
    """
    manifest = dataset.manifest
    obs_unique = not obs_names or not manifest.has_obs or obs_names_unique(manifest.metadata)
    # On a throwaway index: ``var.index.is_unique`` would leave a hash table in the cache of the index the
    # user gets, which anndata's own readers do not (it counts in ``AnnData.__sizeof__``).
    return obs_unique and (var is None or bool(pd.Index(var.index.array).is_unique))


def in_column_order(var: pd.DataFrame, dataset: Dataset) -> pd.DataFrame:
    """``var`` (stored order) in the order of the dataset's columns (the original order, if it reads in it)."""
    rows = column_order(dataset)
    return var if rows is None else var.iloc[rows]
