# deltacells.loader's public names, each from the module it lives in: the one list of them
# (lazy_loader reads it at run time, type checkers in place of __init__.py).

from ._loader import Batch as Batch, CellLoader as CellLoader
from ._output import OUTPUTS as OUTPUTS

# they need torch: out of __all__ (see __init__.py)
from ._torch import CellDataset as CellDataset, CellDataLoader as CellDataLoader
