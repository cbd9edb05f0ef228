"""``encode_tile``: CSR arrays of consecutive cells to the bytes of one tile, as the reference writer makes it."""

from __future__ import annotations

import numpy as np

from deltacells._threads import default_threads, shared_pool
from deltacells.codec._crc import crc32
from deltacells.codec._frames import compress_frame
from deltacells.codec._layout import (
    CHUNK_ENTRY_SIZE,
    HEADER_SIZE,
    MAX_COUNT,
    MAX_GENES,
    U16_MAX,
    TileHeader,
    align,
)
from deltacells.errors import RAW_COUNTS_HINT, ExceptionPolicyError, InvalidTypeError, InvalidValueError

#: Defaults of the reference writer. Chunks a tile: the fewest for which every draw of a random 0.1% of the cells
#: read from a bucket moved at most 12% of the tile bytes, on the real Visium matrix and 100,000 of its cells
#: resampled (``benchmarks/bench_object_storage.py``; docs/performance.md "Chunks per tile" has the frontier:
#: more chunks cost size and local decoding).
DEFAULT_N_CHUNKS = 24
#: The writer's zstd level (``level="default"``), chosen with ``benchmarks/bench_levels.py``: about 25 M nonzeros/s
#: per thread, so converting is faster than writing a gzip h5ad; tiles about 7% larger than the archive level's.
DEFAULT_LEVEL = 6
#: The smallest tiles (``level="archive"``; levels 20-22 are no smaller on count data): about 1 M nonzeros/s per
#: thread to encode, as fast to decode.
ARCHIVE_LEVEL = 19
#: The levels that can be named: ``level="default"`` or ``level="archive"``.
LEVEL_PRESETS: dict[str, int] = {"default": DEFAULT_LEVEL, "archive": ARCHIVE_LEVEL}
#: The zstd levels the writer accepts as numbers.
MIN_LEVEL, MAX_LEVEL = 1, 22

#: A zstd level (``1 .. 22``) or the name of one (a key of :data:`LEVEL_PRESETS`).
Level = int | str

_PARALLEL_MIN_NNZ = 50_000


def resolve_level(level: Level) -> int:
    """The zstd level that ``level`` stands for.

    Parameters
    ----------
    level
        An integer ``1 .. 22``, or a preset name: ``"default"`` (the writer's default) or ``"archive"``
        (the smallest tiles, slowest to write); see :data:`LEVEL_PRESETS`.

    Returns
    -------
    int
        The zstd level, ``1 .. 22`` (what the manifest records as ``zstd_level``).

    Raises
    ------
    InvalidValueError
        For an unknown preset name or an integer outside ``1 .. 22``.
    InvalidTypeError
        For anything else (a float, a bool, None...).

    Examples
    --------
    >>> resolve_level("archive")
    19
    >>> resolve_level(5)
    5
    """
    choices = f"an integer {MIN_LEVEL} .. {MAX_LEVEL} or one of {', '.join(map(repr, LEVEL_PRESETS))}"
    if isinstance(level, str):
        key = level.strip().lower()
        if key in LEVEL_PRESETS:
            return LEVEL_PRESETS[key]
        if key.isdigit():
            return resolve_level(int(key))
        msg = f"unknown zstd level {level!r}: pass {choices}"
        raise InvalidValueError(msg)
    if isinstance(level, bool) or not isinstance(level, int | np.integer):
        msg = f"the zstd level must be {choices}, got {type(level).__name__} {level!r}"
        raise InvalidTypeError(msg)
    if not MIN_LEVEL <= int(level) <= MAX_LEVEL:
        msg = f"zstd level {int(level)} is out of range: pass {choices}"
        raise InvalidValueError(msg)
    return int(level)


def exception_limit(nnz: int) -> int:
    """The most exceptions of either kind the writer accepts in a tile of ``nnz`` nonzeros."""
    return max(1024, nnz // 200)


def chunk_boundaries(indptr: np.ndarray, n_chunks: int) -> np.ndarray:
    """Cell boundaries of ``min(n_chunks, n_cells)`` chunks with roughly equal nonzeros.

    Every chunk holds at least one cell (docs/format.md, decision 3). Returns ``int64[k + 1]``
    starting at 0 and ending at ``n_cells``.
    """
    if n_chunks < 1:
        msg = f"n_chunks must be at least 1, got {n_chunks}"
        raise InvalidValueError(msg)
    n_cells = indptr.shape[0] - 1
    k = min(n_chunks, n_cells)
    if k <= 0:
        return np.zeros(1, dtype=np.int64)
    nnz = int(indptr[-1])
    targets = (np.arange(1, k, dtype=np.float64) * nnz / k).round().astype(np.int64)
    cuts = np.searchsorted(indptr, targets, side="left").astype(np.int64)
    # Each chunk needs a cell: cut i must lie in [i + 1, n_cells - k + i + 1] and the cuts must increase strictly.
    offsets = np.arange(1, k, dtype=np.int64)
    cuts = np.clip(cuts, offsets, n_cells - k + offsets)
    cuts = np.maximum.accumulate(cuts - offsets) + offsets
    return np.concatenate(([0], cuts, [n_cells])).astype(np.int64)


def encode_tile(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    n_genes: int,
    *,
    n_chunks: int = DEFAULT_N_CHUNKS,
    level: Level = DEFAULT_LEVEL,
    threads: int | None = None,
    name: str = "tile",
) -> bytes:
    """Encode consecutive cells in CSR form as one tile.

    Parameters
    ----------
    indptr
        Row pointers, ``n_cells + 1`` non-decreasing integers starting at 0.
    indices
        Gene indices, strictly increasing within each cell, in ``[0, n_genes)``.
    data
        Counts, integers in ``[1, 2^31 - 1]`` (no explicit zeros).
    n_genes
        Number of columns, ``1 .. 2^31``.
    n_chunks
        Chunks of roughly equal nonzeros (at most one per cell).
    level
        zstd level ``1 .. 22``, or ``"default"`` (``DEFAULT_LEVEL``) or ``"archive"``
        (``ARCHIVE_LEVEL``, the smallest tiles); see ``resolve_level``.
    threads
        Threads compressing the streams; ``None`` uses the shared pool for large tiles.
    name
        How to call the tile in error messages.

    Returns
    -------
    bytes
        The tile, as docs/format.md, decisions 3 and 4 lay it out.

    Raises
    ------
    ValueError
        If the arrays are not a valid count matrix as described above, if the
        tile has more exceptions than the writer's policy allows (docs/format.md, decision 7),
        or for an unknown ``level`` (``resolve_level``).
    """
    if int(n_chunks) < 1:
        msg = f"{name}: n_chunks must be at least 1, got {n_chunks}"
        raise InvalidValueError(msg)
    level = resolve_level(level)
    indptr, indices, data = _checked_arrays(indptr, indices, data, n_genes, name)
    n_cells = indptr.shape[0] - 1
    nnz = int(indptr[-1])
    gaps = _gaps(indptr, indices, name)
    limit = exception_limit(nnz)
    n_gap_exc = int(np.count_nonzero(gaps > U16_MAX))
    n_val_exc = int(np.count_nonzero(data > U16_MAX))
    for kind, count in (("gap", n_gap_exc), ("count", n_val_exc)):
        if count > limit:
            msg = (
                f"{name}: {count} {kind} exceptions (values above 65535) exceed the limit of {limit} "
                f"for {nnz} nonzeros: the data do not look like raw counts. {RAW_COUNTS_HINT}."
            )
            raise ExceptionPolicyError(msg)

    bounds = chunk_boundaries(indptr, n_chunks)
    k = bounds.shape[0] - 1
    chunk_nnz = np.diff(indptr[bounds])
    if chunk_nnz.size and chunk_nnz.max() >= 2**32:
        msg = f"{name}: a chunk would hold {chunk_nnz.max()} nonzeros (the format allows < 2^32); use more chunks"
        raise InvalidValueError(msg)
    jobs = [(gaps, data, int(indptr[bounds[c]]), int(indptr[bounds[c + 1]]), level) for c in range(k)]
    n_threads = default_threads() if threads is None else threads
    if n_threads > 1 and k > 1 and nnz >= _PARALLEL_MIN_NNZ:
        frames = [f.result() for f in [shared_pool().submit(_encode_chunk, *job) for job in jobs]]
    else:
        frames = [_encode_chunk(*job) for job in jobs]

    table = np.zeros((k, 12), dtype="<u8")
    indptr_off = align(HEADER_SIZE + CHUNK_ENTRY_SIZE * k)
    pos = align(indptr_off + 8 * (n_cells + 1))
    parts: list[tuple[int, bytes]] = []
    for c, chunk_frames in enumerate(frames):
        table[c, 0:4] = (bounds[c], bounds[c + 1], indptr[bounds[c]], indptr[bounds[c + 1]])
        for slot, frame in enumerate(chunk_frames):
            if frame is None:
                continue
            table[c, 4 + 2 * slot] = pos
            table[c, 5 + 2 * slot] = len(frame)
            parts.append((pos, frame))
            pos = align(pos + len(frame))
    total_size = parts[-1][0] + len(parts[-1][1]) if parts else indptr_off + 8 * (n_cells + 1)

    out = bytearray(total_size)
    out[HEADER_SIZE : HEADER_SIZE + table.nbytes] = table.tobytes()
    out[indptr_off : indptr_off + 8 * (n_cells + 1)] = indptr.astype("<i8").tobytes()
    for offset, frame in parts:
        out[offset : offset + len(frame)] = frame
    crc = crc32(memoryview(out)[HEADER_SIZE:])
    header = TileHeader(
        n_cells=n_cells,
        nnz=nnz,
        n_genes=int(n_genes),
        n_chunks=k,
        indptr_off=indptr_off,
        total_size=total_size,
        crc32=crc,
    )
    out[:HEADER_SIZE] = header.pack()
    return bytes(out)


def _checked_arrays(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_genes: int, name: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    data = np.asarray(data)
    for label, arr in (("indptr", indptr), ("indices", indices), ("data", data)):
        if arr.ndim != 1:
            msg = f"{name}: {label} must be one-dimensional, got shape {arr.shape}"
            raise InvalidValueError(msg)
        if arr.dtype.kind not in "iu" and arr.size:
            msg = f"{name}: {label} must have an integer dtype, got {arr.dtype} (convert counts to integers first)"
            raise InvalidTypeError(msg)
    if not 1 <= int(n_genes) <= MAX_GENES:
        msg = f"{name}: n_genes is {n_genes}, must be 1 .. 2^31"
        raise InvalidValueError(msg)
    if indptr.shape[0] < 1 or indptr[0] != 0:
        msg = f"{name}: indptr must start with 0"
        raise InvalidValueError(msg)
    indptr = indptr.astype(np.int64, copy=False)
    if np.any(np.diff(indptr) < 0):
        msg = f"{name}: indptr must be non-decreasing"
        raise InvalidValueError(msg)
    nnz = int(indptr[-1])
    if indices.shape[0] != nnz or data.shape[0] != nnz:
        msg = f"{name}: indptr ends at {nnz} but there are {indices.shape[0]} indices and {data.shape[0]} values"
        raise InvalidValueError(msg)
    if nnz:
        bad = np.flatnonzero((indices < 0) | (indices >= n_genes))
        if bad.size:
            msg = f"{name}: gene index {indices[bad[0]]} at nonzero {bad[0]} is outside [0, {n_genes})"
            raise InvalidValueError(msg)
        bad = np.flatnonzero((data < 1) | (data > MAX_COUNT))
        if bad.size:
            msg = (
                f"{name}: count {data[bad[0]]} at nonzero {bad[0]} is outside [1, 2^31 - 1] "
                "(drop explicit zeros; counts must be raw non-negative integers)"
            )
            raise InvalidValueError(msg)
    return indptr, indices.astype(np.int64, copy=False), data.astype(np.int64, copy=False)


def _gaps(indptr: np.ndarray, indices: np.ndarray, name: str) -> np.ndarray:
    """Per-cell gaps: each cell's first gene index, then the differences; checked to be increasing."""
    gaps = indices.copy()
    if gaps.shape[0] == 0:
        return gaps
    gaps[1:] -= indices[:-1]
    starts = indptr[:-1][indptr[:-1] < indptr[1:]]
    gaps[starts] = indices[starts]
    first = np.zeros(gaps.shape[0], dtype=bool)
    first[starts] = True
    bad = np.flatnonzero((gaps <= 0) & ~first)
    if bad.size:
        cell = int(np.searchsorted(indptr, bad[0], side="right")) - 1
        msg = f"{name}: gene indices of cell {cell} are not strictly increasing (sort indices and sum duplicates first)"
        raise InvalidValueError(msg)
    return gaps


def _planes(values: np.ndarray) -> bytes:
    """uint16 values (clipped at 65535) as byte planes: all low bytes, then all high bytes."""
    clipped = np.minimum(values, U16_MAX).astype("<u2")
    planes: bytes = clipped.view(np.uint8).reshape(-1, 2).T.tobytes()
    return planes


def _exceptions(values: np.ndarray, offset: int) -> bytes | None:
    """The exception frame content for values above 65535: positions then payloads (``uint32``)."""
    positions = np.flatnonzero(values > U16_MAX)
    if positions.size == 0:
        return None
    payloads = values[positions] - offset
    return np.concatenate((positions, payloads)).astype("<u4").tobytes()


def _encode_chunk(
    gaps: np.ndarray, data: np.ndarray, lo: int, hi: int, level: int
) -> tuple[bytes, bytes, bytes | None, bytes | None]:
    chunk_gaps = gaps[lo:hi]
    chunk_vals = data[lo:hi]
    vexc = _exceptions(chunk_vals, 0)
    gexc = _exceptions(chunk_gaps, U16_MAX)
    return (
        compress_frame(_planes(chunk_gaps), level),
        compress_frame(_planes(chunk_vals), level),
        None if vexc is None else compress_frame(vexc, level),
        None if gexc is None else compress_frame(gexc, level),
    )
