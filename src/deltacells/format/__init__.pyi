# deltacells.format's public names, each from the module it lives in: the one list of them
# (lazy_loader reads it at run time, type checkers in place of __init__.py).

from ._commit import Commit as Commit, commit_of as commit_of
from ._dtype import (
    COUNTS_DTYPE_KINDS as COUNTS_DTYPE_KINDS,
    check_counts_dtype as check_counts_dtype,
    counts_dtype_entry as counts_dtype_entry,
    counts_dtype_of as counts_dtype_of,
)
from ._extras import (
    EXTRAS_FORMAT as EXTRAS_FORMAT,
    Extras as Extras,
    MAPPINGS as MAPPINGS,
    PER_CELL as PER_CELL,
    RAW_VARM as RAW_VARM,
    WHOLE as WHOLE,
    check_extras as check_extras,
    is_raw_varm as is_raw_varm,
    extras_of as extras_of,
)
from ._fingerprint import obs_fingerprint as obs_fingerprint
from ._listing import (
    check_flags as check_flags,
    missing_promised as missing_promised,
    check_stray_objects as check_stray_objects,
)
from ._manifest import (
    FORMAT_NAME as FORMAT_NAME,
    FORMAT_VERSION as FORMAT_VERSION,
    Manifest as Manifest,
    ManifestFields as ManifestFields,
    check_manifest as check_manifest,
    check_manifest_text as check_manifest_text,
)
from ._names import (
    APPEND_PREFIX as APPEND_PREFIX,
    PROBE_PREFIX as PROBE_PREFIX,
    WRITER_PREFIXES as WRITER_PREFIXES,
    DATASET_ENTRIES as DATASET_ENTRIES,
    EXTRAS_NAME as EXTRAS_NAME,
    GENE_ORDER_NAME as GENE_ORDER_NAME,
    INDEX_COLUMN as INDEX_COLUMN,
    LOCK_NAME as LOCK_NAME,
    MANIFEST_NAME as MANIFEST_NAME,
    OBS_DIR as OBS_DIR,
    OBS_SCHEMA_NAME as OBS_SCHEMA_NAME,
    SIDECAR_FLAGS as SIDECAR_FLAGS,
    SIDECAR_NAMES as SIDECAR_NAMES,
    STAGING_PREFIX as STAGING_PREFIX,
    TILES_DIR as TILES_DIR,
    VAR_NAMES_NAME as VAR_NAMES_NAME,
    VAR_TABLE_NAME as VAR_TABLE_NAME,
    obs_shard_path as obs_shard_path,
    tile_path as tile_path,
)
from ._obs_names import (
    OBS_NAMES_UNIQUE as OBS_NAMES_UNIQUE,
    obs_names_unique as obs_names_unique,
    with_obs_names_unique as with_obs_names_unique,
)
from ._obs_schema import (
    CATEGORY_ARROW_TYPES as CATEGORY_ARROW_TYPES,
    KINDS as KINDS,
    NUMERIC_ARROW_TYPES as NUMERIC_ARROW_TYPES,
    OBS_FORMAT_NAME as OBS_FORMAT_NAME,
    OBS_FORMAT_VERSION as OBS_FORMAT_VERSION,
    ObsColumn as ObsColumn,
    ObsSchema as ObsSchema,
    arrow_type as arrow_type,
)
from ._problems import (
    Checker as Checker,
    Problem as Problem,
    collect as collect,
    first_problem_raises as first_problem_raises,
    problem_from_error as problem_from_error,
)
from ._shards import (
    check_codes as check_codes,
    check_fingerprint as check_fingerprint,
    check_shard_bytes as check_shard_bytes,
    check_shard_layout as check_shard_layout,
    shard_tiles as shard_tiles,
)
from ._sidecars import (
    GENE_ORDER_DTYPE as GENE_ORDER_DTYPE,
    check_gene_order as check_gene_order,
    check_var_names as check_var_names,
    check_var_table as check_var_table,
)
from ._tiles import (
    check_tile as check_tile,
    check_tile_bytes_against as check_tile_bytes_against,
    check_tile_size as check_tile_size,
    decode_checked_tile as decode_checked_tile,
    missing_tile as missing_tile,
)
