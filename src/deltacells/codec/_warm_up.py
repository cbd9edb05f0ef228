"""What the loading thread runs to load the decoder's kernels: a tiny tile decoded as reads decode theirs."""

from __future__ import annotations

import numpy as np

from deltacells.codec._decode import check_tile_bytes, decode_tile
from deltacells.codec._encode import encode_tile
from deltacells.codec._engine import read_only, sort_rows

__all__ = ["warm_up"]


def warm_up() -> None:
    """Decode a tiny tile as reads do, so that the signatures they call first are loaded (or compiled).

    Run by the loading thread (``deltacells._kernel_loading``): int32 counts (``decode_tile``, the tile
    cache), and float32 counts (a range decoded into the output) with genes as stored, and mapped with rows
    sorted (the default gene order, whose map is read-only); and the rows of a tile being written sorted
    once their genes are reordered (int32 counts).
    """
    indptr = np.array([0, 2, 3], dtype=np.int64)
    blob = encode_tile(indptr, np.array([0, 2, 1], dtype=np.int32), np.array([1, 5, 2], dtype=np.int32), 3)
    decode_tile(blob, name="warm-up tile", threads=1)
    tile = check_tile_bytes(blob, name="warm-up tile")
    columns = read_only(np.array([2, 0, 1], dtype=np.int32))
    for mapped in (None, columns):
        tile.decode_into(np.empty(3, dtype=np.int32), np.empty(3, dtype=np.float32), threads=1, columns=mapped)
    # A writer's rows, their genes reordered (deltacells.tiles.permute_columns): int32 counts.
    sort_rows(read_only(indptr), 0, 2, 0, np.array([2, 0, 1], dtype=np.int32), np.array([1, 5, 2], dtype=np.int32), 3)
