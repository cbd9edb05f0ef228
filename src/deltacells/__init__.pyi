# deltacells's public names, each from the module it lives in: the one list of them
# (lazy_loader reads it at run time, type checkers in place of __init__.py).

from ._version import __version__ as __version__
from .codec import DecodedTile as DecodedTile, decode_tile as decode_tile, encode_tile as encode_tile
from .core import Dataset as Dataset, DatasetWriter as DatasetWriter, open_dataset as open_dataset
from .errors import DeltaCellsError as DeltaCellsError, FormatError as FormatError
from .format import Manifest as Manifest
from .io import (
    TiledCSRDataset as TiledCSRDataset,
    read_deltacells as read_deltacells,
    read_obs as read_obs,
    restore_gene_order as restore_gene_order,
    write_deltacells as write_deltacells,
)
from .loader import Batch as Batch, CellLoader as CellLoader
from .tiles import TileWriter as TileWriter
