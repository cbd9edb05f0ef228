"""Reading obs shards through the store: whole and checked against the manifest, or only some columns' chunks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from deltacells.format import (
    Problem,
    check_codes,
    check_shard_bytes,
    check_shard_layout,
    first_problem_raises,
    obs_shard_path,
    shard_tiles,
)

if TYPE_CHECKING:
    from deltacells.format import Manifest, ManifestFields, ObsSchema
    from deltacells.storage import BaseStore

__all__ = ["read_shard_bytes", "tile_columns"]


def read_shard_bytes(store: BaseStore, manifest: Manifest, shard: int) -> bytes:
    """Read shard ``shard`` whole and check its size and SHA-256 against the manifest.

    Raises
    ------
    FormatError
        Naming the shard file, if its size or SHA-256 differs from ``manifest.json``.
    MissingObjectError
        If the shard is missing.
    """
    blob = store.read(obs_shard_path(shard))
    first_problem_raises(check_shard_bytes(blob, shard, manifest.to_fields()), store.url)
    return blob


@contextlib.contextmanager
def _open_parquet(store: BaseStore, shard: int, blob: bytes | None, size: int) -> Iterator[pq.ParquetFile]:
    """A ParquetFile over ``blob``, or over ranged reads of the stored shard when ``blob`` is None."""
    name = obs_shard_path(shard)
    with contextlib.ExitStack() as stack:
        ranged = blob is None  # read only the footer and the column chunks asked for
        source = stack.enter_context(store.open_file(name, size)) if ranged else pa.BufferReader(blob)
        try:
            parquet = pq.ParquetFile(source)
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise Problem(name, f"not a readable parquet file ({exc})").to_exception(store.url) from exc
        yield parquet


def tile_columns(
    store: BaseStore,
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
    name = obs_shard_path(shard)
    fields: ManifestFields = manifest.to_fields()
    with _open_parquet(store, shard, blob, int(manifest.obs_shard_bytes[shard])) as parquet:
        first_problem_raises(check_shard_layout(parquet, shard, schema, fields), store.url)
        for group, tile in enumerate(shard_tiles(fields, shard)):
            at = f"row group {group} (tile {tile}): "
            try:
                table = parquet.read_row_group(group, columns=names, use_threads=False)
            except (pa.ArrowException, OSError) as exc:
                raise Problem(name, f"{at}cannot be read ({exc})").to_exception(store.url) from exc
            out: dict[str, pa.Array] = {}
            for column_name in names:
                column = schema.column(column_name)
                chunks = table.column(column_name)
                values = chunks.combine_chunks() if chunks.num_chunks != 1 else chunks.chunk(0)
                if len(values) != int(manifest.tile_cells[tile]) or values.type != column.pa_type:
                    problem = Problem(
                        name,
                        f"{at}column {column_name!r} read as {len(values)} values of {values.type}, expected "
                        f"{int(manifest.tile_cells[tile])} of {column.arrow_type}",
                    )
                    raise problem.to_exception(store.url)
                if column.kind == "category":
                    first_problem_raises(check_codes(column, values, name, at), store.url)
                out[column_name] = values
            yield tile, out
