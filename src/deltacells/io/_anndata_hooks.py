"""Teaching anndata about :class:`TiledCSRDataset`: its writers stream it, ``to_memory`` loads it.

anndata dispatches writing and ``AnnData.to_memory`` on the type of ``X`` through registries that have no
public extension point yet, so this module registers there, through :mod:`deltacells._internals` (which lists
every internal of anndata that deltacells uses, with the versions tested).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

from deltacells import _internals
from deltacells.io._dask_blocks import CSRArrayBlock, CSRMatrixBlock
from deltacells.io._lazy import TiledCSRDataset
from deltacells.io._lazy_obs import LazyObs

_registered = False

#: anndata's encoding of a CSR matrix, the one the writers below write.
CSR_ENCODING = ("csr_matrix", "0.1.0")


def register_anndata_io() -> None:
    """Register the writer and ``to_memory`` handlers for :class:`TiledCSRDataset` (idempotent)."""
    global _registered
    if _registered:
        return
    import h5py
    import zarr

    groups = (h5py.Group, zarr.Group)
    _internals.register_anndata_writer(groups, TiledCSRDataset, CSR_ENCODING, write_tiled_csr)
    for block_class in (CSRMatrixBlock, CSRArrayBlock):  # anndata looks writers up by exact type
        _internals.register_anndata_writer(groups, block_class, CSR_ENCODING, _write_dask_block)
        for dask_type in _dask_array_classes():
            _internals.register_anndata_writer(groups, (dask_type, block_class), CSR_ENCODING, _write_dask_of_blocks)
    _internals.register_to_memory(TiledCSRDataset, _to_memory)
    # A view of an AnnData drops the categories its cells do not have, and their colours in uns.
    _internals.register_remove_unused_categories(LazyObs, _remove_unused_categories)
    # anndata.utils.asarray densifies anndata's own backed datasets (np.asarray refuses to).
    _internals.register_asarray(TiledCSRDataset, _asarray)
    _registered = True


def _dask_array_classes() -> tuple[type, ...]:
    """A dask X's classes: dask's array, and anndata's for a view's dask X (none without dask)."""
    try:
        import dask.array as da
    except ImportError:  # no dask X can be written without dask
        return ()
    return (da.Array, _internals.anndata_dask_view_class())


def _write_dask_block(
    f: Any, k: str, elem: CSRMatrixBlock | CSRArrayBlock, *, _writer: Any, dataset_kwargs: Mapping[str, Any]
) -> None:
    """Write a dask X's block (or several stacked) as the scipy matrix it is, with anndata's own writer."""
    base = sparse.csr_array if isinstance(elem, sparse.csr_array) else sparse.csr_matrix
    _writer.write_elem(f, k, base(elem), dataset_kwargs=dataset_kwargs)


def _write_dask_of_blocks(f: Any, k: str, elem: Any, *, _writer: Any, dataset_kwargs: Mapping[str, Any]) -> None:
    """Write a dask X of such blocks with anndata's own writer of dask arrays of ``csr_matrix`` blocks.

    ``csr_array`` blocks are written as ``csr_matrix`` ones: the same encoding on disk, which anndata 0.12 writes
    only from ``csr_matrix`` blocks.
    """
    plain = elem.map_blocks(sparse.csr_matrix, dtype=elem.dtype, meta=sparse.csr_matrix((0, 0), dtype=elem.dtype))
    _writer.write_elem(f, k, plain, dataset_kwargs=dataset_kwargs)


def _remove_unused_categories(full: LazyObs, subset: LazyObs, uns: dict[str, Any]) -> None:
    """Anndata's ``_remove_unused_categories`` for a lazy obs: the view's columns drop them when read.

    As anndata does for a pandas obs, the colours of a categorical column (``uns[f"{column}_colors"]``) are
    cut to the categories the view has, which reads that column's codes for the view's cells (and nothing else:
    not the names of its cells, which making a view never reads).
    """
    subset.drop_unused_categories()
    for column in full.columns:
        colors = uns.get(f"{column}_colors")
        dtype = full.dtypes[column]
        if colors is None or not isinstance(dtype, pd.CategoricalDtype):
            continue
        if np.ndim(colors) == 0:
            uns[f"{column}_colors"] = np.asarray(colors)[None]
        elif len(colors) != len(dtype.categories):
            del uns[f"{column}_colors"]
        else:
            kept = np.isin(dtype.categories, subset.column_dtype(column).categories)
            uns[f"{column}_colors"] = np.asarray(colors)[np.flatnonzero(kept)]


def _to_memory(x: TiledCSRDataset, *, copy: bool = False) -> sparse.csr_matrix | sparse.csr_array:
    return x.to_memory()


def _asarray(x: TiledCSRDataset) -> np.ndarray:
    return x.to_memory().toarray()


#: Bytes of dense rows written at once by ``as_dense``.
DENSE_BLOCK_BYTES = 64 * 2**20


def write_tiled_csr(
    f: Any,
    k: str,
    elem: TiledCSRDataset,
    *,
    _writer: Any,
    dataset_kwargs: Mapping[str, Any] = MappingProxyType({}),
) -> None:
    """Write a :class:`TiledCSRDataset` as an anndata ``csr_matrix``, one tile at a time.

    The first block creates the group (through anndata's own writer, so the
    encoding and on-disk layout are anndata's); the others are appended to it.
    When ``write_h5ad`` was asked for this element with ``as_dense``, it is written
    as a dense ``array`` instead (anndata does that itself for its own sparse classes only: deltacells notes
    ``as_dense`` as ``anndata.io.write_h5ad`` is called, :func:`deltacells._internals.h5ad_dense_requested`).
    """
    import anndata

    if _internals.h5ad_dense_requested(f, k):
        _write_dense(f, k, elem, dataset_kwargs=dataset_kwargs)
        return
    blocks = elem.iter_row_blocks()
    first = next(blocks, None)
    if first is None:
        _writer.write_elem(f, k, sparse.csr_matrix(elem.shape, dtype=elem.dtype), dataset_kwargs=dataset_kwargs)
        return
    _writer.write_elem(f, k, first[1], dataset_kwargs=dataset_kwargs)
    on_disk = anndata.io.sparse_dataset(f[k])
    for _, block in blocks:
        on_disk.append(block)  # type: ignore[union-attr]  # anndata's abstract sparse datasets leave out append


def _write_dense(
    f: Any, k: str, elem: TiledCSRDataset, *, dataset_kwargs: Mapping[str, Any] = MappingProxyType({})
) -> None:
    """Write ``elem`` as anndata's dense ``array`` encoding, a few rows at a time (as anndata's ``as_dense``)."""
    n_genes = elem.shape[1]
    if k in f:
        del f[k]
    dset = f.create_dataset(k, shape=elem.shape, dtype=elem.dtype, **dict(dataset_kwargs))
    step = max(1, DENSE_BLOCK_BYTES // max(1, n_genes * elem.dtype.itemsize))
    for rows, block in elem.iter_row_blocks():
        assert isinstance(rows, slice)  # all rows: slices of them
        start = rows.start
        for lo in range(0, block.shape[0], step):
            part = block[lo : lo + step]
            dset[start + lo : start + lo + part.shape[0]] = part.toarray()
    dset.attrs["encoding-type"] = "array"
    dset.attrs["encoding-version"] = "0.2.0"
