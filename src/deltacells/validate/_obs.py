"""The obs sidecar: its schema and fingerprint, and each shard's bytes, columns, row groups and category codes."""

from __future__ import annotations

import hashlib
from typing import Any

from deltacells.dataset._manifest import MANIFEST_NAME, obs_shard_path
from deltacells.errors import FormatError
from deltacells.storage import Store
from deltacells.validate._access import present, read_object
from deltacells.validate._manifest import Expected
from deltacells.validate._report import Collector, ValidationReport, error_message


def check_obs(store: Store, expected: Expected, found: Collector, report: ValidationReport, *, progress: bool) -> None:
    """Check the obs schema and fingerprint, then every obs shard; count the shards read in ``report``."""
    from deltacells.obs import SCHEMA_NAME, ObsSchema, obs_fingerprint

    if not expected.flags.get("obs/schema.json"):
        return
    schema = None
    if present(store, SCHEMA_NAME):
        blob = read_object(store, SCHEMA_NAME, found)
        if blob is not None:
            try:
                text = blob.decode("utf-8")
            except UnicodeDecodeError as exc:
                found.add(SCHEMA_NAME, f"not UTF-8 text ({exc})")
            else:
                try:
                    schema = ObsSchema.from_json(text, where=SCHEMA_NAME)
                except FormatError as exc:
                    found.add(SCHEMA_NAME, exc)
                if (
                    expected.obs_fingerprint is not None
                    and expected.tile_cells is not None
                    and expected.obs_shard_sha256 is not None
                ):
                    digest = obs_fingerprint(text, expected.tile_cells.tolist(), expected.obs_shard_sha256)
                    if digest != expected.obs_fingerprint:
                        found.add(
                            MANIFEST_NAME,
                            f"field obs_fingerprint is {expected.obs_fingerprint}, but obs/schema.json, tile_cells "
                            f"and obs_shard_sha256 hash to {digest}; the obs schema or these fields were changed "
                            "after writing",
                        )
    if not expected.n_shards:
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=expected.n_shards, unit="shards", desc="obs shards", disable=not progress, dynamic_ncols=True)
    try:
        for shard in range(expected.n_shards):
            report.shards_checked += _check_shard(store, expected, schema, shard, found)
            bar.update(1)
    finally:
        bar.close()


def _check_shard(store: Store, expected: Expected, schema: Any, shard: int, found: Collector) -> bool:
    """Check one obs shard; return whether it could be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = obs_shard_path(shard)
    blob = read_object(store, name, found)
    if blob is None:
        return False
    assert expected.obs_shard_bytes is not None and expected.obs_shard_sha256 is not None
    if len(blob) != expected.obs_shard_bytes[shard]:
        found.add(
            name,
            f"size is {len(blob)} bytes but manifest.json field obs_shard_bytes[{shard}] says "
            f"{expected.obs_shard_bytes[shard]}",
        )
    digest = hashlib.sha256(blob).hexdigest()
    if digest != expected.obs_shard_sha256[shard]:
        found.add(
            name,
            f"SHA-256 is {digest} but manifest.json field obs_shard_sha256[{shard}] says "
            f"{expected.obs_shard_sha256[shard]}; the shard was modified or damaged",
        )
    try:
        parquet = pq.ParquetFile(pa.BufferReader(blob))
        metadata = parquet.metadata
        arrow_schema = parquet.schema_arrow
    except Exception as exc:  # anything pyarrow raises means unreadable
        found.add(name, f"not a readable parquet file ({error_message(exc)})")
        return True

    layout_ok = True
    if schema is not None:
        if arrow_schema.names != schema.names:
            found.add(name, f"columns are {arrow_schema.names}, but obs/schema.json lists {schema.names}")
            layout_ok = False
        for column in schema.columns:
            if column.name in arrow_schema.names:
                got = arrow_schema.field(column.name).type
                if got != column.pa_type:
                    found.add(
                        name,
                        f"column {column.name!r} has Arrow type {got}, but obs/schema.json says {column.arrow_type}",
                    )
                    layout_ok = False

    per_file = expected.obs_tiles_per_file or 1
    tiles = range(shard * per_file, min((shard + 1) * per_file, expected.n_tiles))
    if metadata.num_row_groups != len(tiles):
        found.add(
            name,
            f"has {metadata.num_row_groups} row groups, expected {len(tiles)} (one per tile, tiles "
            f"{tiles.start} .. {tiles.stop - 1})",
        )
    for group in range(min(metadata.num_row_groups, len(tiles))):
        tile = tiles[group]
        rows = metadata.row_group(group).num_rows
        if expected.tile_cells is not None and rows != expected.tile_cells[tile]:
            found.add(
                name,
                f"row group {group} (tile {tile}) has {rows} rows, but manifest.json field "
                f"tile_cells[{tile}] is {int(expected.tile_cells[tile])}",
            )
        _check_row_group(parquet, group, tile, schema if layout_ok else None, name, found)
    return True


def _check_row_group(parquet: Any, group: int, tile: int, schema: Any, name: str, found: Collector) -> None:
    """Read one row group whole; check its category codes against the vocabularies."""
    from deltacells.obs._decode import check_codes

    try:
        table = parquet.read_row_group(group, use_threads=False)
    except Exception as exc:  # anything pyarrow raises means unreadable
        found.add(name, f"row group {group} (tile {tile}) cannot be read ({error_message(exc)})")
        return
    if schema is None:
        return
    for column in schema.columns:
        if column.kind != "category":
            continue
        try:
            check_codes(column, table.column(column.name), f"{name} row group {group} (tile {tile})")
        except FormatError as exc:
            found.add(name, exc)
