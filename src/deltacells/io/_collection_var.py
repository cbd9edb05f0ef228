"""A collection's var: the datasets' gene tables merged as :func:`anndata.concat` merges them (``merge=``).

anndata.concat keeps no var column by default (``merge=None``); ``"same"`` keeps the columns whose values are
the same in every dataset, ``"unique"`` those with one value per gene among the datasets that have it,
``"first"`` the first value seen, ``"only"`` the columns of one dataset only. The merge is anndata's own: the
gene tables go through :func:`anndata.concat` as AnnDatas without cells, each indexed by the keys the genes are
joined on (its var names, or its ``var_key`` column), and the result takes the collection's gene order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeAlias

import pandas as pd

from deltacells.errors import InvalidValueError

__all__ = ["MERGES", "Merge", "check_merge", "merged_var"]

#: The strategies of :func:`anndata.concat`'s ``merge`` (``None``: no var column, concat's default).
MERGES = (None, "same", "unique", "first", "only")

#: What ``merge=`` takes: a strategy's name, a function as :func:`anndata.concat` takes, or None.
Merge: TypeAlias = Literal["same", "unique", "first", "only"] | Callable[..., Any] | None


def check_merge(merge: Any) -> Merge:
    """``merge``, if anndata.concat takes it: one of :data:`MERGES`, or a function of the datasets' var columns.

    Raises
    ------
    InvalidValueError
        For anything else, naming the strategies.
    """
    if callable(merge) or merge in MERGES:
        return merge  # type: ignore[no-any-return]
    listed = ", ".join(repr(m) for m in MERGES)
    msg = f"merge must be one of {listed} (as anndata.concat's), or a function as concat takes, got {merge!r}"
    raise InvalidValueError(msg)


def merged_var(
    tables: list[pd.DataFrame] | None, genes: pd.Index, *, join: Literal["inner", "outer"], merge: Merge
) -> pd.DataFrame:
    """The collection's var: the join's ``genes``, with the columns ``merge`` keeps of the datasets' ``tables``.

    Parameters
    ----------
    tables
        Each dataset's gene table, indexed by the keys its genes are joined on (None when ``merge`` is None).
    genes
        The join's genes, in its order: the result's index.
    join, merge
        As :func:`anndata.concat`'s.
    """
    if merge is None or tables is None:
        return pd.DataFrame(index=genes)
    import anndata as ad

    parts = [ad.AnnData(var=table) for table in tables]
    merged = ad.concat(parts, join=join, merge=merge).var
    assert isinstance(merged, pd.DataFrame)  # of in-memory gene tables
    var = merged.reindex(genes)  # the same genes (the join), in the collection's order
    var.index = genes
    return var
