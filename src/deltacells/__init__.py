"""deltacells: tiled, delta-coded single-cell count matrices for the scverse ecosystem."""

from deltacells.codec import DecodedTile, decode_tile, encode_tile
from deltacells.dataset import Dataset, Manifest, TileWriter, open_dataset
from deltacells.errors import FormatError

__version__ = "0.1.0"

__all__ = [
    "Dataset",
    "DecodedTile",
    "FormatError",
    "Manifest",
    "TileWriter",
    "__version__",
    "decode_tile",
    "encode_tile",
    "open_dataset",
]
