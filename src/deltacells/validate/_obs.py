"""The obs sidecar: its schema and fingerprint, and each shard's bytes, columns, row groups and category codes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltacells.format import (
    OBS_SCHEMA_NAME,
    ManifestFields,
    ObsSchema,
    check_codes,
    check_fingerprint,
    check_shard_bytes,
    check_shard_layout,
    collect,
    obs_shard_path,
    shard_tiles,
)
from deltacells.validate._access import read_object

if TYPE_CHECKING:
    from deltacells.storage import BaseStore
    from deltacells.validate._report import Collector, ValidationReport


def check_obs(
    store: BaseStore, fields: ManifestFields, found: Collector, report: ValidationReport, *, progress: bool
) -> None:
    """Check the obs schema and fingerprint, then every obs shard; count the shards read in ``report``."""
    if not fields.files.get(OBS_SCHEMA_NAME):
        return
    schema = _check_schema(store, fields, found)
    if not fields.n_shards:
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=fields.n_shards, unit="shards", desc="obs shards", disable=not progress, dynamic_ncols=True)
    try:
        for shard in range(fields.n_shards):
            report.shards_checked += _check_shard(store, fields, schema, shard, found)
            bar.update(1)
    finally:
        bar.close()


def _check_schema(store: BaseStore, fields: ManifestFields, found: Collector) -> ObsSchema | None:
    if not store.exists(OBS_SCHEMA_NAME):
        return None  # the listing reports it missing
    blob = read_object(store, OBS_SCHEMA_NAME, found)
    if blob is None:
        return None
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        found.add(OBS_SCHEMA_NAME, f"not UTF-8 text ({exc})")
        return None
    schema = None
    try:
        schema = ObsSchema.from_json(text)
    except ValueError as exc:  # FormatError
        found.add(OBS_SCHEMA_NAME, exc)
    collect(check_fingerprint(text, fields), found)
    return schema


def _check_shard(
    store: BaseStore, fields: ManifestFields, schema: ObsSchema | None, shard: int, found: Collector
) -> bool:
    """Check one obs shard; return whether it could be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = obs_shard_path(shard)
    blob = read_object(store, name, found)
    if blob is None:
        return False
    collect(check_shard_bytes(blob, shard, fields), found)
    try:
        parquet = pq.ParquetFile(pa.BufferReader(blob))
        _ = parquet.metadata, parquet.schema_arrow
    except Exception as exc:  # anything pyarrow raises means unreadable
        found.add(name, f"not a readable parquet file ({type(exc).__name__}: {exc})")
        return True
    columns_ok = collect(check_shard_layout(parquet, shard, schema, fields), found)
    tiles = shard_tiles(fields, shard)
    for group in range(min(parquet.metadata.num_row_groups, len(tiles))):
        _check_row_group(parquet, group, tiles[group], schema if columns_ok else None, name, found)
    return True


def _check_row_group(
    parquet: Any, group: int, tile: int, schema: ObsSchema | None, name: str, found: Collector
) -> None:
    """Read one row group whole; check its category codes against the vocabularies."""
    at = f"row group {group} (tile {tile}): "
    try:
        table = parquet.read_row_group(group, use_threads=False)
    except Exception as exc:  # anything pyarrow raises means unreadable
        found.add(name, f"{at}cannot be read ({type(exc).__name__}: {exc})")
        return
    if schema is None:
        return
    for column in schema.columns:
        if column.kind == "category":
            collect(check_codes(column, table.column(column.name), name, at), found)
