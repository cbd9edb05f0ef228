"""deltacells: tiled, delta-coded single-cell count matrices for the scverse ecosystem.

``import deltacells`` also makes ``scanpy.read_deltacells`` and ``anndata.AnnData.write_deltacells``
available (nothing that exists is replaced). It imports neither them nor numba: the names below load
their modules on first use, so that ``import deltacells`` and the command line start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells._lazy import lazy_names
from deltacells._version import __version__
from deltacells.errors import DeltaCellsError, FormatError
from deltacells.io._scverse import attach as _attach

if TYPE_CHECKING:
    from deltacells.codec import DecodedTile, decode_tile, encode_tile
    from deltacells.core import Dataset, DatasetWriter, open_dataset
    from deltacells.format import Manifest
    from deltacells.io import TiledCSRDataset, read_deltacells, read_obs, restore_gene_order, write_deltacells
    from deltacells.loader import Batch, CellLoader
    from deltacells.tiles import TileWriter

#: Where each public name lives; its module is imported when the name is first used.
_LAZY = {
    "DecodedTile": "deltacells.codec",
    "decode_tile": "deltacells.codec",
    "encode_tile": "deltacells.codec",
    "Dataset": "deltacells.core",
    "DatasetWriter": "deltacells.core",
    "open_dataset": "deltacells.core",
    "Manifest": "deltacells.format",
    "TileWriter": "deltacells.tiles",
    "TiledCSRDataset": "deltacells.io",
    "read_deltacells": "deltacells.io",
    "read_obs": "deltacells.io",
    "restore_gene_order": "deltacells.io",
    "write_deltacells": "deltacells.io",
    "Batch": "deltacells.loader",
    "CellLoader": "deltacells.loader",
}

__all__ = [
    "Batch",
    "CellLoader",
    "Dataset",
    "DatasetWriter",
    "DecodedTile",
    "DeltaCellsError",
    "FormatError",
    "Manifest",
    "TileWriter",
    "TiledCSRDataset",
    "__version__",
    "decode_tile",
    "encode_tile",
    "open_dataset",
    "read_deltacells",
    "read_obs",
    "restore_gene_order",
    "write_deltacells",
]


#: The names whose first use means cells are about to be read: numba's kernels start loading in the background
#: then, while their module (and anndata) is imported (see ``deltacells._kernel_loading``).
_READING = frozenset({"CellLoader", "Dataset", "TiledCSRDataset", "decode_tile", "open_dataset", "read_deltacells"})


def _before_import(name: str) -> None:
    if name in _READING:
        from deltacells._kernel_loading import prepare_kernels

        prepare_kernels()


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), _before_import)


_attach()
