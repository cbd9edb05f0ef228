"""The names and paths of every object of a dataset (docs/format.md, "A dataset"), spelled once.

Paths are relative to the dataset root and use ``/`` whatever the filesystem.
"""

from __future__ import annotations

__all__ = [
    "APPEND_PREFIX",
    "PROBE_PREFIX",
    "WRITER_PREFIXES",
    "DATASET_ENTRIES",
    "EXTRAS_NAME",
    "GENE_ORDER_NAME",
    "INDEX_COLUMN",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "OBS_DIR",
    "OBS_SCHEMA_NAME",
    "SIDECAR_FLAGS",
    "SIDECAR_NAMES",
    "STAGING_PREFIX",
    "TILES_DIR",
    "VAR_NAMES_NAME",
    "VAR_TABLE_NAME",
    "obs_shard_path",
    "tile_path",
]

MANIFEST_NAME = "manifest.json"
TILES_DIR = "tiles"
OBS_DIR = "obs"
GENE_ORDER_NAME = "gene_order.npy"
VAR_NAMES_NAME = "var_names.txt"
VAR_TABLE_NAME = "var.parquet"
OBS_SCHEMA_NAME = f"{OBS_DIR}/schema.json"

#: The zarr group of the AnnData's other elements (docs/format.md, decision 15), which the manifest's metadata names.
EXTRAS_NAME = "anndata.zarr"

#: The optional files of a dataset, each with the manifest flag that says whether it exists.
SIDECAR_FLAGS = {
    GENE_ORDER_NAME: "has_gene_order",
    VAR_NAMES_NAME: "has_var_names",
    VAR_TABLE_NAME: "has_var_table",
    OBS_SCHEMA_NAME: "has_obs",
}

#: The small objects beside the tiles and shards: the manifest and the optional files.
SIDECAR_NAMES = (MANIFEST_NAME, *SIDECAR_FLAGS)

#: The entries of a dataset root that a writer owns (and replaces on overwrite), the manifest first.
DATASET_ENTRIES = (MANIFEST_NAME, TILES_DIR, OBS_DIR, GENE_ORDER_NAME, VAR_NAMES_NAME, VAR_TABLE_NAME, EXTRAS_NAME)

#: The obs column that holds the cell names (docs/format.md, decision 2: anndata's name for the index in h5ad).
INDEX_COLUMN = "_index"

#: Prefix of the directory under the root where an overwrite writes the new dataset before swapping it in.
STAGING_PREFIX = ".deltacells-staging-"

#: Prefix of the directory under the root where an append stages its objects until they are rolled forward.
APPEND_PREFIX = ".deltacells-append-"

#: Prefix of the object an appender writes (then removes) to prove that an object store honours conditional writes.
PROBE_PREFIX = ".deltacells-probe-"

#: The prefixes of what writers put at the root for a while: a writer killed meanwhile leaves it behind.
WRITER_PREFIXES = (STAGING_PREFIX, APPEND_PREFIX, PROBE_PREFIX)

#: The lock file that serialises writers of a dataset on a local disk (docs/format.md, decision 17).
LOCK_NAME = ".deltacells-lock"


def tile_path(index: int) -> str:
    """Relative path of tile ``index``: ``tiles/tile_000123.dct``."""
    return f"{TILES_DIR}/tile_{index:06d}.dct"


def obs_shard_path(index: int) -> str:
    """Relative path of obs shard ``index``: ``obs/obs_0004.parquet``."""
    return f"{OBS_DIR}/obs_{index:04d}.parquet"
