"""Reading obs shards through the store: whole and checked against the manifest, or only some columns' chunks.

:func:`fetch_shards` fetches the shards a localization needs, a few at a time and the next few while the
caller decodes, each in as few concurrent requests as it can: a shard to check is read whole in blocks
(``store.read_many``) and its size and SHA-256 checked; any other shard costs one ranged read of its tail
(the footer) and then the coalesced column chunks of the columns asked for. :func:`tile_columns` reads the
columns of a fetched shard from memory (a shard held whole in one call, else row group by row group), checks
them against the schema and manifest, and gives them tile by tile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from deltacells.errors import DeltaCellsError
from deltacells.format import (
    MANIFEST_NAME,
    Problem,
    check_codes,
    check_shard_bytes,
    check_shard_layout,
    first_problem_raises,
    obs_shard_path,
    shard_tiles,
)
from deltacells.obs import _ranges
from deltacells.obs._ranges import KnownRangesFile, block_ranges, coalesce, column_chunk_ranges, footer_length

if TYPE_CHECKING:
    from deltacells.format import Manifest, ManifestFields, ObsSchema
    from deltacells.storage import BaseStore, ByteRequest

__all__ = ["FetchedShard", "fetch_shards", "read_shard_bytes", "tile_columns"]

#: Shards fetched together (one batch); the next batch is fetched while the caller decodes this one.
BATCH_SHARDS = 8

#: Bytes of shards (by their size in the manifest: what a batch holds at most) fetched together.
BATCH_BYTES = 128 * 1024 * 1024

Range = tuple[int, int]


@dataclass
class FetchedShard:
    """The bytes of one shard that a localization needs, in memory.

    Attributes
    ----------
    shard
        The shard index.
    size
        Its size in bytes (from the manifest).
    blob
        The whole shard, its size and SHA-256 checked against the manifest (``verified``), or None.
    metadata
        The parsed footer, when only ``parts`` were read.
    parts
        ``{(start, end): bytes}``: the footer and the column chunks asked for (with small gaps between).
    requests
        The ranged reads that fetched it.
    error
        What went wrong with this shard (raised when the caller reaches it, in shard order).
    """

    shard: int
    size: int
    blob: bytes | None = None
    metadata: pq.FileMetaData | None = None
    parts: dict[Range, bytes] = field(default_factory=dict)
    requests: int = 0
    error: DeltaCellsError | None = None

    @property
    def name(self) -> str:
        """The shard's path in the store."""
        return obs_shard_path(self.shard)

    @property
    def verified(self) -> bool:
        """Whether the whole shard was read and its size and SHA-256 checked."""
        return self.blob is not None and self.error is None


def read_shard_bytes(store: BaseStore, manifest: Manifest, shard: int) -> bytes:
    """Read shard ``shard`` whole and check its size and SHA-256 against the manifest.

    On object storage the shard is read in blocks of :data:`~deltacells.obs._ranges.VERIFY_BLOCK` bytes,
    concurrently; on a local disk in one read.

    Raises
    ------
    FormatError
        Naming the shard file, if its size or SHA-256 differs from ``manifest.json``.
    MissingObjectError
        If the shard is missing.
    """
    requests = _whole_requests(store, obs_shard_path(shard), int(manifest.obs_shard_bytes[shard]))
    blob = _join(store.read_many(requests))
    first_problem_raises(check_shard_bytes(blob, shard, manifest.to_fields()), store.url)
    return blob


def fetch_shards(
    store: BaseStore,
    manifest: Manifest,
    schema: ObsSchema,
    plan: Sequence[tuple[int, bool]],
    names: Sequence[str],
) -> Generator[FetchedShard, None, None]:
    """Fetch the shards of ``plan``, in order, a batch at a time, the next batch while the caller decodes.

    Parameters
    ----------
    store, manifest, schema
        The dataset.
    plan
        ``(shard, verify)`` pairs: ``verify`` reads the shard whole (in concurrent blocks) and checks its
        size and SHA-256; otherwise only its footer and the column chunks of ``names`` are read.
    names
        The columns wanted.

    Yields
    ------
    FetchedShard
        One per entry of ``plan``, in order.

    Raises
    ------
    FormatError
        Naming the shard, when the caller reaches a shard whose size or SHA-256 differs from the manifest
        or whose footer cannot be read (the shards before it are yielded first).
    MissingObjectError
        If a shard of the batch being fetched is missing.
    """
    batches = _batches(manifest, plan)
    if not batches:
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltacells-obs-fetch")
    pending: Future[list[FetchedShard]] | None = None
    try:
        pending = pool.submit(_fetch_batch, store, manifest, schema, batches[0], list(names))
        for number in range(len(batches)):
            assert pending is not None  # submitted before the loop, then for each next batch
            current = pending.result()
            pending = None
            if number + 1 < len(batches):
                pending = pool.submit(_fetch_batch, store, manifest, schema, batches[number + 1], list(names))
            while current:
                fetched = current.pop(0)  # drop each shard's bytes once the caller is done with it
                if fetched.error is not None:
                    raise fetched.error
                yield fetched
    finally:
        if pending is not None:
            pending.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def _batches(manifest: Manifest, plan: Sequence[tuple[int, bool]]) -> list[list[tuple[int, bool]]]:
    """``plan`` cut into batches of at most :data:`BATCH_SHARDS` shards and :data:`BATCH_BYTES` (one at least)."""
    batches: list[list[tuple[int, bool]]] = []
    held = 0
    for shard, verify in plan:
        size = int(manifest.obs_shard_bytes[shard])
        if not batches or len(batches[-1]) >= BATCH_SHARDS or held + size > BATCH_BYTES:
            batches.append([])
            held = 0
        batches[-1].append((shard, verify))
        held += size
    return batches


def _whole_requests(store: BaseStore, name: str, size: int) -> list[ByteRequest]:
    """The reads of a whole shard: one on a local disk, else blocks (the last to the object's real end)."""
    if store.is_local:
        return [(name, None, None)]
    blocks = block_ranges(size)
    return [(name, start, end) for start, end in blocks[:-1]] + [(name, blocks[-1][0], None)]


def _join(pieces: Sequence[bytes]) -> bytes:
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _fetch_batch(
    store: BaseStore, manifest: Manifest, schema: ObsSchema, batch: list[tuple[int, bool]], names: list[str]
) -> list[FetchedShard]:
    """Fetch one batch: the whole shards to check and the tails of the others, then footers, then chunks."""
    fields = manifest.to_fields()
    shards = [FetchedShard(shard, int(manifest.obs_shard_bytes[shard])) for shard, _ in batch]
    # 1. whole shards (blocks) and tails, all at once
    requests: list[ByteRequest] = []
    owners: list[tuple[FetchedShard, bool, int]] = []  # (shard, whole?, first offset)
    for fetched, (_, verify) in zip(shards, batch, strict=True):
        if verify:
            for request in _whole_requests(store, fetched.name, fetched.size):
                requests.append(request)
                owners.append((fetched, True, request[1] or 0))
        else:
            start = _ranges.footer_tail_start(fetched.size, len(shard_tiles(fields, fetched.shard)), len(schema.names))
            requests.append((fetched.name, start, fetched.size + 1))  # one byte more: a longer object shows
            owners.append((fetched, False, start))
    answers = store.read_many(requests)
    blocks: dict[int, list[bytes]] = {}
    tails: dict[int, tuple[int, bytes]] = {}
    for (fetched, whole, start), data in zip(owners, answers, strict=True):
        fetched.requests += 1
        if whole:
            blocks.setdefault(fetched.shard, []).append(data)
        else:
            tails[fetched.shard] = (start, data)
    del answers
    for fetched in shards:
        if fetched.shard in blocks:
            blob = _join(blocks.pop(fetched.shard))
            try:
                first_problem_raises(check_shard_bytes(blob, fetched.shard, fields), store.url)
            except DeltaCellsError as exc:
                fetched.error = exc
            else:
                fetched.blob = blob
    ranged = [fetched for fetched in shards if fetched.shard in tails]
    # 2. the rest of footers longer than the tail read
    more: list[ByteRequest] = []
    longer: list[FetchedShard] = []
    for fetched in ranged:
        start, tail = tails[fetched.shard]
        try:
            need = _footer_need(store, fetched, start, tail)
        except DeltaCellsError as exc:
            fetched.error = exc
            continue
        if need < start:
            more.append((fetched.name, need, start))
            longer.append(fetched)
    for fetched, data in zip(longer, store.read_many(more) if more else [], strict=True):
        fetched.requests += 1
        start, tail = tails[fetched.shard]
        tails[fetched.shard] = (start - len(data), data + tail)
    # 3. the footers parsed, and the column chunks wanted, coalesced and read at once
    chunk_requests: list[ByteRequest] = []
    chunk_owners: list[FetchedShard] = []
    for fetched in ranged:
        if fetched.error is not None:
            continue
        start, tail = tails.pop(fetched.shard)
        length = footer_length(tail) or 0
        try:
            fetched.metadata = pq.read_metadata(pa.BufferReader(pa.py_buffer(tail)[len(tail) - length :]))
        except (pa.ArrowException, OSError) as exc:
            fetched.error = _unreadable(store, fetched, exc)
            continue
        fetched.parts[(start, start + len(tail))] = tail
        wanted = [
            (a, min(b, start)) for a, b in column_chunk_ranges(fetched.metadata, names, fetched.size) if a < start
        ]
        for a, b in coalesce(fetched.name, wanted):
            chunk_requests.append((fetched.name, a, b))
            chunk_owners.append(fetched)
    if chunk_requests:
        for fetched, request, data in zip(chunk_owners, chunk_requests, store.read_many(chunk_requests), strict=True):
            fetched.requests += 1
            fetched.parts[(request[1] or 0, (request[1] or 0) + len(data))] = data
    return shards


def _footer_need(store: BaseStore, fetched: FetchedShard, start: int, tail: bytes) -> int:
    """Where the shard's footer starts, from the tail read at ``start`` (a FormatError if it makes no sense)."""
    size = fetched.size
    if start + len(tail) != size:
        # The read's end says only that the object differs: its size, asked for (on this error path alone), says how.
        try:
            got = f"{store.size(fetched.name)}"
        except (OSError, ValueError):
            got = f"more than {size}" if start + len(tail) > size else f"{start + len(tail)}"
        problem = Problem(
            fetched.name,
            f"size is {got} bytes but {MANIFEST_NAME} field obs_shard_bytes[{fetched.shard}] says {size}; the shard "
            "does not match the manifest",
        )
        raise problem.to_exception(store.url)
    length = footer_length(tail)
    if length is None or length + 4 > size:
        problem = Problem(fetched.name, "not a readable parquet file (no parquet footer at its end)")
        raise problem.to_exception(store.url)
    return size - length


def _unreadable(store: BaseStore, fetched: FetchedShard, exc: BaseException) -> DeltaCellsError:
    error = Problem(fetched.name, f"not a readable parquet file ({exc})").to_exception(store.url)
    error.__cause__ = exc
    return error


@contextlib.contextmanager
def _open_parquet(store: BaseStore, fetched: FetchedShard) -> Iterator[tuple[pq.ParquetFile, bool]]:
    """A ParquetFile over the whole shard in memory, or over the ranges of it that were read; whether whole."""
    with contextlib.ExitStack() as stack:
        whole = fetched.blob if fetched.blob is not None else fetched.parts.get((0, fetched.size))
        if whole is not None:  # checked, or a shard so small that the read of its tail holds it whole
            source: pa.BufferReader | KnownRangesFile = pa.BufferReader(whole)
            fetched.parts = {}
        else:
            source = stack.enter_context(KnownRangesFile(store, fetched.name, fetched.size, fetched.parts))
            fetched.parts = {}
        try:
            parquet = pq.ParquetFile(source, metadata=fetched.metadata)
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise _unreadable(store, fetched, exc) from exc
        yield parquet, whole is not None


def tile_columns(
    store: BaseStore,
    manifest: Manifest,
    schema: ObsSchema,
    fetched: FetchedShard,
    names: list[str],
) -> Iterator[tuple[int, dict[str, pa.Array]]]:
    """Yield ``(tile, {name: values})`` for each tile of a fetched shard, reading only the columns ``names``.

    A shard held whole in memory has its columns read in one call, checked once, and cut into the tiles'
    rows (slices, no copy): reading row group after row group costs a call of pyarrow's each, which was most
    of localizing a column of many small tiles. Such a shard that fails a check is read again row group by
    row group, for the error to name the row group and tile at fault. A shard of which only some ranges were
    read (over the network) is read row group by row group: pyarrow reads a column of several row groups as
    one range, gaps included, which were not fetched.

    Parameters
    ----------
    store, manifest, schema
        The dataset.
    fetched
        The shard's bytes, from :func:`fetch_shards` (with ``names`` among the columns fetched).
    names
        The columns to read.

    Raises
    ------
    FormatError
        Naming the shard and the field at fault, for a layout that differs from the schema and manifest or
        category codes out of range.
    """
    fields: ManifestFields = manifest.to_fields()
    with _open_parquet(store, fetched) as (parquet, in_memory):
        first_problem_raises(check_shard_layout(parquet, fetched.shard, schema, fields), store.url)
        tiles = shard_tiles(fields, fetched.shard)
        whole = _read_whole(parquet, manifest, schema, tiles, names) if in_memory else None
        if whole is None:  # read in ranges, or something is wrong (found row group by row group)
            yield from _row_groups(store, manifest, schema, fetched, parquet, names)  # raises on a bad one
            return
        start = 0
        for tile in tiles:
            rows = int(manifest.tile_cells[tile])
            yield tile, {name: _one_array(values.slice(start, rows)) for name, values in whole.items()}
            start += rows


def _read_whole(
    parquet: pq.ParquetFile, manifest: Manifest, schema: ObsSchema, tiles: range, names: list[str]
) -> dict[str, pa.ChunkedArray] | None:
    """The columns ``names`` of every row group at once, or None when they cannot be read or fail a check."""
    try:
        table = parquet.read(columns=names, use_threads=False)  # pyarrow's threads: more memory kept, no faster
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        return None
    rows = int(manifest.tile_cells[tiles.start : tiles.stop].sum())
    columns: dict[str, pa.ChunkedArray] = {}
    for name in names:
        column = schema.column(name)
        values = table.column(name)
        if len(values) != rows or values.type != column.pa_type:
            return None
        if column.kind == "category" and next(check_codes(column, values, "", ""), None) is not None:
            return None
        columns[name] = values
    return columns


def _one_array(values: pa.ChunkedArray) -> pa.Array:
    """A tile's slice of a column as one array: a view when it lies in one chunk of the column read."""
    return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()


def _row_groups(
    store: BaseStore,
    manifest: Manifest,
    schema: ObsSchema,
    fetched: FetchedShard,
    parquet: pq.ParquetFile,
    names: list[str],
) -> Iterator[tuple[int, dict[str, pa.Array]]]:
    """:func:`tile_columns` one row group at a time, each checked: the first that fails a check raises."""
    name = fetched.name
    for group, tile in enumerate(shard_tiles(manifest.to_fields(), fetched.shard)):
        at = f"row group {group} (tile {tile}): "
        try:
            table = parquet.read_row_group(group, columns=names, use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise Problem(name, f"{at}cannot be read ({exc})").to_exception(store.url) from exc
        out: dict[str, pa.Array] = {}
        for column_name in names:
            column = schema.column(column_name)
            values = _one_array(table.column(column_name))
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
