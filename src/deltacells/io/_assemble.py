"""The AnnData ``read_deltacells`` gives: the tiles' matrix where it came from, and the rest of what was written.

The tiles' matrix goes back where the AnnData held it (X, a layer, or raw.X: ``anndata.zarr``'s entry says),
and the elements of ``anndata.zarr`` (:mod:`deltacells.io._extras`) around it. A dataset without them (or
read with ``extras=False``) gives ``X`` = the tiles, obs and var.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltacells.errors import InvalidTypeError
from deltacells.format import EXTRAS_FORMAT, MAPPINGS, extras_of, first_problem_raises
from deltacells.io._extras import read_extras, reorder_genes, without_bookkeeping

if TYPE_CHECKING:
    import anndata as ad
    import pandas as pd

    from deltacells.core import Dataset

__all__ = ["anndata_parts", "counts_location_in", "counts_of", "obsm_frames_named"]


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
    order = dataset.gene_permutation() if dataset.gene_order == "stored" else None
    if order is not None:  # written in the original gene order: put it in the tiles'
        elements = reorder_genes(elements, entry, order)
    parts: dict[str, Any] = {
        mapping: {key: elements[f"{mapping}/{key}"] for key in entry.keys(mapping)} for mapping in MAPPINGS
    }
    parts["uns"] = without_bookkeeping(elements.get("uns", {}))  # written from an AnnData an older version read
    raw = elements.get("raw")
    if entry.counts == "X":
        parts.update(X=counts, var=var)
    elif entry.counts_layer is not None:
        parts.update(X=elements.get("X"), var=var)
        parts["layers"] = {entry.counts_layer: counts, **parts["layers"]}
    else:  # the tiles hold raw.X, with raw's genes
        parts.update(X=elements.get("X"), var=elements["var"])
        raw = ad.AnnData(X=counts, var=var, varm={key: elements[f"raw/varm/{key}"] for key in entry.raw_varm_keys})
    return parts, raw


def counts_location_in(adata: ad.AnnData, counts: Any) -> str:
    """Where the tiles' matrix ``counts`` (:func:`counts_of`) is in ``adata``: ``"X"``, ``"raw"``, ``"layers/<k>"``."""
    if adata.X is counts:
        return "X"
    for key, value in adata.layers.items():
        if key is not None and value is counts:  # anndata 0.13 lists X among the layers, as None
            return f"layers/{key}"
    return "raw"


def obsm_frames_named(obsm: dict[str, Any], names: pd.Index | None, *, lazy: bool) -> dict[str, Any]:
    """``obsm`` with its data frames indexed by ``names`` (``None``: as stored), lazy ones too with ``lazy``.

    A data frame of obsm is indexed by the cells' names: the names the AnnData written had, as ``anndata.zarr``
    holds them, which a read with ``obs_names=False`` replaces (``"0" .. "n-1"``). With a lazy obs, whose names are
    cell numbers until the cells are brought into memory, each frame is made lazy (anndata's ``Dataset2D``, as
    :func:`anndata.experimental.read_lazy` gives it: anndata checks only in-memory frames against the names),
    so that ``adata[cells].to_memory()`` gives the cells' frame rows under the names their obs gets.
    """
    import pandas as pd
    from anndata.experimental.backed import Dataset2D

    named: dict[str, Any] = {}
    for key, value in obsm.items():
        if isinstance(value, pd.DataFrame):
            if names is not None and not value.index.equals(names):
                value = value.set_axis(names)
            if lazy:
                value = _lazy_frame(value)
        elif isinstance(value, Dataset2D) and names is not None:
            value.index = names  # a large frame, read lazily already: a new index for it (an xarray coordinate)
        named[key] = value
    return named


def _lazy_frame(frame: pd.DataFrame) -> Any:
    """``frame`` as anndata's lazy reader gives a data frame (a ``Dataset2D``): written to memory, read lazily."""
    import anndata as ad
    import zarr

    group = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=EXTRAS_FORMAT)
    ad.io.write_elem(group, "frame", frame)
    return ad.experimental.read_elem_lazy(group["frame"])


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
