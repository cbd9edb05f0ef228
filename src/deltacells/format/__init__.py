"""The format's rules, in one place: object names, the manifest and obs schema models, and checkers.

Checkers are generators of :class:`Problem`: a reader raises the first one, ``validate`` collects them all.
This package depends on nothing of deltacells but :mod:`deltacells.errors` and :mod:`deltacells.codec`.
"""

from __future__ import annotations

from deltacells.format._names import (
    DATASET_ENTRIES,
    GENE_ORDER_NAME,
    MANIFEST_NAME,
    OBS_DIR,
    OBS_SCHEMA_NAME,
    SIDECAR_FLAGS,
    SIDECAR_NAMES,
    STAGING_PREFIX,
    TILES_DIR,
    VAR_NAMES_NAME,
    VAR_TABLE_NAME,
    obs_shard_path,
    tile_path,
)

__all__ = [
    "DATASET_ENTRIES",
    "GENE_ORDER_NAME",
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
