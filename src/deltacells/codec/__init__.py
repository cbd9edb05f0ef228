"""The tile codec: one tile's bytes to CSR arrays and back (docs/format.md, "A tile")."""

from deltacells.codec._decode import (
    WORK_UNIT_NNZ,
    CheckedTile,
    DecodedTile,
    check_tile_bytes,
    decode_tile,
    decode_tiles,
    work_units,
)
from deltacells.codec._encode import (
    ARCHIVE_LEVEL,
    DEFAULT_LEVEL,
    DEFAULT_N_CHUNKS,
    Level,
    chunk_boundaries,
    encode_tile,
    resolve_level,
)
from deltacells.codec._engine import read_only, sort_rows
from deltacells.codec._layout import (
    CELL_HI,
    CELL_LO,
    CHUNK_ENTRY_SIZE,
    HEADER_SIZE,
    NNZ_HI,
    NNZ_LO,
    TileHeader,
    read_chunk_table,
)
from deltacells.codec._partial import (
    DEFAULT_MAX_GAP,
    PrefixTooShortError,
    TilePrefix,
    checked_pieces,
    decode_chunks,
    merge_partial,
    parse_prefix,
    parse_tile,
    prefix_size,
)
from deltacells.codec._vectorised import row_column_order
from deltacells.errors import ExceptionPolicyError

__all__ = [
    "DecodedTile",
    "ExceptionPolicyError",
    "chunk_boundaries",
    "decode_tile",
    "encode_tile",
    "DEFAULT_MAX_GAP",
    "PrefixTooShortError",
    "TilePrefix",
    "decode_chunks",
    "parse_prefix",
    "prefix_size",
    "read_only",
    "row_column_order",
    "sort_rows",
    # compression levels
    "ARCHIVE_LEVEL",
    "DEFAULT_LEVEL",
    "DEFAULT_N_CHUNKS",
    "Level",
    "resolve_level",
    # checking a tile, decoding some of its chunks
    "CheckedTile",
    "check_tile_bytes",
    "checked_pieces",
    "decode_tiles",
    "merge_partial",
    "parse_tile",
    # the decoding threads' units of work
    "WORK_UNIT_NNZ",
    "work_units",
    # the tile's header and chunk table (FORMAT.md), for reads that fetch them alone
    "CELL_HI",
    "CELL_LO",
    "CHUNK_ENTRY_SIZE",
    "HEADER_SIZE",
    "NNZ_HI",
    "NNZ_LO",
    "TileHeader",
    "read_chunk_table",
]
