"""Teaching anndata about :class:`TiledCSRDataset`: its writers stream it, ``to_memory`` loads it.

anndata dispatches writing and ``AnnData.to_memory`` on the type of ``X`` through
registries that have no public extension point yet, so this module registers there.
It is the only place in deltacells that touches anndata's private modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from scipy import sparse

from deltacells.io._lazy import TiledCSRDataset

_registered = False


def register_anndata_io() -> None:
    """Register the writer and ``to_memory`` handlers for :class:`TiledCSRDataset` (idempotent)."""
    global _registered
    if _registered:
        return
    import h5py
    import zarr
    from anndata._core.file_backing import to_memory
    from anndata._io.specs import IOSpec
    from anndata._io.specs.registry import _REGISTRY

    spec = IOSpec("csr_matrix", "0.1.0")
    for group_type in (h5py.Group, zarr.Group):
        _REGISTRY.register_write(group_type, TiledCSRDataset, spec)(write_tiled_csr)
    to_memory.register(TiledCSRDataset)(_to_memory)
    _registered = True


def _to_memory(x: TiledCSRDataset, *, copy: bool = False) -> sparse.csr_matrix:
    return x.to_memory()


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
    """
    import anndata

    blocks = elem.iter_row_blocks()
    first = next(blocks, None)
    if first is None:
        _writer.write_elem(f, k, sparse.csr_matrix(elem.shape, dtype=elem.dtype), dataset_kwargs=dataset_kwargs)
        return
    _writer.write_elem(f, k, first[1], dataset_kwargs=dataset_kwargs)
    on_disk = anndata.io.sparse_dataset(f[k])
    for _, block in blocks:
        on_disk.append(block)
