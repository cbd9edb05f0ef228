"""Many small chunks of a tile decoded in one kernel call, their frames checked in another.

A sparse tile (an atlas of a few nonzeros a cell) has chunks of a few hundred nonzeros: decoding one cost
the Python around it (a chunk table row read, two frames sliced and decompressed, a kernel called with ten
arguments) about ten times what its nonzeros cost, and checking the sizes its frames declare as much again.
So the frames of a run of chunks are decompressed one after the other (zstandard's one call a frame; it
releases the GIL while it works) and joined, and one kernel call decodes them all
(``codec._kernels.decode_chunk_run``); one kernel call checks the sizes every frame of a tile declares
(``codec._kernels.frame_sizes_ok``).

Both are fast paths in front of the checks and decoding chunk by chunk (``codec._decode``), never instead
of them: each answers whether it did the work, and the caller runs the chunk-by-chunk code whenever it did
not (the kernels not loaded yet, a chunk with exception frames or without nonzeros, a frame the kernel does
not vouch for, any problem found). That code then accepts what the fast path would not, or raises the error
it always raised, naming the tile, chunk and stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import zstandard

from deltacells._kernel_loading import compiled_kernels
from deltacells.codec._codes import OK
from deltacells.codec._engine import read_only
from deltacells.codec._frames import decompressor
from deltacells.codec._layout import GAPS_LEN, GAPS_OFF, GEXC_LEN, NNZ_HI, NNZ_LO, VALS_LEN, VALS_OFF, VEXC_LEN
from deltacells.errors import FormatError, InvalidValueError

if TYPE_CHECKING:
    from deltacells.codec._decode import ByteSource

__all__ = ["frame_sizes_ok", "plain_chunks", "try_decode_run"]

#: Chunks of at most this many nonzeros are decoded in runs. A larger chunk costs its nonzeros' time, not the
#: Python around it (about 10 microseconds, 2 ns a nonzero of such a chunk), and is decoded on its own, its
#: frames decompressed into the thread's reused scratch buffers: a run's frames are decompressed into fresh
#: memory and copied once more (4 bytes a nonzero), which only small chunks repay.
RUN_MAX_CHUNK_NNZ = 8192


def frame_sizes_ok(view: memoryview, table: np.ndarray) -> bool:
    """Whether the kernel finds every frame of the tile declaring a size the format allows (False: ask the checks).

    ``view`` is the whole tile object (bytes), ``table`` its checked chunk table. False also until numba's
    kernels are loaded.
    """
    if not compiled_kernels():
        return False
    from deltacells.codec import _kernels

    blob = read_only(np.frombuffer(view, dtype=np.uint8))
    return bool(_kernels.frame_sizes_ok(blob, table))


def plain_chunks(table: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """``bool[len(chunks)]``: the chunks a run decodes (nonzeros, :data:`RUN_MAX_CHUNK_NNZ` at most, no exceptions)."""
    rows = table[chunks]
    n = rows[:, NNZ_HI] - rows[:, NNZ_LO]
    return (n > 0) & (n <= RUN_MAX_CHUNK_NNZ) & (rows[:, VEXC_LEN] == 0) & (rows[:, GEXC_LEN] == 0)


def try_decode_run(
    source: ByteSource,
    table: np.ndarray,
    chunks: np.ndarray,
    indptr: np.ndarray,
    n_genes: int,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    columns: np.ndarray | None,
    *,
    whole: memoryview | None = None,
    sort: bool = True,
) -> bool:
    """Decode ``chunks`` (plain ones, :func:`plain_chunks`) of a checked tile in one kernel call; whether it did.

    Parameters
    ----------
    source
        The tile's bytes (its frames' sizes checked).
    table, indptr, n_genes
        The tile's checked chunk table, row pointers and genes.
    chunks
        ``int64`` chunk numbers, increasing.
    out_indices, out_data
        The tile's output arrays (``nnz`` each): chunk ``c`` fills ``[nnz_lo, nnz_hi)``.
    columns, sort
        As for ``CheckedTile.decode_chunk_into``.
    whole
        The whole tile object, when ``source`` serves it (its frames then decompress in one call).

    Returns
    -------
    bool
        True when every chunk was decoded; False when the kernels are not loaded yet or a problem was found
        (the outputs of some chunks may then be written, in part): the caller decodes them chunk by chunk,
        which raises the error.
    """
    if not compiled_kernels():
        return False
    from deltacells.codec import _kernels

    chunks = read_only(chunks)
    streams = _decompressed(source, whole, table, chunks)
    if streams is None:
        return False
    outputs = (out_indices, out_data, columns)
    code, _, _ = _kernels.decode_chunk_run(streams, table, chunks, indptr, n_genes, *outputs, sort)
    return bool(code == OK)


def _decompressed(
    source: ByteSource, whole: memoryview | None, table: np.ndarray, chunks: np.ndarray
) -> np.ndarray | None:
    """The gaps then vals streams of ``chunks``, decompressed side by side (None: a frame to decode one by one).

    The frames of a whole object (``whole``) are checked to fill their
    streams exactly (a kernel) and decompressed by one call of zstandard, which holds no GIL while it works
    (``multi_decompress_to_buffer``, of its C backend); other sources' frames (byte ranges fetched), or all
    of them without that backend, one call each.
    """
    from deltacells.codec import _kernels

    segments = np.ascontiguousarray(table[chunks][:, [GAPS_OFF, GAPS_LEN, VALS_OFF, VALS_LEN]]).reshape(-1, 2)
    nnz = table[chunks, NNZ_HI] - table[chunks, NNZ_LO]
    dctx = decompressor()
    try:
        if whole is not None and _MULTI:
            blob = read_only(np.frombuffer(whole, dtype=np.uint8))
            if not _kernels.run_frames_fill(blob, table, chunks):
                return None
            sizes = np.repeat(2 * nnz, 2)
            run = zstandard.BufferWithSegments(whole, segments)
            joined = b"".join(dctx.multi_decompress_to_buffer(run, decompressed_sizes=sizes, threads=1))
        else:
            decompress, read = dctx.decompress, source.read
            # Per frame: two calls of Python; zstandard checks that the frame fills its stream.
            frames = [read(offset, length, "frame") for offset, length in segments.tolist()]
            parts = [decompress(frame, allow_extra_data=False) for frame in frames]
            joined = b"".join(parts)
    except (zstandard.ZstdError, FormatError, InvalidValueError):  # a broken frame, bytes a piece lacks
        return None
    streams = read_only(np.frombuffer(joined, dtype=np.uint8))
    if streams.shape[0] != 4 * int(nnz.sum()):  # pragma: no cover - zstandard gives the declared sizes (checked)
        return None
    return streams


#: Whether zstandard decompresses many frames in one call (its C backend; not its cffi one).
_MULTI = zstandard.backend == "cext" and hasattr(zstandard.ZstdDecompressor, "multi_decompress_to_buffer")
