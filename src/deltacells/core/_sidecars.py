"""Reading the optional files beside the tiles, each checked by the format's rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells.errors import MissingObjectError
from deltacells.format import (
    GENE_ORDER_NAME,
    VAR_NAMES_NAME,
    VAR_TABLE_NAME,
    check_gene_order,
    check_var_names,
    check_var_table,
    first_problem_raises,
    missing_promised,
)

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from deltacells.format import Manifest
    from deltacells.storage import BaseStore

__all__ = ["read_gene_order", "read_var_names", "read_var_table"]


def read_gene_order(store: BaseStore, manifest: Manifest) -> np.ndarray | None:
    """``gene_order.npy`` as ``int32[n_genes]``, or None when the manifest says there is none."""
    if not manifest.has_gene_order:
        return None
    return first_problem_raises(check_gene_order(_read_promised(store, GENE_ORDER_NAME), manifest.n_genes), store.url)


def read_var_names(store: BaseStore, manifest: Manifest) -> list[str] | None:
    """``var_names.txt`` as a list of names, or None when the manifest says there is none."""
    if not manifest.has_var_names:
        return None
    return first_problem_raises(check_var_names(_read_promised(store, VAR_NAMES_NAME), manifest.n_genes), store.url)


def read_var_table(store: BaseStore, manifest: Manifest) -> pa.Table | None:
    """``var.parquet`` as an Arrow table, or None when the manifest says there is none."""
    if not manifest.has_var_table:
        return None
    return first_problem_raises(check_var_table(_read_promised(store, VAR_TABLE_NAME), manifest.n_genes), store.url)


def _read_promised(store: BaseStore, name: str) -> bytes:
    """Object ``name``, which the manifest promises: its absence is reported as validation reports it."""
    try:
        return store.read(name)
    except MissingObjectError as exc:
        raise missing_promised(name).to_exception(store.url) from exc
