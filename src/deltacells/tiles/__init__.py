"""Tiles: count blocks checked and encoded into stored tiles; stored tiles fetched, checked and decoded."""

from __future__ import annotations

from deltacells.tiles._cache import CACHE_POLICIES, TileCache
from deltacells.tiles._counts import to_count_csr
from deltacells.tiles._gathering import (
    drop_dropped_columns,
    gather_rows,
    gather_rows_mapped,
    gather_rows_split,
    sort_output_rows,
)
from deltacells.tiles._reader import DEFAULT_TILE_CACHE_BYTES, TileReader
from deltacells.tiles._writer import (
    DEFAULT_LEVEL,
    DEFAULT_N_CHUNKS,
    DEFAULT_TILE_SIZE,
    TileList,
    TileWriter,
    check_tile_settings,
)

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
]
