"""deltacells: tiled, delta-coded single-cell count matrices for the scverse ecosystem.

``import deltacells`` also makes ``scanpy.read_deltacells`` and
``anndata.AnnData.write_deltacells`` available (nothing that exists is replaced).
"""

from deltacells.codec import DecodedTile, decode_tile, encode_tile
from deltacells.dataset import Dataset, Manifest, TileWriter, open_dataset
from deltacells.errors import FormatError
from deltacells.io import TiledCSRDataset, read_deltacells, read_obs, restore_gene_order, write_deltacells
from deltacells.io._scverse import attach as _attach

__version__ = "0.1.0"

__all__ = [
    "Dataset",
    "DecodedTile",
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

_attach()
