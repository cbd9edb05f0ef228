"""Obs: the per-cell metadata sidecar (``obs/schema.json`` and parquet shards) and its local cache.

:func:`write_obs` writes a DataFrame as obs shards with one row group per tile; :class:`ObsStore`
localizes the columns asked for into a local cache (once per node) and reads them back as pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells._lazy import lazy_names
from deltacells.format import ObsColumn, ObsSchema
from deltacells.obs._cache import ObsStore, resolve_cache_dir
from deltacells.obs._concat import as_joined, empty_values, joined_dtypes, missing_values, renumbered
from deltacells.obs._dtypes import default_string_dtype
from deltacells.obs._encode import DEFAULT_MAX_CATEGORIES
from deltacells.obs._files import column_file_name
from deltacells.obs._write import DEFAULT_OBS_TILES_PER_FILE, ObsWriteResult, check_obs, write_obs

if TYPE_CHECKING:
    from deltacells.obs._append import append_obs

__all__ = [
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
    # joining the obs of several datasets as anndata.concat does (a collection's obs: core.CollectionObs)
    "as_joined",
    "default_string_dtype",
    "empty_values",
    "joined_dtypes",
    "missing_values",
    "renumbered",
    # appending cells: their obs added to the dataset's shards
    "append_obs",
]

#: Names whose module importing the package does not load (appends): it loads on first use.
_LAZY = {"append_obs": "deltacells.obs._append"}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
