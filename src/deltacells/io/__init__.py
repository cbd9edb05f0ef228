"""AnnData and scanpy integration: read_deltacells, write_deltacells, and the lazy X.

The names load their modules (and anndata) on first use, so that importing the package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells._lazy import lazy_names

if TYPE_CHECKING:
    from deltacells.io._assemble import counts_of
    from deltacells.io._collection import open_collection
    from deltacells.io._extras import open_extras, stored_bytes, stored_shape
    from deltacells.io._lazy import TiledCSRDataset, read_options_of
    from deltacells.io._read import read_deltacells, read_obs, read_var, restore_gene_order
    from deltacells.io._read_options import ReadOptions
    from deltacells.io._sources import view_parts
    from deltacells.io._write import write_deltacells

_LAZY = {
    "TiledCSRDataset": "deltacells.io._lazy",
    "read_deltacells": "deltacells.io._read",
    "read_obs": "deltacells.io._read",
    "read_var": "deltacells.io._read",
    "restore_gene_order": "deltacells.io._read",
    "write_deltacells": "deltacells.io._write",
    "read_options_of": "deltacells.io._lazy",
    "ReadOptions": "deltacells.io._read_options",
    "counts_of": "deltacells.io._assemble",
    "open_collection": "deltacells.io._collection",
    "view_parts": "deltacells.io._sources",
    "open_extras": "deltacells.io._extras",
    "stored_bytes": "deltacells.io._extras",
    "stored_shape": "deltacells.io._extras",
}

__all__ = [
    "TiledCSRDataset",
    "read_deltacells",
    "read_obs",
    "read_var",
    "restore_gene_order",
    "write_deltacells",
    # what a loader needs of an AnnData read_deltacells made: its matrix of counts, what it was read with, its view
    "ReadOptions",
    "read_options_of",
    "counts_of",
    "view_parts",
    # several datasets opened as one AnnData
    "open_collection",
    # the AnnData's other elements (anndata.zarr), for info and validate
    "open_extras",
    "stored_bytes",
    "stored_shape",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
