"""Bytes of a tile: header and chunk-table fields, stream spans, and what the frames justify allocating.

Layout (``FORMAT.md``, "Tile layout"): a 64-byte header (:data:`HEADER_FIELDS`), then ``n_chunks``
chunk-table entries of twelve ``uint64`` each (96 bytes: ``cell_lo, cell_hi, nnz_lo, nnz_hi``, then the
offset and length of each stream of :data:`STREAMS`), then the indptr at ``indptr_off`` and the zstd
frames. The helpers accept any blob: a field past the end reads as 0, and a write past the end is dropped.
"""

from __future__ import annotations

import struct
import zlib

#: The output arrays' alignment slack: one huge page (``deltacells._memory.HUGE_PAGE``), reserved, never written.
HUGE_PAGE_SLACK = 2 * 2**20

#: The header: magic, version, flags, n_cells, nnz, n_genes, n_chunks, indptr_off, total_size, crc32,
#: reserved (for reference: the helpers below read and write one field at a time).
HEADER = struct.Struct("<8sIIQQIIQQII")
#: ``(offset, width)`` of each header field after the magic.
HEADER_FIELDS = {
    "version": (8, 4),
    "flags": (12, 4),
    "n_cells": (16, 8),
    "nnz": (24, 8),
    "n_genes": (32, 4),
    "n_chunks": (36, 4),
    "indptr_off": (40, 8),
    "total_size": (48, 8),
    "crc32": (56, 4),
    "reserved": (60, 4),
}
#: The streams of a chunk, in chunk-table order.
STREAMS = ("gaps", "vals", "vexc", "gexc")


def u(blob: bytes | bytearray, offset: int, width: int) -> int:
    """The little-endian unsigned integer of ``width`` bytes at ``offset`` (0 past the end)."""
    if offset + width > len(blob):
        return 0
    return int.from_bytes(blob[offset : offset + width], "little")


def put(blob: bytearray, offset: int, width: int, value: int) -> None:
    """Store ``value`` (masked to ``width`` bytes) at ``offset`` if it fits."""
    if offset + width <= len(blob):
        blob[offset : offset + width] = (value % (1 << (8 * width))).to_bytes(width, "little")


def fix_tile(blob: bytes | bytearray) -> bytes:
    """``blob`` with header fields ``total_size`` and ``crc32`` made right (as a writer would)."""
    out = bytearray(blob)
    if len(out) >= 64:
        put(out, 48, 8, len(out))
        put(out, 56, 4, zlib.crc32(memoryview(out)[64:]))
    return bytes(out)


def n_table_chunks(blob: bytes | bytearray) -> int:
    """Chunk-table entries that the header declares and that lie inside ``blob``."""
    return min(u(blob, 36, 4), max(0, (len(blob) - 64) // 96))


def chunk_field(blob: bytes | bytearray, c: int, k: int) -> int:
    """Field ``k`` (0 .. 11) of chunk ``c``'s table entry."""
    return u(blob, 64 + 96 * c + 8 * k, 8)


def stream_span(blob: bytes | bytearray, c: int, kind: str) -> tuple[int, int] | None:
    """``(offset, length)`` of stream ``kind`` of chunk ``c`` if it is non-empty and inside ``blob``."""
    k = 4 + 2 * STREAMS.index(kind)
    off, length = chunk_field(blob, c, k), chunk_field(blob, c, k + 1)
    if length == 0 or off > len(blob) or length > len(blob) - off:
        return None
    return off, length


def declared_frame_bytes(blob: bytes | bytearray) -> int:
    """What the frames of ``blob`` can justify: the sum of the content sizes they declare.

    Only frames the chunk table points at, that lie inside the blob, that declare their content size, and
    whose declared size a frame of their length can physically hold (zstd expands at most 32768-fold plus
    one 128 KiB block: the decoder refuses larger claims before allocating) are counted.
    """
    import zstandard

    total = 0
    for c in range(n_table_chunks(blob)):
        for kind in STREAMS:
            span = stream_span(blob, c, kind)
            if span is None:
                continue
            off, length = span
            try:
                size = zstandard.get_frame_parameters(bytes(blob[off : off + length])).content_size
            except zstandard.ZstdError:
                continue
            if size in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR):
                continue
            if size <= length * 32768 + 131072:
                total += size
    return total


def tile_budget(blob: bytes | bytearray, declared: int | None = None) -> int:
    """The most ``decode_tile(blob)`` may allocate (tracemalloc peak), in bytes.

    ``64 * len(blob) + 3 * D + 3 MiB``, where ``D`` is :func:`declared_frame_bytes`:

    * the output arrays take ``8 * nnz`` bytes; the decoder may believe ``nnz`` only once every chunk's gaps
      and vals frames declare ``2 * n`` bytes each, so ``8 * nnz = 2 * (gaps + vals declared) <= 2 * D``;
    * the decompressed frames (all chunks may decode at once on threads) take at most ``D``;
    * everything else is proportional to bytes that are in the blob: the indptr copy
      (``8 * (n_cells + 1) <= len``), masks and indices over cells or chunks; ``64 * len`` is a generous
      cap that still catches any allocation sized by a header field that no bytes back (``nnz``, ``n_cells``
      and ``n_chunks`` can claim up to ``2^64``);
    * 1 MiB of fixed overhead (error messages, the thread pool, numba dispatch);
    * 2 MiB (a huge page) of slack in the output arrays' allocation, which lets them start on a huge-page
      boundary (``deltacells._memory.empty_pair``): reserved, never written, so never mapped.
    """
    d = declared_frame_bytes(blob) if declared is None else declared
    return 64 * len(blob) + 3 * d + 2**20 + HUGE_PAGE_SLACK
