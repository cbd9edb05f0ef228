"""AnnData and scanpy integration: read_deltacells, write_deltacells, and the lazy X.

The names load their modules (and anndata) on first use, so that importing the package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells._lazy import lazy_names

if TYPE_CHECKING:
    from deltacells.io._lazy import TiledCSRDataset
    from deltacells.io._read import read_deltacells, read_obs, read_var, restore_gene_order
    from deltacells.io._write import write_deltacells

_LAZY = {
    "TiledCSRDataset": "deltacells.io._lazy",
    "read_deltacells": "deltacells.io._read",
    "read_obs": "deltacells.io._read",
    "read_var": "deltacells.io._read",
    "restore_gene_order": "deltacells.io._read",
    "write_deltacells": "deltacells.io._write",
}

__all__ = ["TiledCSRDataset", "read_deltacells", "read_obs", "read_var", "restore_gene_order", "write_deltacells"]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
