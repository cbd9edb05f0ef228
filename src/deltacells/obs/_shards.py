"""Reading obs shards: integrity and layout checks, and the chunks of some columns, tile by tile."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from deltacells.dataset._manifest import obs_shard_path
from deltacells.errors import FormatError, MissingObjectError
from deltacells.obs._decode import check_codes
from deltacells.obs._schema import ObsSchema

if TYPE_CHECKING:
    from deltacells.dataset import Manifest
    from deltacells.storage import Store

__all__ = ["read_shard_bytes", "shard_tiles", "tile_columns"]


def shard_tiles(manifest: Manifest, shard: int) -> range:
    """The tiles that shard ``shard`` holds, one row group each."""
    per_file = int(manifest.obs_tiles_per_file or 1)
    return range(shard * per_file, min((shard + 1) * per_file, manifest.n_tiles))


def read_shard_bytes(store: Store, manifest: Manifest, shard: int) -> bytes:
    """Read shard ``shard`` whole and check its size and SHA-256 against the manifest.

    Raises
    ------
    FormatError
        Naming the shard file, if its size or SHA-256 differs from ``manifest.json``.
    MissingObjectError
        If the shard is missing.
    """
    name = obs_shard_path(shard)
    blob = store.read(name)
    expected = int(manifest.obs_shard_bytes[shard])
    if len(blob) != expected:
        msg = (
            f"{store.url}/{name}: size is {len(blob)} bytes but manifest.json field obs_shard_bytes[{shard}] "
            f"says {expected}; the shard does not match the manifest"
        )
        raise FormatError(msg)
    digest = hashlib.sha256(blob).hexdigest()
    if digest != manifest.obs_shard_sha256[shard]:
        msg = (
            f"{store.url}/{name}: SHA-256 is {digest} but manifest.json field obs_shard_sha256[{shard}] says "
            f"{manifest.obs_shard_sha256[shard]}; the shard was modified or damaged"
        )
        raise FormatError(msg)
    return blob


@contextlib.contextmanager
def _open_parquet(store: Store, shard: int, blob: bytes | None) -> Iterator[pq.ParquetFile]:
    """A ParquetFile over ``blob``, or over ranged reads of the stored shard when ``blob`` is None."""
    name = obs_shard_path(shard)
    where = f"{store.url}/{name}"
    with contextlib.ExitStack() as stack:
        if blob is None:
            try:
                try:
                    handle = store.fs.open(store.path(name), mode="rb", cache_type="none")
                except TypeError:  # filesystems without cache types
                    handle = store.fs.open(store.path(name), mode="rb")
            except FileNotFoundError as exc:
                msg = f"{store.url}: {name} is missing"
                raise MissingObjectError(msg) from exc
            source = stack.enter_context(handle)
        else:
            source = pa.BufferReader(blob)
        try:
            parquet = pq.ParquetFile(source)
        except (pa.ArrowException, OSError) as exc:
            msg = f"{where}: not a readable parquet file ({exc})"
            raise FormatError(msg) from exc
        yield parquet


def _check_layout(parquet: pq.ParquetFile, schema: ObsSchema, manifest: Manifest, shard: int, where: str) -> None:
    """The shard holds exactly the schema's columns and types, and one row group of ``tile_cells[t]`` rows per tile."""
    arrow_schema = parquet.schema_arrow
    if arrow_schema.names != schema.names:
        msg = f"{where}: columns are {arrow_schema.names}, but obs/schema.json lists {schema.names}"
        raise FormatError(msg)
    for field, column in zip(arrow_schema, schema.columns, strict=True):
        if field.type != column.pa_type:
            msg = (
                f"{where}: column {column.name!r} has Arrow type {field.type}, but obs/schema.json says "
                f"{column.arrow_type}"
            )
            raise FormatError(msg)
    tiles = shard_tiles(manifest, shard)
    metadata = parquet.metadata
    if metadata.num_row_groups != len(tiles):
        msg = (
            f"{where}: has {metadata.num_row_groups} row groups, expected {len(tiles)} (one per tile, "
            f"tiles {tiles.start} .. {tiles.stop - 1})"
        )
        raise FormatError(msg)
    for group, tile in enumerate(tiles):
        rows = metadata.row_group(group).num_rows
        if rows != int(manifest.tile_cells[tile]):
            msg = (
                f"{where}: row group {group} (tile {tile}) has {rows} rows, but manifest.json field "
                f"tile_cells[{tile}] is {int(manifest.tile_cells[tile])}"
            )
            raise FormatError(msg)


def tile_columns(
    store: Store,
    manifest: Manifest,
    schema: ObsSchema,
    shard: int,
    names: list[str],
    *,
    blob: bytes | None = None,
) -> Iterator[tuple[int, dict[str, pa.Array]]]:
    """Yield ``(tile, {name: values})`` for each tile of a shard, reading only the columns ``names``.

    Parameters
    ----------
    store, manifest, schema
        The dataset.
    shard
        The shard index.
    names
        The columns to read.
    blob
        The whole shard, already read (and checked); ``None`` reads only the footer and the column chunks
        needed, through ranged reads.

    Raises
    ------
    FormatError
        Naming the shard and the field at fault, for a layout that differs from the schema and manifest or
        category codes out of range.
    """
    where = f"{store.url}/{obs_shard_path(shard)}"
    with _open_parquet(store, shard, blob) as parquet:
        _check_layout(parquet, schema, manifest, shard, where)
        for group, tile in enumerate(shard_tiles(manifest, shard)):
            try:
                table = parquet.read_row_group(group, columns=names, use_threads=False)
            except (pa.ArrowException, OSError) as exc:
                msg = f"{where}: row group {group} (tile {tile}) cannot be read ({exc})"
                raise FormatError(msg) from exc
            out: dict[str, pa.Array] = {}
            for name in names:
                column = schema.column(name)
                chunks = table.column(name)
                values = chunks.combine_chunks() if chunks.num_chunks != 1 else chunks.chunk(0)
                if len(values) != int(manifest.tile_cells[tile]) or values.type != column.pa_type:
                    msg = (
                        f"{where}: row group {group} (tile {tile}) column {name!r} read as {len(values)} values of "
                        f"{values.type}, expected {int(manifest.tile_cells[tile])} of {column.arrow_type}"
                    )
                    raise FormatError(msg)
                if column.kind == "category":
                    check_codes(column, values, f"{where} row group {group} (tile {tile})")
                out[name] = values
            yield tile, out
