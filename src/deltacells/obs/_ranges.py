"""Byte ranges of parquet files read through a store, and a file object that serves them to pyarrow.

Reading a few columns of a parquet file over object storage costs one request per read that pyarrow makes
(the footer, then one column chunk after the other) unless the reads are planned: this module finds the
footer in one ranged read of the file's tail (:func:`footer_tail_start`, :func:`footer_length`), the byte
range of every column chunk wanted from the parsed metadata (:func:`column_chunk_ranges`), coalesces them
into few requests (:func:`coalesce`, with :func:`fsspec.utils.merge_offset_ranges`) that the caller sends
at once (``store.read_many``), and serves the bytes read to :class:`pyarrow.parquet.ParquetFile` through
:class:`KnownRangesFile`, a :class:`~deltacells.storage.StoreFile` whose rare misses become one more ranged read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from fsspec.utils import merge_offset_ranges

from deltacells.storage import StoreFile

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from deltacells.storage import BaseStore

__all__ = [
    "FOOTER_BYTES_PER_CHUNK",
    "FOOTER_TAIL",
    "MAX_BLOCK",
    "MAX_GAP",
    "PARQUET_MAGIC",
    "VERIFY_BLOCK",
    "KnownRangesFile",
    "block_ranges",
    "coalesce",
    "column_chunk_ranges",
    "footer_length",
    "footer_tail_start",
]

#: The magic bytes at both ends of a parquet file.
PARQUET_MAGIC = b"PAR1"

#: Bytes read at least from a shard's tail to find its footer (pyarrow's own first read is as long).
FOOTER_TAIL = 64 * 1024

#: Estimated footer bytes per column chunk (without statistics, as docs/format.md recommends: ~70 seen), so that
#: the first read of the tail holds the whole footer of a shard of many row groups.
FOOTER_BYTES_PER_CHUNK = 96

#: Column chunk ranges closer than this are fetched by one request (the bytes between are read and dropped).
MAX_GAP = 64 * 1024

#: Ranges are not coalesced beyond this size, so that the pieces of one shard are fetched concurrently.
MAX_BLOCK = 8 * 1024 * 1024

#: Size of the concurrent ranged reads that fetch a whole shard to check its SHA-256.
VERIFY_BLOCK = 8 * 1024 * 1024

Range = tuple[int, int]


def footer_tail_start(size: int, n_row_groups: int, n_columns: int) -> int:
    """Where to start the one ranged read that should hold the whole footer of a parquet file.

    Parameters
    ----------
    size
        The file's size in bytes.
    n_row_groups, n_columns
        The expected number of row groups and columns: the footer grows with their product.

    Returns
    -------
    int
        The offset of the tail to read: at least :data:`FOOTER_TAIL` bytes before the end (or 0).
    """
    estimate = 16 * 1024 + FOOTER_BYTES_PER_CHUNK * max(0, n_row_groups) * max(0, n_columns)
    return max(0, size - max(FOOTER_TAIL, estimate))


def footer_length(tail: bytes) -> int | None:
    """The length of the footer (metadata + 8 bytes) that ``tail``, the end of a parquet file, announces.

    Parameters
    ----------
    tail
        The last bytes of the file.

    Returns
    -------
    int or None
        ``metadata length + 8`` from the last 8 bytes (a 4-byte little-endian length and ``b"PAR1"``), or
        None when ``tail`` does not end with them.
    """
    if len(tail) < 8 or tail[-4:] != PARQUET_MAGIC:
        return None
    return int.from_bytes(tail[-8:-4], "little") + 8


def column_chunk_ranges(metadata: pq.FileMetaData, columns: Iterable[str], size: int) -> list[Range]:
    """The byte range of each column chunk of ``columns``, in every row group, as pyarrow reads them.

    A chunk starts at its dictionary page when it has one, else at its first data page, and is
    ``total_compressed_size`` bytes long. Chunks of columns the file does not have and ranges outside
    ``[0, size)`` are left out: reading those fails in pyarrow, with the error it always gave.

    Parameters
    ----------
    metadata
        The file's parsed footer.
    columns
        Column names (top-level, as the obs schema has them).
    size
        The file's size.

    Returns
    -------
    list of (int, int)
        ``(start, end)`` ranges, row group by row group.
    """
    wanted = set(columns)
    indices = [i for i in range(metadata.num_columns) if metadata.schema.column(i).path in wanted]
    ranges: list[Range] = []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in indices:
            chunk = row_group.column(index)
            start = chunk.data_page_offset
            dictionary = chunk.dictionary_page_offset
            if chunk.has_dictionary_page and dictionary is not None and 0 < dictionary < start:
                start = dictionary
            end = start + chunk.total_compressed_size
            if 0 <= start < end <= size:
                ranges.append((start, end))
    return ranges


def coalesce(
    path: str, ranges: Iterable[Range], *, max_gap: int | None = None, max_block: int | None = None
) -> list[Range]:
    """Merge ``ranges`` of one object closer than ``max_gap`` into ranges of at most ``max_block`` bytes.

    Parameters
    ----------
    path
        The object (only a label here).
    ranges
        ``(start, end)`` ranges in any order, possibly overlapping.
    max_gap, max_block
        Default :data:`MAX_GAP` and :data:`MAX_BLOCK` (read when called, so that they can be tuned).

    Returns
    -------
    list of (int, int)
        Sorted ranges covering every range given (a range longer than ``max_block`` stays whole).
    """
    ranges = sorted(ranges)
    if not ranges:
        return []
    _, starts, ends = merge_offset_ranges(
        [path] * len(ranges),
        [start for start, _ in ranges],
        [end for _, end in ranges],
        max_gap=MAX_GAP if max_gap is None else max_gap,
        max_block=MAX_BLOCK if max_block is None else max_block,
        sort=False,
    )
    return [(int(start), int(end)) for start, end in zip(starts, ends, strict=True) if end is not None]


def block_ranges(size: int, block: int | None = None) -> list[Range]:
    """``[0, size)`` cut into ranges of ``block`` bytes (default :data:`VERIFY_BLOCK`); ``[(0, 0)]`` if empty."""
    block = max(1, VERIFY_BLOCK if block is None else block)
    return [(start, min(size, start + block)) for start in range(0, size, block)] or [(0, 0)]


def _join_adjacent(parts: Mapping[Range, bytes]) -> dict[Range, bytes]:
    """``parts`` with each run of adjacent parts joined into one, in one copy.

    Any read inside a run is then inside one part, which serves it as one slice.
    """
    runs: list[tuple[int, int, list[bytes]]] = []
    for start, end in sorted(parts):
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], end, [*runs[-1][2], parts[(start, end)]])
        else:
            runs.append((start, end, [parts[(start, end)]]))
    return {(start, end): pieces[0] if len(pieces) == 1 else b"".join(pieces) for start, end, pieces in runs}


class KnownRangesFile(StoreFile):
    """A read-only parquet file made of the byte ranges already read, falling back to ranged reads of the store.

    A :class:`~deltacells.storage.StoreFile` that answers from the ranges it holds. pyarrow reads from it as
    from the whole file; a read inside one known range (found by bisection) is a slice of it, and a read
    outside them (pyarrow reading more than the column chunks planned, e.g. padding after the chunks of
    files by old writers) becomes one ranged read of the store rather than an error. Closing the file drops
    the ranges.

    Parameters
    ----------
    store, path
        As for :class:`~deltacells.storage.StoreFile`.
    size
        The object's size (required here: it is never asked of the store).
    parts
        ``{(start, end): bytes}``: the ranges read (adjacent ones are joined into one).

    Attributes
    ----------
    misses : int
        The reads that were outside the known ranges (each one ranged read of the store, also counted in
        ``requests`` and ``bytes_read``).
    """

    def __init__(self, store: BaseStore, path: str, size: int, parts: Mapping[Range, bytes]) -> None:
        super().__init__(store, path, size)
        self.misses = 0
        self._parts = _join_adjacent(parts)
        self._keys = sorted(self._parts)
        self._starts = [start for start, _ in self._keys]

    def close(self) -> None:
        """Close the file and drop the ranges it holds."""
        super().close()
        self._parts = {}
        self._keys = []
        self._starts = []

    def _read_range(self, start: int, stop: int) -> bytes:
        """A slice of the known range holding ``[start, stop)``, or else one ranged read of the store (a miss)."""
        at = bisect.bisect_right(self._starts, start) - 1
        if at >= 0:
            first, last = self._keys[at]
            if stop <= last:
                return self._parts[(first, last)][start - first : stop - first]
        self.misses += 1
        return super()._read_range(start, stop)
