"""Byte ranges of parquet files read through a store, and a file object that serves them to pyarrow.

Reading a few columns of a parquet file over object storage costs one request per read that pyarrow makes
(the footer, then one column chunk after the other) unless the reads are planned: this module finds the
footer in one ranged read of the file's tail (:func:`footer_tail_start`, :func:`footer_length`), the byte
range of every column chunk wanted from the parsed metadata (:func:`column_chunk_ranges`), coalesces them
into few requests (:func:`coalesce`, with :func:`fsspec.utils.merge_offset_ranges`) that the caller sends
at once (``store.read_many``), and serves the bytes read to :class:`pyarrow.parquet.ParquetFile` through
:class:`KnownRangesFile`, fsspec's "known parts" file whose rare misses become one more ranged read.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from fsspec.caching import KnownPartsOfAFile
from fsspec.spec import AbstractBufferedFile
from fsspec.utils import merge_offset_ranges

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

#: Estimated footer bytes per column chunk (without statistics, as FORMAT.md recommends: ~70 seen), so that
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


class _KnownRanges(KnownPartsOfAFile):
    """fsspec's known parts of a file, found by bisection; a read outside them is fetched, not refused."""

    def __init__(
        self, blocksize: int, fetcher: Callable[[int, int], bytes], size: int, data: dict[Range, bytes]
    ) -> None:
        super().__init__(blocksize, fetcher, size, data=_join_adjacent(data), strict=True)
        self.hit_count = self.miss_count = 0  # fsspec's statistics (set here too for fsspec versions without them)
        self.file_size = size
        self._keys = sorted(self.data)
        self._starts = [start for start, _ in self._keys]
        self.misses = 0

    def _fetch(self, start: int | None, stop: int | None) -> bytes:
        start = 0 if start is None else start
        stop = self.file_size if stop is None else min(stop, self.file_size)
        if stop <= start:
            return b""
        at = bisect.bisect_right(self._starts, start) - 1
        if at >= 0:
            first, last = self._keys[at]
            if stop <= last:
                self.hit_count += 1
                return self.data[(first, last)][start - first : stop - first]
        self.miss_count += 1
        self.misses += 1
        return self.fetcher(start, stop)


def _join_adjacent(parts: Mapping[Range, bytes]) -> dict[Range, bytes]:
    """``parts`` with each run of adjacent parts joined into one, in one copy.

    Any read inside a run is then inside one part (fsspec's constructor would join them, one ``+=`` at a time).
    """
    runs: list[tuple[int, int, list[bytes]]] = []
    for start, end in sorted(parts):
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], end, [*runs[-1][2], parts[(start, end)]])
        else:
            runs.append((start, end, [parts[(start, end)]]))
    return {(start, end): pieces[0] if len(pieces) == 1 else b"".join(pieces) for start, end, pieces in runs}


class KnownRangesFile(AbstractBufferedFile):
    """A read-only parquet file made of the byte ranges already read (fsspec's ``KnownPartsOfAFile``).

    pyarrow reads from it as from the whole file; a read outside the ranges known (pyarrow reading more
    than the column chunks planned, e.g. padding after the chunks of files by old writers) becomes one ranged
    read of the store rather than an error.

    Parameters
    ----------
    store
        The store holding the object.
    path
        The object, relative to the store's root.
    size
        The object's size.
    parts
        ``{(start, end): bytes}``: the ranges read (adjacent ones are joined into one).

    Attributes
    ----------
    misses : int
        The reads that were outside the known ranges (each one ranged read of the store).
    """

    def __init__(self, store: BaseStore, path: str, size: int, parts: Mapping[Range, bytes]) -> None:
        self.store = store
        super().__init__(None, path, mode="rb", cache_type="none", size=size)
        self.cache = _KnownRanges(self.blocksize, self._fetch_range, size, dict(parts))

    @property
    def misses(self) -> int:
        """The reads outside the known ranges so far."""
        cache = self.cache
        return cache.misses if isinstance(cache, _KnownRanges) else 0

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.store.read(self.path, start, end)
