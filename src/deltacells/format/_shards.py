"""The rules of obs shards: bytes against the manifest, layout against the schema, category codes in range."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from deltacells.format._fingerprint import obs_fingerprint
from deltacells.format._names import MANIFEST_NAME, OBS_SCHEMA_NAME, obs_shard_path
from deltacells.format._problems import Checker, Problem, reopen_hint

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from deltacells.format._manifest import ManifestFields
    from deltacells.format._obs_schema import ObsColumn, ObsSchema

__all__ = ["check_codes", "check_fingerprint", "check_shard_bytes", "check_shard_layout", "shard_tiles"]


def shard_tiles(fields: ManifestFields, shard: int) -> range:
    """The tiles that shard ``shard`` holds, one row group each."""
    per_file = int(fields.obs_tiles_per_file or 1)
    return range(shard * per_file, min((shard + 1) * per_file, fields.n_tiles))


def check_fingerprint(schema_text: str, fields: ManifestFields) -> Checker[None]:
    """``obs_fingerprint`` against the schema, ``tile_cells`` and the shards' hashes (docs/format.md, decision 1)."""
    if fields.obs_fingerprint is None or fields.tile_cells is None or fields.obs_shard_sha256 is None:
        return
    digest = obs_fingerprint(schema_text, fields.tile_cells.tolist(), fields.obs_shard_sha256)
    if digest != fields.obs_fingerprint:
        yield Problem(
            OBS_SCHEMA_NAME,
            f"the schema text does not match {MANIFEST_NAME} field obs_fingerprint {fields.obs_fingerprint} "
            f"(schema, tile_cells and shard SHA-256s hash to {digest}); the obs files were modified or do not "
            "belong to this manifest",
        )


def check_shard_bytes(blob: bytes, shard: int, fields: ManifestFields) -> Checker[None]:
    """A whole shard's size and SHA-256 against ``obs_shard_bytes`` and ``obs_shard_sha256``."""
    name = obs_shard_path(shard)
    if fields.obs_shard_bytes is not None and len(blob) != fields.obs_shard_bytes[shard]:
        yield Problem(
            name,
            f"size is {len(blob)} bytes but {MANIFEST_NAME} field obs_shard_bytes[{shard}] says "
            f"{fields.obs_shard_bytes[shard]}; the shard does not match the manifest"
            f"{reopen_hint(shard, fields.obs_shard_bytes)}",
        )
    if fields.obs_shard_sha256 is not None:
        digest = hashlib.sha256(blob).hexdigest()
        if digest != fields.obs_shard_sha256[shard]:
            yield Problem(
                name,
                f"SHA-256 is {digest} but {MANIFEST_NAME} field obs_shard_sha256[{shard}] says "
                f"{fields.obs_shard_sha256[shard]}; the shard was modified or damaged"
                f"{reopen_hint(shard, fields.obs_shard_sha256)}",
            )


def check_shard_layout(
    parquet: pq.ParquetFile, shard: int, schema: ObsSchema | None, fields: ManifestFields
) -> Checker[bool]:
    """The shard's columns and Arrow types against the schema, one row group of ``tile_cells[t]`` rows per tile.

    Returns whether the columns match the schema (so that their values can be checked).
    """
    name = obs_shard_path(shard)
    columns_ok = True
    if schema is not None:
        arrow_schema = parquet.schema_arrow
        if arrow_schema.names != schema.names:
            yield Problem(name, f"columns are {arrow_schema.names}, but {OBS_SCHEMA_NAME} lists {schema.names}")
            columns_ok = False
        for column in schema.columns:
            if column.name in arrow_schema.names:
                got = arrow_schema.field(column.name).type
                if got != column.pa_type:
                    yield Problem(
                        name,
                        f"column {column.name!r} has Arrow type {got}, but {OBS_SCHEMA_NAME} says {column.arrow_type}",
                    )
                    columns_ok = False
    tiles = shard_tiles(fields, shard)
    metadata = parquet.metadata
    if metadata.num_row_groups != len(tiles):
        yield Problem(
            name,
            f"has {metadata.num_row_groups} row groups, expected {len(tiles)} (one per tile, tiles "
            f"{tiles.start} .. {tiles.stop - 1})",
        )
    if fields.tile_cells is not None:
        for group in range(min(metadata.num_row_groups, len(tiles))):
            tile = tiles[group]
            rows = metadata.row_group(group).num_rows
            if rows != fields.tile_cells[tile]:
                yield Problem(
                    name,
                    f"row group {group} (tile {tile}) has {rows} rows, but {MANIFEST_NAME} field "
                    f"tile_cells[{tile}] is {int(fields.tile_cells[tile])}",
                )
    return columns_ok


def check_codes(column: ObsColumn, array: pa.Array | pa.ChunkedArray, obj: str, where: str) -> Checker[None]:
    """A category column's codes, each -1 (missing) or a category's number (``where`` locates them in ``obj``)."""
    if len(array) == array.null_count:  # empty, or every code null (missing)
        return
    bounds = pc.min_max(array)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    n = len(column.categories or ())
    if low < -1 or high >= n:
        bad = low if low < -1 else high
        yield Problem(
            obj, f"{where}column {column.name!r} holds category code {bad}, outside -1 .. {n - 1} ({n} categories)"
        )
