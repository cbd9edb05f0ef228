"""The format's rules, in one place: object names, the manifest and obs schema models, and checkers.

Every rule is a *checker*, a generator of :class:`Problem` that may return what it parsed: a reader raises
the first problem (:func:`first_problem_raises`), ``deltacells validate`` collects them all
(:func:`collect`). This package depends only on :mod:`deltacells.errors` (and on :mod:`deltacells.codec`
to decode tiles).

=====================  =========================================================================
module                 rules of
=====================  =========================================================================
``_names``             the name and path of every object of a dataset
``_problems``          :class:`Problem`, and raising or collecting what checkers find
``_manifest``          ``manifest.json`` (:class:`Manifest`, :func:`check_manifest`)
``_obs_schema``        ``obs/schema.json`` (:class:`ObsSchema`, :class:`ObsColumn`)
``_fingerprint``       the obs fingerprint (docs/format.md, decision 1)
``_listing``           the objects present against the manifest's flags and counts
``_sidecars``          ``gene_order.npy``, ``var_names.txt``, ``var.parquet``
``_tiles``             a tile against the manifest
``_shards``            an obs shard against the manifest and the schema
``_extras``            ``anndata.zarr``'s entry in the manifest's metadata (the AnnData's other elements)
``_dtype``             the dtype of the counts written, in the manifest's metadata (what reads return)
=====================  =========================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacells._lazy import lazy_names

if TYPE_CHECKING:
    from deltacells.format._commit import Commit, commit_of
    from deltacells.format._dtype import COUNTS_DTYPE_KINDS, check_counts_dtype, counts_dtype_entry, counts_dtype_of
    from deltacells.format._extras import (
        EXTRAS_FORMAT,
        MAPPINGS,
        PER_CELL,
        RAW_VARM,
        WHOLE,
        Extras,
        check_extras,
        extras_of,
        is_raw_varm,
    )
    from deltacells.format._fingerprint import obs_fingerprint
    from deltacells.format._listing import check_flags, check_stray_objects, missing_promised
    from deltacells.format._manifest import (
        FORMAT_NAME,
        FORMAT_VERSION,
        Manifest,
        ManifestFields,
        check_manifest,
        check_manifest_text,
    )
    from deltacells.format._names import (
        APPEND_PREFIX,
        DATASET_ENTRIES,
        EXTRAS_NAME,
        GENE_ORDER_NAME,
        LOCK_NAME,
        MANIFEST_NAME,
        OBS_DIR,
        OBS_SCHEMA_NAME,
        PROBE_PREFIX,
        SIDECAR_FLAGS,
        SIDECAR_NAMES,
        STAGING_PREFIX,
        TILES_DIR,
        VAR_NAMES_NAME,
        VAR_TABLE_NAME,
        WRITER_PREFIXES,
        obs_shard_path,
        tile_path,
    )
    from deltacells.format._obs_names import OBS_NAMES_UNIQUE, obs_names_unique, with_obs_names_unique
    from deltacells.format._obs_schema import (
        CATEGORY_ARROW_TYPES,
        INDEX_COLUMN,
        KINDS,
        NUMERIC_ARROW_TYPES,
        OBS_FORMAT_NAME,
        OBS_FORMAT_VERSION,
        ObsColumn,
        ObsSchema,
        arrow_type,
    )
    from deltacells.format._problems import Checker, Problem, collect, first_problem_raises, problem_from_error
    from deltacells.format._shards import (
        check_codes,
        check_fingerprint,
        check_shard_bytes,
        check_shard_layout,
        shard_tiles,
    )
    from deltacells.format._sidecars import GENE_ORDER_DTYPE, check_gene_order, check_var_names, check_var_table
    from deltacells.format._tiles import (
        check_tile,
        check_tile_bytes_against,
        check_tile_size,
        decode_checked_tile,
        missing_tile,
    )

#: Where each name lives; importing the package loads none of its modules (the CLI imports names cheaply).
_LAZY = {
    "obs_fingerprint": "deltacells.format._fingerprint",
    "check_flags": "deltacells.format._listing",
    "missing_promised": "deltacells.format._listing",
    "check_stray_objects": "deltacells.format._listing",
    "FORMAT_NAME": "deltacells.format._manifest",
    "FORMAT_VERSION": "deltacells.format._manifest",
    "Manifest": "deltacells.format._manifest",
    "ManifestFields": "deltacells.format._manifest",
    "check_manifest": "deltacells.format._manifest",
    "check_manifest_text": "deltacells.format._manifest",
    "DATASET_ENTRIES": "deltacells.format._names",
    "EXTRAS_NAME": "deltacells.format._names",
    "EXTRAS_FORMAT": "deltacells.format._extras",
    "MAPPINGS": "deltacells.format._extras",
    "PER_CELL": "deltacells.format._extras",
    "WHOLE": "deltacells.format._extras",
    "Extras": "deltacells.format._extras",
    "check_extras": "deltacells.format._extras",
    "extras_of": "deltacells.format._extras",
    "RAW_VARM": "deltacells.format._extras",
    "is_raw_varm": "deltacells.format._extras",
    "GENE_ORDER_NAME": "deltacells.format._names",
    "APPEND_PREFIX": "deltacells.format._names",
    "PROBE_PREFIX": "deltacells.format._names",
    "WRITER_PREFIXES": "deltacells.format._names",
    "LOCK_NAME": "deltacells.format._names",
    "Commit": "deltacells.format._commit",
    "commit_of": "deltacells.format._commit",
    "COUNTS_DTYPE_KINDS": "deltacells.format._dtype",
    "check_counts_dtype": "deltacells.format._dtype",
    "counts_dtype_entry": "deltacells.format._dtype",
    "counts_dtype_of": "deltacells.format._dtype",
    "MANIFEST_NAME": "deltacells.format._names",
    "OBS_DIR": "deltacells.format._names",
    "OBS_SCHEMA_NAME": "deltacells.format._names",
    "SIDECAR_FLAGS": "deltacells.format._names",
    "SIDECAR_NAMES": "deltacells.format._names",
    "STAGING_PREFIX": "deltacells.format._names",
    "TILES_DIR": "deltacells.format._names",
    "VAR_NAMES_NAME": "deltacells.format._names",
    "VAR_TABLE_NAME": "deltacells.format._names",
    "obs_shard_path": "deltacells.format._names",
    "tile_path": "deltacells.format._names",
    "CATEGORY_ARROW_TYPES": "deltacells.format._obs_schema",
    "INDEX_COLUMN": "deltacells.format._names",
    "KINDS": "deltacells.format._obs_schema",
    "NUMERIC_ARROW_TYPES": "deltacells.format._obs_schema",
    "OBS_FORMAT_NAME": "deltacells.format._obs_schema",
    "OBS_FORMAT_VERSION": "deltacells.format._obs_schema",
    "OBS_NAMES_UNIQUE": "deltacells.format._obs_names",
    "obs_names_unique": "deltacells.format._obs_names",
    "with_obs_names_unique": "deltacells.format._obs_names",
    "ObsColumn": "deltacells.format._obs_schema",
    "ObsSchema": "deltacells.format._obs_schema",
    "arrow_type": "deltacells.format._obs_schema",
    "Checker": "deltacells.format._problems",
    "Problem": "deltacells.format._problems",
    "collect": "deltacells.format._problems",
    "first_problem_raises": "deltacells.format._problems",
    "problem_from_error": "deltacells.format._problems",
    "check_codes": "deltacells.format._shards",
    "check_fingerprint": "deltacells.format._shards",
    "check_shard_bytes": "deltacells.format._shards",
    "check_shard_layout": "deltacells.format._shards",
    "shard_tiles": "deltacells.format._shards",
    "GENE_ORDER_DTYPE": "deltacells.format._sidecars",
    "check_gene_order": "deltacells.format._sidecars",
    "check_var_names": "deltacells.format._sidecars",
    "check_var_table": "deltacells.format._sidecars",
    "check_tile": "deltacells.format._tiles",
    "check_tile_bytes_against": "deltacells.format._tiles",
    "check_tile_size": "deltacells.format._tiles",
    "decode_checked_tile": "deltacells.format._tiles",
    "missing_tile": "deltacells.format._tiles",
}


__all__ = [
    "APPEND_PREFIX",
    "PROBE_PREFIX",
    "WRITER_PREFIXES",
    "CATEGORY_ARROW_TYPES",
    "COUNTS_DTYPE_KINDS",
    "DATASET_ENTRIES",
    "EXTRAS_FORMAT",
    "EXTRAS_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GENE_ORDER_DTYPE",
    "GENE_ORDER_NAME",
    "INDEX_COLUMN",
    "KINDS",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "NUMERIC_ARROW_TYPES",
    "OBS_DIR",
    "OBS_FORMAT_NAME",
    "OBS_FORMAT_VERSION",
    "OBS_NAMES_UNIQUE",
    "OBS_SCHEMA_NAME",
    "SIDECAR_FLAGS",
    "SIDECAR_NAMES",
    "STAGING_PREFIX",
    "TILES_DIR",
    "VAR_NAMES_NAME",
    "VAR_TABLE_NAME",
    "Checker",
    "Commit",
    "Extras",
    "MAPPINGS",
    "PER_CELL",
    "RAW_VARM",
    "Manifest",
    "ManifestFields",
    "ObsColumn",
    "ObsSchema",
    "Problem",
    "arrow_type",
    "WHOLE",
    "check_codes",
    "check_extras",
    "is_raw_varm",
    "commit_of",
    "check_counts_dtype",
    "counts_dtype_entry",
    "counts_dtype_of",
    "check_fingerprint",
    "check_flags",
    "missing_promised",
    "check_gene_order",
    "check_manifest",
    "check_manifest_text",
    "check_shard_bytes",
    "check_shard_layout",
    "check_stray_objects",
    "check_tile",
    "check_tile_bytes_against",
    "check_tile_size",
    "check_var_names",
    "check_var_table",
    "collect",
    "decode_checked_tile",
    "extras_of",
    "first_problem_raises",
    "missing_tile",
    "obs_fingerprint",
    "obs_names_unique",
    "obs_shard_path",
    "problem_from_error",
    "shard_tiles",
    "tile_path",
    "with_obs_names_unique",
]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
