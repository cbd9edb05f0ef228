"""Datasets: the manifest, reading cells tile by tile, and the streaming tile writer."""

from deltacells.dataset._cache import TileCache
from deltacells.dataset._counts import to_count_csr
from deltacells.dataset._manifest import FORMAT_NAME, FORMAT_VERSION, Manifest, obs_shard_path, tile_path
from deltacells.dataset._reader import DEFAULT_TILE_CACHE_BYTES, Dataset, open_dataset
from deltacells.dataset._writer import DEFAULT_TILE_SIZE, TileWriter

__all__ = [
    "DEFAULT_TILE_CACHE_BYTES",
    "DEFAULT_TILE_SIZE",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Dataset",
    "Manifest",
    "TileCache",
    "TileWriter",
    "obs_shard_path",
    "open_dataset",
    "tile_path",
    "to_count_csr",
]
