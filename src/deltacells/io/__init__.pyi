# deltacells.io's public names, each from the module it lives in: the one list of them
# (lazy_loader reads it at run time, type checkers in place of __init__.py).

from ._lazy import TiledCSRDataset as TiledCSRDataset
from ._read import (
    read_deltacells as read_deltacells,
    read_obs as read_obs,
    read_var as read_var,
    restore_gene_order as restore_gene_order,
)
from ._write import write_deltacells as write_deltacells

# what a loader needs of an AnnData read_deltacells made: its matrix of counts, what it was read with, its view
from ._assemble import counts_of as counts_of
from ._lazy import read_options_of as read_options_of
from ._read_options import ReadOptions as ReadOptions
from ._sources import view_parts as view_parts

# several datasets opened as one AnnData
from ._collection import open_collection as open_collection

# the AnnData's other elements (anndata.zarr), for info and validate
from ._extras import open_extras as open_extras, stored_bytes as stored_bytes, stored_shape as stored_shape
