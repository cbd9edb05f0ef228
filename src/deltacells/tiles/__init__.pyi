# deltacells.tiles's public names, each from the module it lives in: the one list of them
# (lazy_loader reads it at run time, type checkers in place of __init__.py).

from ._cache import CACHE_POLICIES as CACHE_POLICIES, TileCache as TileCache
from ._counts import to_count_csr as to_count_csr
from ._gathering import (
    drop_dropped_columns as drop_dropped_columns,
    gather_rows as gather_rows,
    gather_rows_mapped as gather_rows_mapped,
    gather_rows_split as gather_rows_split,
    sort_output_rows as sort_output_rows,
)
from ._reader import DEFAULT_TILE_CACHE_BYTES as DEFAULT_TILE_CACHE_BYTES, TileReader as TileReader
from ._writer import (
    DEFAULT_LEVEL as DEFAULT_LEVEL,
    DEFAULT_N_CHUNKS as DEFAULT_N_CHUNKS,
    DEFAULT_TILE_SIZE as DEFAULT_TILE_SIZE,
    TileList as TileList,
    TileWriter as TileWriter,
    check_tile_settings as check_tile_settings,
)

# for the writers above: a block's columns in stored order, its column totals
from ._counts import column_totals as column_totals
from ._writer import permute_columns as permute_columns

# for datasets' reads: the dtypes decoded straight into an output; reads chunk by chunk (the loader's)
from ._chunk_layout import kept_chunk_starts as kept_chunk_starts, read_chunk_starts as read_chunk_starts
from ._chunk_rows import SplitOutputs as SplitOutputs, read_rows_by_chunk as read_rows_by_chunk
from ._into import DIRECT_DTYPES as DIRECT_DTYPES
