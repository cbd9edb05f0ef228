"""Obs: the per-cell metadata sidecar (``obs/schema.json`` and parquet shards) and its local cache.

:func:`write_obs` writes a DataFrame as obs shards with one row group per tile; :class:`ObsStore`
localizes the columns asked for into a local cache (once per node) and reads them back as pandas.
"""

from __future__ import annotations

from deltacells.format import ObsColumn, ObsSchema
from deltacells.obs._cache import ObsStore, resolve_cache_dir
from deltacells.obs._collection import CollectionObs
from deltacells.obs._encode import DEFAULT_MAX_CATEGORIES
from deltacells.obs._files import column_file_name
from deltacells.obs._write import DEFAULT_OBS_TILES_PER_FILE, ObsWriteResult, check_obs, write_obs

__all__ = [
    "CollectionObs",
    "DEFAULT_MAX_CATEGORIES",
    "DEFAULT_OBS_TILES_PER_FILE",
    "ObsColumn",
    "ObsSchema",
    "ObsStore",
    "ObsWriteResult",
    "check_obs",
    "column_file_name",
    "resolve_cache_dir",
    "write_obs",
]
