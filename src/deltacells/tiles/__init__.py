"""Tiles: count blocks checked and encoded into stored tiles; stored tiles fetched, checked and decoded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells._lazy import lazy_names
from deltacells.tiles._cache import CACHE_POLICIES, TileCache
from deltacells.tiles._counts import column_totals, to_count_csr
from deltacells.tiles._gathering import (
    drop_dropped_columns,
    gather_rows,
    gather_rows_mapped,
    gather_rows_split,
    sort_output_rows,
)
from deltacells.tiles._into import DIRECT_DTYPES
from deltacells.tiles._reader import DEFAULT_TILE_CACHE_BYTES, TileReader
from deltacells.tiles._writer import (
    DEFAULT_LEVEL,
    DEFAULT_N_CHUNKS,
    DEFAULT_TILE_SIZE,
    TileList,
    TileWriter,
    check_tile_settings,
    permute_columns,
)

if TYPE_CHECKING:
    from deltacells.tiles._chunk_layout import kept_chunk_starts, read_chunk_starts
    from deltacells.tiles._chunk_rows import SplitOutputs, read_rows_by_chunk

__all__ = [
    "CACHE_POLICIES",
    "DEFAULT_LEVEL",
    "DEFAULT_N_CHUNKS",
    "DEFAULT_TILE_CACHE_BYTES",
    "DEFAULT_TILE_SIZE",
    "TileCache",
    "TileList",
    "TileReader",
    "TileWriter",
    "check_tile_settings",
    "drop_dropped_columns",
    "gather_rows",
    "gather_rows_mapped",
    "gather_rows_split",
    "sort_output_rows",
    "to_count_csr",
    # for the writers above: a block's columns in stored order, its column totals
    "column_totals",
    "permute_columns",
    # for datasets' reads: the dtypes decoded straight into an output; reads chunk by chunk (the loader's)
    "DIRECT_DTYPES",
    "SplitOutputs",
    "kept_chunk_starts",
    "read_chunk_starts",
    "read_rows_by_chunk",
]

#: Names whose modules importing the package does not load (reads chunk by chunk, for the training loader):
#: they load on first use.
_LAZY = {
    "SplitOutputs": "deltacells.tiles._chunk_rows",
    "read_rows_by_chunk": "deltacells.tiles._chunk_rows",
    "kept_chunk_starts": "deltacells.tiles._chunk_layout",
    "read_chunk_starts": "deltacells.tiles._chunk_layout",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
