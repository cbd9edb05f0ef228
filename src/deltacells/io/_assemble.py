"""The AnnData ``read_deltacells`` gives: the tiles' matrix where it came from, and the rest of what was written.

The tiles' matrix goes back where the AnnData held it (X, a layer, or raw.X: ``anndata.zarr``'s entry says),
and the elements of ``anndata.zarr`` (:mod:`deltacells.io._extras`) around it. A dataset without them (or
read with ``extras=False``) gives ``X`` = the tiles, obs and var.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltacells.errors import InvalidTypeError
from deltacells.format import MAPPINGS, extras_of, first_problem_raises
from deltacells.io._extras import read_extras, reorder_genes

if TYPE_CHECKING:
    import anndata as ad
    import pandas as pd

    from deltacells.core import Dataset

__all__ = ["anndata_parts", "counts_location", "counts_of"]


def anndata_parts(dataset: Dataset, counts: Any, var: pd.DataFrame, *, extras: bool) -> tuple[dict[str, Any], Any]:
    """The keyword arguments of ``AnnData`` (all but obs) and its raw (or ``None``), around ``counts``.

    Parameters
    ----------
    dataset
        The dataset, in the gene order it is read in.
    counts
        The tiles' matrix: the lazy X or a dask array.
    var
        The dataset's genes (``var.parquet``), in that order.
    extras
        Read ``anndata.zarr`` when the manifest names it.
    """
    entry = first_problem_raises(extras_of(dataset.manifest.metadata), dataset.store.url) if extras else None
    if entry is None:
        return {"X": counts, "var": var}, None
    import anndata as ad

    elements = read_extras(dataset.store, entry)
    order = dataset.gene_order() if dataset.gene_order_mode == "stored" else None
    if order is not None:  # written in the original gene order: put it in the tiles'
        elements = reorder_genes(elements, entry, order)
    parts: dict[str, Any] = {
        mapping: {key: elements[f"{mapping}/{key}"] for key in entry.keys(mapping)} for mapping in MAPPINGS
    }
    parts["uns"] = dict(elements.get("uns", {}))
    raw = elements.get("raw")
    if entry.counts == "X":
        parts.update(X=counts, var=var)
    elif entry.counts_layer is not None:
        parts.update(X=elements.get("X"), var=var)
        parts["layers"] = {entry.counts_layer: counts, **parts["layers"]}
    else:  # the tiles hold raw.X, with raw's genes
        parts.update(X=elements.get("X"), var=elements["var"])
        raw = ad.AnnData(X=counts, var=var)
    return parts, raw


def counts_location(dataset: Dataset, *, extras: bool) -> str:
    """Where :func:`anndata_parts` puts the tiles' matrix: ``"X"``, ``"raw"`` or ``"layers/<name>"``."""
    entry = first_problem_raises(extras_of(dataset.manifest.metadata), dataset.store.url) if extras else None
    return "X" if entry is None else entry.counts


def counts_of(adata: ad.AnnData) -> Any:
    """The tiles' matrix of an AnnData from ``read_deltacells`` (a lazy X or a dask array): in X, a layer or raw.

    Raises
    ------
    InvalidTypeError
        If none of them is a dataset's matrix.
    """
    from deltacells.io._dask import source_of
    from deltacells.io._lazy import TiledCSRDataset

    candidates = [adata.X, *(value for key, value in adata.layers.items() if key is not None)]
    if adata.raw is not None:
        candidates.append(adata.raw.X)
    for matrix in candidates:
        if isinstance(matrix, TiledCSRDataset) or (matrix is not None and source_of(matrix) is not None):
            return matrix
    msg = "this AnnData was not read with deltacells.read_deltacells (no X, layer or raw.X is a dataset's matrix)"
    raise InvalidTypeError(msg)
