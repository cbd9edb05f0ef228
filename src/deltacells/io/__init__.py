"""AnnData and scanpy integration: read_deltacells, write_deltacells, and the lazy X."""

from deltacells.io._lazy import TiledCSRDataset
from deltacells.io._read import read_deltacells, read_obs, read_var, restore_gene_order
from deltacells.io._write import write_deltacells

__all__ = ["TiledCSRDataset", "read_deltacells", "read_obs", "read_var", "restore_gene_order", "write_deltacells"]
