"""Decoding some chunks of a tile from byte ranges (docs/format.md, "A tile").

A reader on object storage need not fetch a whole tile to read a few of its cells:

1. fetch ``[0, min(prefix_size(n_cells, n_chunks), object_size))`` and :func:`parse_prefix`
   it (header, chunk table and indptr, all checked);
2. ask the :class:`TilePrefix` which chunks hold the cells (:meth:`TilePrefix.chunks_for_cells`)
   and which byte ranges hold their frames (:meth:`TilePrefix.frame_ranges`);
3. fetch those ranges and :func:`decode_chunks` them.

Every rule of the format is checked on what is read, except the CRC-32, which covers the
whole tile and cannot be checked from ranges. Nothing is allocated on the strength of a
header field before it has been checked against the object size the caller knows.

A reader holding the whole object (a local file, or a tile fetched whole) but wanting a
few of its cells :func:`parse_tile` s it instead (the same checks, the CRC-32 included)
and passes the object as the one piece ``[(0, blob)]``. Two partial decodings of a tile
combine with :func:`merge_partial` (what a cache of partial tiles does when more chunks
of a tile are asked for).
"""

from __future__ import annotations

import operator
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._kernel_loading import prepare_kernels
from deltacells._memory import empty_pair
from deltacells._threads import default_threads, shared_pool
from deltacells.codec._decode import (
    _PARALLEL_MIN_NNZ,
    CheckedTile,
    DecodedTile,
    _check_frame_sizes,
    _check_indptr,
    _decode_chunk,
    check_crc,
    check_table,
    chunk_bounds,
    require_little_endian,
    work_units,
)
from deltacells.codec._layout import (
    ALIGNMENT,
    CELL_HI,
    CELL_LO,
    CHUNK_ENTRY_SIZE,
    GAPS_LEN,
    GAPS_OFF,
    GEXC_LEN,
    GEXC_OFF,
    HEADER_SIZE,
    NNZ_HI,
    NNZ_LO,
    VALS_LEN,
    VALS_OFF,
    VEXC_LEN,
    VEXC_OFF,
    TileHeader,
    align,
    read_chunk_table,
)
from deltacells.errors import (
    FormatError,
    InvalidTypeError,
    InvalidValueError,
    OutOfRangeError,
    PrefixTooShortError,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "PieceSource",
    "checked_pieces",
    "PrefixTooShortError",
    "TilePrefix",
    "decode_chunks",
    "merge_partial",
    "parse_prefix",
    "parse_tile",
    "prefix_size",
]

#: Frames of one tile closer than this are fetched in one ranged request (the bytes between come along). Measured
#: (``benchmarks/bench_object_storage.py``, docs/performance.md "Chunks per tile"): random subsets read from an S3
#: server with 30 ms a request, merging frames up to 0 .. 512 KiB apart; this is the widest gap for which every
#: draw of a random 0.1% moved at most 12% of the tile bytes (wider gaps save requests, and move more bytes).
DEFAULT_MAX_GAP = 32 * 1024

_FRAME_COLUMNS = ((GAPS_OFF, GAPS_LEN), (VALS_OFF, VALS_LEN), (VEXC_OFF, VEXC_LEN), (GEXC_OFF, GEXC_LEN))


def prefix_size(n_cells: int, n_chunks: int) -> int:
    """Bytes from offset 0 that hold the header, chunk table and indptr of a tile of our writer.

    The reference writer puts the indptr right after the chunk table (8-aligned). A
    reader fetches ``[0, min(prefix_size(n_cells, n_chunks), object_size))`` first; a
    tile laid out otherwise (another writer, padding) makes :func:`parse_prefix`
    raise :class:`PrefixTooShortError` with the size it needs.

    Parameters
    ----------
    n_cells
        Cells of the tile.
    n_chunks
        Chunks of the tile (the writer makes ``min(n_chunks, n_cells)`` of them).

    Returns
    -------
    int
        ``align(64 + 96 * n_chunks) + 8 * (n_cells + 1)``.

    Examples
    --------
    >>> prefix_size(1000, 8)
    8840
    """
    n_cells, n_chunks = operator.index(n_cells), operator.index(n_chunks)
    if n_cells < 0 or n_chunks < 0:
        msg = f"n_cells and n_chunks must be >= 0, got {n_cells} and {n_chunks}"
        raise InvalidValueError(msg)
    return align(HEADER_SIZE + CHUNK_ENTRY_SIZE * n_chunks) + 8 * (n_cells + 1)


@dataclass(frozen=True, slots=True, eq=False)
class TilePrefix:
    """The checked header, indptr and chunk table of a tile: what a ranged reader needs first.

    Made by :func:`parse_prefix`; the arrays are read-only copies (the fetched
    bytes can be dropped).

    Attributes
    ----------
    header
        The tile's header (its ``total_size`` is the object size).
    indptr
        ``int64[n_cells + 1]`` row pointers of the whole tile.
    table
        The chunk table, ``uint64[n_chunks, 12]`` (columns as in docs/format.md).
    """

    header: TileHeader
    indptr: np.ndarray
    table: np.ndarray

    @property
    def n_cells(self) -> int:
        """Cells of the tile."""
        return self.header.n_cells

    @property
    def n_chunks(self) -> int:
        """Chunks of the tile."""
        return self.header.n_chunks

    @property
    def chunk_bounds(self) -> np.ndarray:
        """``int64[n_chunks + 1]``: chunk ``c`` holds cells ``chunk_bounds[c] .. chunk_bounds[c + 1] - 1``."""
        return chunk_bounds(self.table, self.header.n_cells)

    @property
    def nbytes_needed(self) -> int:
        """Bytes from offset 0 that hold the header, chunk table and indptr (where the indptr ends)."""
        return self.header.indptr_off + 8 * (self.header.n_cells + 1)

    def chunks_for_cells(self, cells: np.ndarray | Sequence[int]) -> np.ndarray:
        """Return the chunks that hold ``cells``.

        Parameters
        ----------
        cells
            Cell numbers within the tile, ``0 .. n_cells - 1``, in any order, repeats allowed.

        Returns
        -------
        numpy.ndarray
            Sorted unique chunk numbers (``intp``). Chunk ``c`` holds cells
            ``[cell_lo, cell_hi)``; a chunk without cells is never returned.

        Raises
        ------
        OutOfRangeError
            If a cell number is outside the tile.
        """
        cells = _numbers(cells, self.n_cells, "cell")
        cell_hi = self.table[:, CELL_HI].astype(np.int64)
        return np.unique(np.searchsorted(cell_hi, cells, side="right")).astype(np.intp)

    def frame_ranges(self, chunks: np.ndarray | Sequence[int], *, max_gap: int | None = None) -> list[tuple[int, int]]:
        """Return the byte ranges to fetch for the frames of ``chunks``.

        Parameters
        ----------
        chunks
            Chunk numbers (any order, repeats allowed).
        max_gap
            Frames separated by fewer than this many bytes (default :data:`DEFAULT_MAX_GAP`, read when
            called) are fetched in one range (the bytes in between come along). Adjacent frames always are, and so
            are frames separated only by alignment padding (fewer than 8 bytes), so
            a run of consecutive chunks of a tile of our writer is one range.

        Returns
        -------
        list of tuple of int
            Sorted, disjoint ``[start, end)`` ranges covering every frame of the
            chunks (gaps, vals, and vexc / gexc where present).

        Raises
        ------
        OutOfRangeError
            If a chunk number is outside the tile.
        """
        rows = self.table[_numbers(chunks, self.n_chunks, "chunk")]
        spans = sorted(
            (int(off), int(off) + int(length))
            for off_col, len_col in _FRAME_COLUMNS
            for off, length in zip(rows[:, off_col], rows[:, len_col], strict=True)
            if length
        )
        join_below = max(operator.index(DEFAULT_MAX_GAP if max_gap is None else max_gap), ALIGNMENT)
        merged: list[tuple[int, int]] = []
        for start, end in spans:
            if merged and start - merged[-1][1] < join_below:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged

    def frame_bytes(self, chunks: np.ndarray | Sequence[int]) -> int:
        """Return the bytes of the frames of ``chunks`` (to choose between ranged reads and the whole object)."""
        rows = self.table[_numbers(chunks, self.n_chunks, "chunk")]
        return sum(int(rows[:, len_col].sum()) for _, len_col in _FRAME_COLUMNS)


def parse_prefix(
    data: bytes | bytearray | memoryview,
    *,
    object_size: int,
    name: str = "tile",
    n_cells: int | None = None,
    n_chunks: int | None = None,
) -> TilePrefix:
    """Check and parse the header, chunk table and indptr at the start of a tile.

    Every rule :func:`~deltacells.decode_tile` checks on these parts is checked
    (header fields, ``total_size == object_size``, the chunk table and indptr fit in
    the object, indptr non-decreasing and consistent with the header and chunk
    table, every stream inside the object), except the CRC-32, which needs the
    whole object.

    Parameters
    ----------
    data
        The first bytes of the tile object, e.g.
        ``[0, min(prefix_size(n_cells, n_chunks), object_size))``.
    object_size
        Size of the whole object (from the manifest or the store).
    name
        How to call the object in error messages (e.g. its path).
    n_cells, n_chunks
        The cells and chunks the caller expects the tile to have, if it knows them
        (a different header value is a :class:`~deltacells.FormatError`).

    Returns
    -------
    TilePrefix

    Raises
    ------
    PrefixTooShortError
        If ``data`` ends before the indptr does (but the object is large enough):
        its ``needed`` says how many bytes to fetch.
    FormatError
        If the header, chunk table or indptr break a rule of the format; the message
        names ``name`` and the field at fault.
    InvalidValueError
        If ``data`` is longer than ``object_size``.

    Examples
    --------
    >>> import numpy as np, deltacells
    >>> from deltacells.codec import decode_chunks, parse_prefix, prefix_size
    >>> indptr, indices, data = np.array([0, 2, 2, 3]), np.array([1, 4, 0]), np.array([5, 1, 7])
    >>> blob = deltacells.encode_tile(indptr, indices, data, n_genes=6, n_chunks=2)
    >>> prefix = parse_prefix(blob[: prefix_size(3, 2)], object_size=len(blob))
    >>> chunks = prefix.chunks_for_cells([2])
    >>> pieces = [(start, blob[start:end]) for start, end in prefix.frame_ranges(chunks)]
    >>> tile = decode_chunks(prefix, pieces, chunks)
    >>> tile.indptr.tolist(), tile.indices.tolist(), tile.complete
    ([0, 0, 0, 1], [0], False)
    """
    require_little_endian()
    view = memoryview(data).cast("B")
    object_size = operator.index(object_size)
    if len(view) > object_size:
        msg = f"{name}: {len(view)} bytes given as the start of an object of {object_size} bytes"
        raise InvalidValueError(msg)
    if len(view) < HEADER_SIZE <= object_size:
        raise PrefixTooShortError(HEADER_SIZE, len(view), name)
    # Checked against object_size, not the bytes given: also that the table and indptr end inside the object.
    header = TileHeader.unpack(view[:HEADER_SIZE], name=name, object_size=object_size)
    for field, want in (("n_cells", n_cells), ("n_chunks", n_chunks)):
        if want is not None and getattr(header, field) != want:
            msg = f"{name}: header field {field} is {getattr(header, field)}, expected {want}"
            raise FormatError(msg)
    needed = header.indptr_off + 8 * (header.n_cells + 1)
    if len(view) < needed:
        raise PrefixTooShortError(needed, len(view), name)
    indptr = np.frombuffer(view, dtype="<i8", count=header.n_cells + 1, offset=header.indptr_off).astype(
        np.int64, copy=True
    )
    _check_indptr(indptr, header, name)
    table = read_chunk_table(view, header).astype(np.uint64, copy=True)
    indptr.flags.writeable = table.flags.writeable = False  # what the kernels are compiled for (and never write)
    check_table(table, indptr, header, name)
    return TilePrefix(header, indptr, table)


def parse_tile(blob: bytes | bytearray | memoryview, *, name: str = "tile", n_cells: int | None = None) -> TilePrefix:
    """Check and parse the header, CRC-32, chunk table and indptr of a whole tile object.

    What :func:`~deltacells.decode_tile` checks before it decompresses anything, in the
    same order (header, CRC-32 of the payload, indptr, chunk table): the frames of the
    chunks to decode are then checked by :func:`decode_chunks`, given the object as
    the one piece ``[(0, blob)]``. Every rule of docs/format.md is so checked on a tile of
    which only some chunks are decoded.

    Parameters
    ----------
    blob
        The whole tile object.
    name
        How to call the object in error messages (e.g. its path).
    n_cells
        The cells the caller expects the tile to have, if it knows them.

    Returns
    -------
    TilePrefix

    Raises
    ------
    FormatError
        If the header, CRC-32, chunk table or indptr break a rule of the format.

    Examples
    --------
    >>> import numpy as np, deltacells
    >>> from deltacells.codec._partial import decode_chunks, parse_tile
    >>> blob = deltacells.encode_tile(np.array([0, 2, 2, 3]), np.array([1, 4, 0]), np.array([5, 1, 7]), 6, n_chunks=2)
    >>> prefix = parse_tile(blob)
    >>> tile = decode_chunks(prefix, [(0, blob)], prefix.chunks_for_cells([2]))
    >>> tile.indices.tolist(), tile.chunk_mask.tolist()
    ([0], [False, True])
    """
    require_little_endian()
    view = memoryview(blob).cast("B")
    header = TileHeader.unpack(view, name=name)
    check_crc(view, header, name)
    return parse_prefix(view, object_size=len(view), name=name, n_cells=n_cells)


def merge_partial(first: DecodedTile, second: DecodedTile) -> DecodedTile:
    """Merge two decodings of some chunks of one tile into one holding the chunks of both.

    Chunks are consecutive runs of cells, so the result is built chunk by chunk: each
    chunk decoded in either tile is copied (from ``first`` when both hold it), the cells
    of the chunks in neither stay empty rows.

    Parameters
    ----------
    first, second
        Tiles of :func:`decode_chunks` or :func:`~deltacells.decode_tile` (they carry
        ``chunk_bounds`` and ``chunk_mask``) of the same tile.

    Returns
    -------
    DecodedTile
        ``first`` or ``second`` itself when it holds every chunk of the other; else a new
        tile (arrays of its own) whose ``chunk_mask`` is the union, ``complete`` when
        that is every chunk.

    Raises
    ------
    InvalidValueError
        If a tile does not say which chunks it holds, or the two have different shapes or
        chunk boundaries (they are not decodings of the same tile).

    Examples
    --------
    >>> import numpy as np, deltacells
    >>> from deltacells.codec._partial import decode_chunks, merge_partial, parse_tile
    >>> blob = deltacells.encode_tile(np.array([0, 2, 2, 3]), np.array([1, 4, 0]), np.array([5, 1, 7]), 6, n_chunks=2)
    >>> prefix = parse_tile(blob)
    >>> a, b = decode_chunks(prefix, [(0, blob)], [0]), decode_chunks(prefix, [(0, blob)], [1])
    >>> merged = merge_partial(a, b)
    >>> merged.indptr.tolist(), merged.indices.tolist(), merged.complete
    ([0, 2, 2, 3], [1, 4, 0], True)
    """
    for tile in (first, second):
        if tile.chunk_bounds is None or tile.chunk_mask is None:
            msg = "a tile without chunk_bounds and chunk_mask cannot be merged (it does not say which chunks it holds)"
            raise InvalidValueError(msg)
    assert first.chunk_bounds is not None and first.chunk_mask is not None
    assert second.chunk_bounds is not None and second.chunk_mask is not None
    bounds, mask_a, mask_b = first.chunk_bounds, first.chunk_mask, second.chunk_mask
    if first.shape != second.shape or not np.array_equal(bounds, second.chunk_bounds):
        msg = (
            f"cannot merge a {first.shape} tile of {mask_a.shape[0]} chunks with a {second.shape} tile of "
            f"{mask_b.shape[0]} chunks at other cells: they are not decodings of the same tile"
        )
        raise InvalidValueError(msg)
    if first.complete or np.all(mask_a >= mask_b):
        return first
    if second.complete or np.all(mask_b >= mask_a):
        return second
    owner = np.where(mask_a, 1, np.where(mask_b, 2, 0)).astype(np.int8)  # which tile each chunk comes from
    cell_owner = np.repeat(owner, np.diff(bounds))
    lengths = np.where(cell_owner == 1, np.diff(first.indptr), np.where(cell_owner == 2, np.diff(second.indptr), 0))
    indptr = np.zeros(first.n_cells + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    indices, data = empty_pair(nnz, first.indices.dtype, first.data.dtype)
    for c in np.flatnonzero(owner).tolist():  # one copy per chunk
        source = first if owner[c] == 1 else second
        lo, hi = int(bounds[c]), int(bounds[c + 1])
        start, stop, at = int(source.indptr[lo]), int(source.indptr[hi]), int(indptr[lo])
        indices[at : at + stop - start] = source.indices[start:stop]
        data[at : at + stop - start] = source.data[start:stop]
    mask = mask_a | mask_b
    return DecodedTile(
        indptr=indptr,
        indices=indices,
        data=data,
        n_genes=first.n_genes,
        inexact_in_float32=first.inexact_in_float32 or second.inexact_in_float32,
        complete=bool(mask.all()),
        chunk_bounds=bounds.copy(),
        chunk_mask=mask,
    )


class PieceSource:
    """A :class:`~deltacells.codec._sources.ByteSource` over byte ranges fetched from a tile object.

    Parameters
    ----------
    pieces
        ``{start: bytes}`` or ``[(start, bytes), ...]``: each piece holds the object's
        bytes ``[start, start + len(piece))``. Pieces may overlap.
    object_size
        Size of the whole object; a piece reaching past it is refused.

    Raises
    ------
    InvalidValueError
        If a piece starts before 0 or ends past the object.
    """

    __slots__ = ("_ends", "_reach", "_starts", "_views")

    def __init__(
        self, pieces: Mapping[int, bytes | memoryview] | Sequence[tuple[int, bytes | memoryview]], object_size: int
    ) -> None:
        items = pieces.items() if isinstance(pieces, Mapping) else pieces
        normalized = []
        for start, piece in items:
            start = operator.index(start)
            view = memoryview(piece).cast("B")
            if start < 0 or start + len(view) > object_size:
                msg = (
                    f"a piece of {len(view)} bytes at offset {start} is not inside the object "
                    f"(0 .. {object_size} bytes)"
                )
                raise InvalidValueError(msg)
            normalized.append((start, view))
        normalized.sort(key=lambda p: p[0])
        self._starts = [start for start, _ in normalized]
        self._views = [view for _, view in normalized]
        self._ends = [start + len(view) for start, view in normalized]
        reach, self._reach = 0, []
        for end in self._ends:
            reach = max(reach, end)
            self._reach.append(reach)

    def read(self, start: int, length: int, where: str) -> memoryview:
        """Return bytes ``[start, start + length)`` of the object from the piece that holds them (no copy).

        Raises
        ------
        InvalidValueError
            If no piece holds the whole range: the caller did not fetch every range
            :meth:`TilePrefix.frame_ranges` gives for the chunks it decodes.
        """
        end = start + length
        i = bisect_right(self._starts, start) - 1
        # The piece starting last at or before ``start``; with overlapping pieces an earlier, longer one may hold it.
        while i >= 0 and self._reach[i] >= end:
            if self._ends[i] >= end:
                s = self._starts[i]
                return self._views[i][start - s : end - s]
            i -= 1
        msg = (
            f"{where}: bytes [{start}, {end}) are in none of the pieces given; fetch every range that "
            f"TilePrefix.frame_ranges gives for the chunks to decode"
        )
        raise InvalidValueError(msg)


def decode_chunks(
    prefix: TilePrefix,
    pieces: Mapping[int, bytes | memoryview] | Sequence[tuple[int, bytes | memoryview]],
    chunks: np.ndarray | Sequence[int],
    *,
    name: str = "tile",
    threads: int | None = 1,
) -> DecodedTile:
    """Decode some chunks of a tile from byte ranges fetched from it.

    Every frame of the chunks is checked as :func:`~deltacells.decode_tile` checks
    it (declared sizes, exception frames, gene range, counts ``>= 1``).

    Parameters
    ----------
    prefix
        The tile's parsed prefix (:func:`parse_prefix`).
    pieces
        ``{start: bytes}`` or ``[(start, bytes), ...]``: bytes of the object at
        absolute offsets, covering every frame of ``chunks`` (e.g. the ranges of
        :meth:`TilePrefix.frame_ranges`).
    chunks
        Chunk numbers to decode (any order, repeats allowed).
    name
        How to call the object in error messages (e.g. its path).
    threads
        Threads that decode the chunks; ``None`` uses the shared pool when there
        are enough nonzeros, ``1`` (the default) decodes on the calling thread.

    Returns
    -------
    DecodedTile
        The whole tile's row structure: ``indptr`` has ``n_cells + 1`` entries and
        the cells of chunks not decoded are empty rows; ``indices`` and ``data``
        hold the decoded chunks' nonzeros, so a decoded cell's row equals its row
        in :func:`~deltacells.decode_tile`'s result. ``complete`` is false unless
        every chunk of the tile was decoded; ``chunk_mask`` says which were, and
        ``chunk_bounds`` which cells each chunk holds (see :func:`merge_partial`).

    Raises
    ------
    FormatError
        If a frame of the chunks breaks a rule of the format; the message names
        ``name``, the chunk and the stream.
    InvalidValueError
        If ``pieces`` miss bytes of a frame of ``chunks`` (or reach outside the object).
    OutOfRangeError
        If a chunk number is outside the tile.
    """
    require_little_endian()
    header, table, indptr = prefix.header, prefix.table, prefix.indptr
    chunks = _numbers(chunks, header.n_chunks, "chunk")
    source = PieceSource(pieces, header.total_size)
    _check_frame_sizes(source, table, chunks.tolist(), name)  # bounds every chunk's nonzeros before allocating

    rows = table[chunks]
    counts = (rows[:, NNZ_HI] - rows[:, NNZ_LO]).astype(np.int64)
    offsets = np.zeros(chunks.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    nnz = int(offsets[-1])
    prepare_kernels(nnz)  # as decode_tile: the compiled kernels start loading, and a large decoding waits for them
    indices, data = empty_pair(nnz, np.int32, np.int32)

    # Cells of the chunks not decoded become empty rows; the others keep their lengths.
    selected = np.zeros(header.n_chunks, dtype=bool)
    selected[chunks] = True
    in_selected = np.repeat(selected, (table[:, CELL_HI] - table[:, CELL_LO]).astype(np.intp))
    out_indptr = np.zeros(header.n_cells + 1, dtype=np.int64)
    np.cumsum(np.where(in_selected, np.diff(indptr), 0), out=out_indptr[1:])

    work = [
        (
            source,
            table[c],
            indptr,
            header.n_genes,
            indices[offsets[k] : offsets[k + 1]],
            data[offsets[k] : offsets[k + 1]],
            f"{name}: chunk {c}",
        )
        for k, c in enumerate(chunks.tolist())
    ]
    n_threads = default_threads() if threads is None else threads
    units = work_units(table, chunks) if n_threads > 1 and nnz >= _PARALLEL_MIN_NNZ else []
    if len(units) > 1:  # the units cut ``chunks`` (sorted, as ``work``) into consecutive runs
        ends = np.cumsum([len(unit) for unit in units]).tolist()
        tasks = [work[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]
        large = [future.result() for future in [shared_pool().submit(_decode_all, task) for task in tasks]]
    else:
        large = [_decode_all(work)]
    return DecodedTile(
        indptr=out_indptr,
        indices=indices,
        data=data,
        n_genes=header.n_genes,
        inexact_in_float32=any(large),
        complete=chunks.shape[0] == header.n_chunks,
        chunk_bounds=prefix.chunk_bounds,
        chunk_mask=selected,
    )


def _decode_all(work: Sequence[tuple[Any, ...]]) -> bool:
    """Decode the chunks of ``work`` (the arguments of each) one after the other; whether a count exceeds 2^24."""
    large = False
    for args in work:
        large |= _decode_chunk(*args)
    return large


def checked_pieces(
    prefix: TilePrefix,
    pieces: Mapping[int, bytes] | Sequence[tuple[int, bytes]],
    chunks: np.ndarray | Sequence[int],
    *,
    name: str = "tile",
) -> CheckedTile:
    """A tile to decode chunk by chunk (:meth:`~deltacells.codec._decode.CheckedTile.decode_chunk_into`).

    From its parsed prefix and the byte ranges fetched for the frames of ``chunks``, whose declared sizes are
    checked here (before the caller allocates their outputs). Only those chunks may be decoded from it.

    Raises
    ------
    FormatError
        If a frame of the chunks declares another size than the chunk table implies.
    InvalidValueError
        If ``pieces`` miss bytes of a frame of ``chunks`` (or reach outside the object).
    OutOfRangeError
        If a chunk number is outside the tile.
    """
    require_little_endian()
    source = PieceSource(pieces, prefix.header.total_size)
    _check_frame_sizes(source, prefix.table, _numbers(chunks, prefix.n_chunks, "chunk").tolist(), name)
    return CheckedTile(prefix.header, prefix.indptr, prefix.table, source, name)


def _numbers(values: np.ndarray | Sequence[int], limit: int, what: str) -> np.ndarray:
    """Sorted unique ``intp`` numbers in ``[0, limit)`` from ``values``."""
    array = np.asarray(values)
    if array.size == 0:
        return np.empty(0, dtype=np.intp)
    if array.dtype.kind not in "iu":
        msg = f"{what} numbers must be integers, got an array of {array.dtype}"
        raise InvalidTypeError(msg)
    array = np.unique(array.ravel())
    if array[0] < 0 or array[-1] >= limit:
        bad = array[0] if array[0] < 0 else array[-1]
        msg = f"{what} {bad} is outside the tile's {limit} {what}s (0 .. {limit - 1})"
        raise OutOfRangeError(msg)
    return array.astype(np.intp)
