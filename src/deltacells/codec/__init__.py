"""The tile codec: one tile's bytes to CSR arrays and back (docs/format.md, "A tile")."""

from deltacells.codec._decode import DecodedTile, decode_tile
from deltacells.codec._encode import chunk_boundaries, encode_tile
from deltacells.codec._engine import read_only, sort_rows
from deltacells.codec._partial import PrefixTooShortError, TilePrefix, decode_chunks, parse_prefix, prefix_size
from deltacells.codec._vectorised import row_column_order
from deltacells.errors import ExceptionPolicyError

__all__ = [
    "DecodedTile",
    "ExceptionPolicyError",
    "chunk_boundaries",
    "decode_tile",
    "encode_tile",
    "PrefixTooShortError",
    "TilePrefix",
    "decode_chunks",
    "parse_prefix",
    "prefix_size",
    "read_only",
    "row_column_order",
    "sort_rows",
]
