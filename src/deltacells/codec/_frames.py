"""zstd frames as the format uses them: one frame per stream, content size required.

Sizes are checked from the frame header before anything is decompressed, so a tile
can never make the decoder allocate more than its own sizes justify.
"""

from __future__ import annotations

import threading

import zstandard

from deltacells.errors import FormatError

#: A zstd block decompresses to at most 128 KiB and takes at least 4 bytes (an RLE
#: block), so no frame can expand by more than this factor (plus one block).
_MAX_EXPANSION = 32768
_MAX_BLOCK = 131072
_NO_SIZE = (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR)

_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


def decompressor() -> zstandard.ZstdDecompressor:
    """The calling thread's decompressor (made on its first use, then reused: a context is costly to make)."""
    return _decompressor()


def frame_content_size(frame: memoryview, *, where: str) -> int:
    """Return the content size declared in ``frame``'s header.

    Raises
    ------
    FormatError
        If ``frame`` is not a zstd frame, declares no content size, or declares more
        than a frame of its length could possibly hold.
    """
    try:
        params = zstandard.get_frame_parameters(frame)
    except zstandard.ZstdError as exc:
        msg = f"{where}: not a zstd frame ({exc})"
        raise FormatError(msg) from exc
    size = params.content_size
    if size in _NO_SIZE:
        msg = f"{where}: the zstd frame does not declare its content size (required by the format)"
        raise FormatError(msg)
    if size > len(frame) * _MAX_EXPANSION + _MAX_BLOCK:
        msg = f"{where}: the zstd frame claims {size} bytes, more than a {len(frame)}-byte frame can hold"
        raise FormatError(msg)
    return size


def decompress_frame(frame: memoryview, expected_size: int, *, where: str) -> bytes:
    """Decompress one whole frame that must fill ``frame`` exactly and give ``expected_size`` bytes.

    The declared content size is checked first (see :func:`frame_content_size`).
    """
    size = frame_content_size(frame, where=where)
    if size != expected_size:
        msg = f"{where}: the zstd frame declares {size} bytes, the format requires {expected_size}"
        raise FormatError(msg)
    try:
        out = _decompressor().decompress(frame, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        msg = f"{where}: zstd frame is corrupt or does not fill its stream exactly ({exc})"
        raise FormatError(msg) from exc
    if len(out) != expected_size:  # pragma: no cover - zstd enforces the declared size
        msg = f"{where}: the zstd frame decompressed to {len(out)} bytes, the format requires {expected_size}"
        raise FormatError(msg)
    return out


#: Scratch buffers larger than this are not kept for the next frame (a freak chunk must not pin memory).
_MAX_SCRATCH = 64 * 2**20


def decompress_scratch(frame: memoryview, size: int, slot: int, *, where: str) -> memoryview:
    """Decompress one whole frame whose declared content size was checked to be ``size``, into scratch memory.

    The bytes land in a buffer of the calling thread (one per ``slot``), reused from frame to frame: the
    result is valid until this thread decompresses into the same slot again. A decoder that consumes a
    chunk's streams before the next chunk so allocates nothing per frame. That matters: a fresh buffer of a
    few hundred KB per frame is mapped and unmapped by the allocator each time, and the page faults and
    TLB shootdowns of that cost more than decompressing, and serialise the decoding threads.

    The frame must fill its stream exactly (:func:`frame_size` walks its blocks) and decompress to
    ``size`` bytes.

    Raises
    ------
    FormatError
        If the frame is corrupt, shorter or longer than its stream, or gives other than ``size`` bytes.
    """
    compressed = frame_size(frame, where=where)
    if compressed != len(frame):
        msg = f"{where}: the zstd frame takes {compressed} of the stream's {len(frame)} bytes (it must fill it exactly)"
        raise FormatError(msg)
    out = _scratch(slot, size)
    try:
        got = _decompressor().stream_reader(frame, read_size=len(frame) or 1).readinto(out)
    except zstandard.ZstdError as exc:
        msg = f"{where}: zstd frame is corrupt or does not fill its stream exactly ({exc})"
        raise FormatError(msg) from exc
    if got != size:
        msg = f"{where}: the zstd frame decompressed to {got} bytes, the format requires {size}"
        raise FormatError(msg)
    return out


def frame_size(frame: memoryview, *, where: str) -> int:
    """The compressed size of the zstd frame at the start of ``frame``, from its header and block headers.

    What the zstd library's ``ZSTD_findFrameCompressedSize`` computes (python-zstandard does not expose it):
    the frame header, then each block's 3-byte header and content (a raw or compressed block its size, an
    RLE block one byte) up to the last block, then the 4-byte checksum if the header announces one.

    Raises
    ------
    FormatError
        If a header is cut short or a block is of the reserved type.
    """
    try:
        position = zstandard.frame_header_size(frame)
    except zstandard.ZstdError as exc:
        msg = f"{where}: not a zstd frame ({exc})"
        raise FormatError(msg) from exc
    end = len(frame)
    while True:
        if position + 3 > end:
            msg = f"{where}: the zstd frame is cut short (a block header at byte {position} of {end})"
            raise FormatError(msg)
        header = frame[position] | (frame[position + 1] << 8) | (frame[position + 2] << 16)
        last, kind, block = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            msg = f"{where}: the zstd frame has a block of the reserved type at byte {position}"
            raise FormatError(msg)
        position += 3 + (1 if kind == 1 else block)
        if last:
            break
    has_checksum = bool(frame[4] & 0x04)  # Frame_Header_Descriptor, after the 4-byte magic number
    return position + (4 if has_checksum else 0)


def _scratch(slot: int, size: int) -> memoryview:
    """``size`` bytes of the calling thread's scratch buffer ``slot`` (grown as needed, kept up to a bound)."""
    buffers = getattr(_local, "scratch", None)
    if buffers is None:
        buffers = _local.scratch = {}
    buffer = buffers.get(slot)
    if buffer is None or len(buffer) < size:
        buffer = bytearray(max(size, 2 * len(buffer)) if buffer is not None else size)
        if len(buffer) <= _MAX_SCRATCH:
            buffers[slot] = buffer
    return memoryview(buffer)[:size]


def compress_frame(data: bytes | memoryview, level: int | zstandard.ZstdCompressionParameters) -> bytes:
    """Compress ``data`` into one frame that carries its content size.

    Parameters
    ----------
    data
        The stream's bytes.
    level
        A zstd level, or zstd parameters (for benchmarks of zstd's other knobs); parameters are used with
        ``write_content_size`` on, no checksum and no worker threads (one frame, readable by a default
        ``zstandard.ZstdDecompressor``).

    Returns
    -------
    bytes
        One zstd frame whose header declares ``len(data)``.
    """
    cctx = getattr(_local, "cctx", None)
    if cctx is None or _local.level != level:
        if isinstance(level, zstandard.ZstdCompressionParameters):
            params = _frame_parameters(level)
            cctx = zstandard.ZstdCompressor(compression_params=params)
        else:
            cctx = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=False)
        _local.cctx = cctx
        _local.level = level
    return cctx.compress(data)


def _frame_parameters(params: zstandard.ZstdCompressionParameters) -> zstandard.ZstdCompressionParameters:
    """``params`` with what the format needs: the content size in the header, no checksum, one thread."""
    names = (
        "window_log", "chain_log", "hash_log", "search_log", "min_match", "target_length", "strategy",
        "enable_ldm", "ldm_hash_log", "ldm_min_match", "ldm_bucket_size_log", "ldm_hash_rate_log",
    )  # fmt: skip
    kwargs = {name: getattr(params, name) for name in names}
    return zstandard.ZstdCompressionParameters(
        compression_level=params.compression_level, write_content_size=1, write_checksum=0, threads=0, **kwargs
    )
