"""Many small chunks, of a tile or of many, decoded in one kernel call; their frames checked in another.

A sparse tile (an atlas of a few nonzeros a cell) has chunks of a few hundred nonzeros: decoding one cost
the Python around it (a chunk table row read, two frames sliced and decompressed, a kernel called with ten
arguments) about ten times what its nonzeros cost, and checking the sizes its frames declare as much again.
So the frames of a run of chunks (of one tile, :func:`try_decode_run`, or of tiles read side by side,
:func:`try_decode_tiles`) are checked to fill their streams (a kernel), decompressed by one call of
zstandard that holds no GIL (``multi_decompress_to_buffer``) and joined, and one kernel call decodes them all
(``codec._kernels.decode_chunk_run``); one kernel call checks the sizes every frame of a tile declares
(``codec._kernels.frame_sizes_ok``).

All are fast paths in front of the checks and decoding chunk by chunk (``codec._decode``), never instead
of them: each answers whether it did the work, and the caller runs the chunk-by-chunk code whenever it did
not (the kernels not loaded yet, a chunk with exception frames, without nonzeros or large, a frame the kernels
do not vouch for, any problem found). That code then accepts what the fast path would not, or raises the
error it always raised, naming the tile, chunk and stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import zstandard

from deltacells._kernel_loading import compiled_kernels
from deltacells.codec._codes import OK
from deltacells.codec._engine import read_only
from deltacells.codec._frames import decompressor
from deltacells.codec._layout import (
    GAPS_LEN,
    GAPS_OFF,
    GEXC_LEN,
    NNZ_HI,
    NNZ_LO,
    VALS_LEN,
    VALS_OFF,
    VEXC_LEN,
)
from deltacells.errors import FormatError, InvalidValueError

if TYPE_CHECKING:
    from deltacells.codec._sources import ByteSource

__all__ = ["frame_sizes_ok", "plain_chunks", "try_decode_run", "try_decode_tiles"]

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
    plain: np.ndarray = (n > 0) & (n <= RUN_MAX_CHUNK_NNZ) & (rows[:, VEXC_LEN] == 0) & (rows[:, GEXC_LEN] == 0)
    return plain


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
    chunks = read_only(chunks)
    streams = _decompressed(source, whole, table, chunks)
    if streams is None:
        return False
    tiles = read_only(np.zeros(chunks.shape[0], dtype=np.int64))
    indptr_starts = read_only(np.array([0, indptr.shape[0]], dtype=np.int64))
    layout = (tiles, read_only(indptr), indptr_starts, _ZERO)
    return _run(streams, table, chunks, *layout, n_genes, out_indices, out_data, columns, sort)


def try_decode_tiles(
    whole: memoryview,
    offsets: np.ndarray,
    tables: Sequence[np.ndarray],
    indptrs: Sequence[np.ndarray],
    n_genes: int,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    out_starts: np.ndarray,
    columns: np.ndarray | None,
) -> tuple[bool, list[np.ndarray]]:
    """Decode the plain chunks of several checked tiles lying side by side in ``whole``, in one kernel call.

    Parameters
    ----------
    whole
        The tiles' objects one after the other: tile ``t`` at byte ``offsets[t]`` (its frames' sizes checked).
    offsets
        ``int64``: where each tile starts in ``whole``.
    tables, indptrs, n_genes
        Each tile's checked chunk table and row pointers, and their genes.
    out_indices, out_data, out_starts
        The output arrays; tile ``t``'s nonzeros go from ``out_starts[t]``.
    columns
        As for ``CheckedTile.decode_chunk_into`` (rows are sorted).

    Returns
    -------
    tuple
        Whether the plain chunks (:func:`plain_chunks`) of every tile were decoded, and each tile's other
        chunks, to decode one by one. False when the kernels are not loaded yet or a problem was found: the
        caller then decodes the tiles one by one, which raises the error.
    """
    if not compiled_kernels() or not _MULTI:
        return False, []
    table = np.concatenate(tables)
    counts = np.array([t.shape[0] for t in tables], dtype=np.int64)
    numbers = np.arange(table.shape[0], dtype=np.int64)
    plain = plain_chunks(table, numbers)
    tile_of_chunk = np.repeat(np.arange(len(tables), dtype=np.int64), counts)
    for column in (GAPS_OFF, VALS_OFF):  # the frames' offsets in ``whole`` (a run decodes no exception frame)
        table[:, column] += np.repeat(offsets.astype(np.uint64), counts)
    table = read_only(table)
    chunks = read_only(numbers[plain])
    streams = _decompressed(None, whole, table, chunks)
    if streams is None:
        return False, []
    starts = np.zeros(len(indptrs) + 1, dtype=np.int64)
    np.cumsum([indptr.shape[0] for indptr in indptrs], out=starts[1:])
    layout = (read_only(tile_of_chunk[plain]), read_only(np.concatenate(indptrs)), read_only(starts))
    done = _run(streams, table, chunks, *layout, read_only(out_starts), n_genes, out_indices, out_data, columns, True)
    if not done:
        return False, []
    first = np.concatenate(([0], np.cumsum(counts)))
    others = [np.flatnonzero(~plain[first[t] : first[t + 1]]) for t in range(len(tables))]
    return True, others


def _run(streams: np.ndarray, *args: Any) -> bool:
    """The kernel ``decode_chunk_run`` (its arguments after ``streams``); whether it found no problem."""
    from deltacells.codec import _kernels

    code, _, _ = _kernels.decode_chunk_run(streams, *args)
    return bool(code == OK)


#: The output start of a single tile's run.
_ZERO = read_only(np.zeros(1, dtype=np.int64))


def _decompressed(
    source: ByteSource | None, whole: memoryview | None, table: np.ndarray, chunks: np.ndarray
) -> np.ndarray | None:
    """The gaps then vals streams of ``chunks``, decompressed side by side (None: a frame to decode one by one).

    The frames of a whole object (``whole``) are checked to fill their
    streams exactly (a kernel) and decompressed by one call of zstandard, which holds no GIL while it works
    (``multi_decompress_to_buffer``, of its C backend); other sources' frames (byte ranges fetched), or all
    of them without that backend, one call each.
    """
    from deltacells.codec import _kernels

    if chunks.shape[0] == 0:  # (zstandard divides by the frames' count)
        return read_only(np.empty(0, dtype=np.uint8))
    segments = np.ascontiguousarray(table[chunks][:, [GAPS_OFF, GAPS_LEN, VALS_OFF, VALS_LEN]]).reshape(-1, 2)
    nnz = table[chunks, NNZ_HI] - table[chunks, NNZ_LO]
    dctx = decompressor()
    try:
        if whole is not None and _MULTI:
            blob = read_only(np.frombuffer(whole, dtype=np.uint8))
            if not _kernels.run_frames_fill(blob, table, chunks):
                return None
            sizes = np.repeat(2 * nnz, 2)
            run = zstandard.BufferWithSegments(whole, segments.tobytes())
            decompressed = dctx.multi_decompress_to_buffer(run, decompressed_sizes=sizes.tobytes(), threads=1)
            joined = b"".join(cast("Iterable[bytes]", decompressed))  # a sequence of buffers (its stubs say no more)
        else:
            assert source is not None  # without the whole object, the frames' source
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
