"""``decode_tile``: bytes of one tile to its CSR arrays, checked against every rule of the spec."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from deltacells._kernel_loading import prepare_kernels
from deltacells._memory import empty_pair
from deltacells._threads import default_threads, shared_pool
from deltacells.codec import _codes, _engine
from deltacells.codec._batch import (
    RUN_MAX_CHUNK_NNZ,
    frame_sizes_ok,
    plain_chunks,
    try_decode_run,
    try_decode_tiles,
)
from deltacells.codec._crc import crc32
from deltacells.codec._engine import chunk_table_ok
from deltacells.codec._frames import decompress_frame, decompress_scratch, frame_content_size
from deltacells.codec._layout import (
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
    check_chunk_table,
    read_chunk_table,
)
from deltacells.codec._sources import BlobSource, ByteSource
from deltacells.errors import FormatError, InvalidValueError, UnsupportedPlatformError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from scipy import sparse

#: Byte order of this host; a module attribute so that tests can simulate a big-endian machine.
HOST_BYTEORDER = sys.byteorder

#: float32 represents every integer up to 2^24 exactly.
FLOAT32_EXACT = 2**24

#: Below this many nonzeros a tile's chunks decode on the calling thread (threads cost more than they save).
_PARALLEL_MIN_NNZ = 200_000

#: The decoding threads take consecutive chunks together, at least this many nonzeros a task (see
#: :func:`work_units`): a tile cut in many small chunks, for fine ranged reads, then decodes in as few tasks
#: as one of a few large chunks (a task of the shared pool costs tens of microseconds of the GIL).
WORK_UNIT_NNZ = 100_000

_KERNEL_ERRORS = {
    _codes.GENE_OUT_OF_RANGE: "a decoded gene index reaches n_genes",
    _codes.GENES_NOT_INCREASING: "a gap of 0 after a cell's first nonzero (gene indices must increase)",
    _codes.ZERO_COUNT: "a stored count of 0 (counts are >= 1; zeros are never stored)",
    _codes.POSITION_OUT_OF_RANGE: "an exception position is not below the chunk's nonzero count",
    _codes.POSITIONS_NOT_INCREASING: "exception positions are not strictly increasing",
    _codes.PAYLOAD_OUT_OF_RANGE: "an exception payload is out of range",
    _codes.STORED_NOT_ESCAPED: "an exception points at a stored value other than 65535",
}


@dataclass(frozen=True, slots=True, eq=False)
class DecodedTile:
    """The cells of one tile as CSR arrays.

    Attributes
    ----------
    indptr
        ``int64[n_cells + 1]`` row pointers.
    indices
        ``int32[nnz]`` gene (column) indices, increasing within each cell.
    data
        ``int32[nnz]`` counts, all ``>= 1``.
    n_genes
        Number of columns.
    inexact_in_float32
        Whether some count is above 2^24, where float32 stops being exact.
    complete
        Whether every chunk of the tile was decoded. A tile from
        ``deltacells.codec.decode_chunks`` may not be: the cells of the chunks it
        did not decode are empty rows, which do not mean that those cells have no
        counts.
    chunk_bounds
        ``int64[n_chunks + 1]``: chunk ``c`` holds cells ``chunk_bounds[c] ..
        chunk_bounds[c + 1] - 1`` (the chunk table's ``cell_lo``, then ``n_cells``).
        Set by the decoders; ``None`` for a tile built otherwise.
    chunk_mask
        ``bool[n_chunks]``: which chunks were decoded (all of them for a complete
        tile). Set by the decoders; ``None`` for a tile built otherwise.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_genes: int
    inexact_in_float32: bool = False
    complete: bool = True
    chunk_bounds: np.ndarray | None = None
    chunk_mask: np.ndarray | None = None

    @property
    def n_cells(self) -> int:
        """Number of cells (rows)."""
        n_cells: int = self.indptr.shape[0] - 1
        return n_cells

    @property
    def nnz(self) -> int:
        """Number of stored nonzeros."""
        nnz: int = self.indices.shape[0]
        return nnz

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_cells, n_genes)``."""
        return (self.n_cells, self.n_genes)

    @property
    def nbytes(self) -> int:
        """Memory held by the three arrays."""
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    @property
    def n_chunks_decoded(self) -> int:
        """Chunks decoded (``n_chunks`` of a complete tile; 0 when ``chunk_mask`` is unknown)."""
        return 0 if self.chunk_mask is None else int(np.count_nonzero(self.chunk_mask))

    def holds(self, cells: np.ndarray | None) -> bool:
        """Whether the rows of ``cells`` (tile-local cell numbers; ``None``: every cell) are decoded.

        A complete tile holds every cell; a partial one the cells of its decoded chunks
        (those of ``chunk_mask``). A partial tile without ``chunk_bounds`` holds none.
        """
        if self.complete:
            return True
        if cells is None or self.chunk_bounds is None or self.chunk_mask is None:
            return False
        cells = np.asarray(cells)
        if cells.size == 0:
            return True
        chunks = np.searchsorted(self.chunk_bounds, cells, side="right") - 1
        return bool(self.chunk_mask[chunks].all())

    def to_csr(self, dtype: np.dtype | type = np.float32) -> sparse.csr_matrix:
        """Return the tile as a :class:`scipy.sparse.csr_matrix` with values of ``dtype``, in arrays of its own."""
        from scipy import sparse

        return sparse.csr_matrix(
            (self.data.astype(dtype), self.indices.copy(), self.indptr.copy()), shape=self.shape, copy=False
        )

    def copy(self) -> DecodedTile:
        """The same tile in writable arrays of its own."""
        return DecodedTile(
            self.indptr.copy(),
            self.indices.copy(),
            self.data.copy(),
            self.n_genes,
            self.inexact_in_float32,
            self.complete,
            None if self.chunk_bounds is None else self.chunk_bounds.copy(),
            None if self.chunk_mask is None else self.chunk_mask.copy(),
        )

    def freeze(self) -> DecodedTile:
        """Make the arrays read-only (in place) and return the tile: what a cache shares between readers."""
        for array in (self.indptr, self.indices, self.data, self.chunk_bounds, self.chunk_mask):
            if array is not None:
                array.flags.writeable = False
        return self


def require_little_endian() -> None:
    """Refuse to decode on a big-endian host, as docs/format.md requires."""
    if HOST_BYTEORDER != "little":
        msg = f"deltacells tiles are little-endian and cannot be read on a {HOST_BYTEORDER}-endian host"
        raise UnsupportedPlatformError(msg)


def decode_tile(blob: bytes | bytearray | memoryview, *, name: str = "tile", threads: int | None = None) -> DecodedTile:
    """Decode one tile.

    Every rule of docs/format.md is checked (header, CRC-32, chunk table, indptr, frame
    sizes, exception frames, gene range, counts ``>= 1``); nothing is allocated on
    the strength of a header field before the object is known to be large enough
    to justify it.

    Parameters
    ----------
    blob
        The whole tile object.
    name
        How to call the object in error messages (e.g. its path).
    threads
        Threads that decode the chunks; ``None`` uses the shared pool for large
        tiles, ``1`` decodes on the calling thread.

    Returns
    -------
    DecodedTile
        ``indptr`` (int64), ``indices`` (int32), ``data`` (int32), ``n_genes``.

    Raises
    ------
    FormatError
        If the bytes break any rule of the format; the message names ``name`` and
        the field at fault.

    Examples
    --------
    >>> import numpy as np, deltacells
    >>> blob = deltacells.encode_tile(np.array([0, 2, 2, 3]), np.array([1, 4, 0]), np.array([5, 1, 70000]), n_genes=6)
    >>> tile = deltacells.decode_tile(blob)
    >>> tile.shape, tile.data.tolist()
    ((3, 6), [5, 1, 70000])
    """
    checked = check_tile_bytes(blob, name=name)
    prepare_kernels(checked.nnz)
    indices, data = empty_pair(checked.nnz, np.int32, np.int32)  # one allocation for both
    large = checked.decode_into(indices, data, threads=threads)
    return DecodedTile(
        indptr=checked.indptr.astype(np.int64, copy=True),
        indices=indices,
        data=data,
        n_genes=checked.n_genes,
        inexact_in_float32=large,
        chunk_bounds=chunk_bounds(checked.table, checked.n_cells),
        chunk_mask=np.ones(checked.header.n_chunks, dtype=bool),
    )


@dataclass(frozen=True, slots=True, eq=False)
class CheckedTile:
    """A whole tile object whose header, CRC-32, indptr, chunk table and frame sizes are checked.

    Made by :func:`check_tile_bytes`; :meth:`decode_into` then decodes its chunks into arrays the caller
    provides: the slices of a larger output, so that a read of many tiles writes each nonzero once, in its
    final dtype, with no intermediate arrays.

    Attributes
    ----------
    header
        The tile's header.
    indptr
        ``<i8[n_cells + 1]`` row pointers: a read-only view of the object's bytes.
    table
        The chunk table, ``uint64[n_chunks, 12]``.
    source
        The object's bytes.
    name
        How the object is called in error messages.
    """

    header: TileHeader
    indptr: np.ndarray
    table: np.ndarray
    source: ByteSource
    name: str

    @property
    def n_cells(self) -> int:
        """Cells of the tile."""
        return self.header.n_cells

    @property
    def nnz(self) -> int:
        """Nonzeros of the tile."""
        return self.header.nnz

    @property
    def n_genes(self) -> int:
        """Genes (columns) of the tile."""
        return self.header.n_genes

    def decode_into(
        self,
        out_indices: np.ndarray,
        out_data: np.ndarray,
        *,
        threads: int | None = None,
        columns: np.ndarray | None = None,
    ) -> bool:
        """Decode every chunk into ``out_indices`` (int32) and ``out_data``; return whether a count exceeds 2^24.

        Parameters
        ----------
        out_indices
            ``int32[nnz]``: the tile's gene indices go here.
        out_data
            ``[nnz]`` of ``int32``, ``int64``, ``float32`` or ``float64``: the counts, written in that dtype
            (no intermediate array; float32 holds counts exactly up to 2^24).
        threads
            Threads that decode the chunks; ``None`` uses the shared pool for large tiles, ``1`` decodes on
            the calling thread.
        columns
            ``int32[n_genes]``: write ``columns[g]`` for stored gene ``g`` (a dataset read in the genes'
            original order); rows then are not sorted by column. ``None``: the stored genes.

        Raises
        ------
        FormatError
            If a frame breaks a rule of the format (the message names the tile, chunk and stream).
        """
        self._check_outputs(out_indices, out_data)
        n_threads = default_threads() if threads is None else threads
        if n_threads > 1 and self.header.n_chunks > 1 and self.header.nnz >= _PARALLEL_MIN_NNZ:
            units = work_units(self.table, np.arange(self.header.n_chunks))
            if len(units) > 1:
                pool = shared_pool()
                futures = [pool.submit(self.decode_chunks, unit, out_indices, out_data, columns) for unit in units]
                results = [future.result() for future in futures]  # every unit, not up to the first large one
                return any(results)
        return self.decode_chunks(range(self.header.n_chunks), out_indices, out_data, columns)

    def decode_chunks(
        self,
        chunks: Iterable[int],
        out_indices: np.ndarray,
        out_data: np.ndarray,
        columns: np.ndarray | None = None,
    ) -> bool:
        """Decode ``chunks`` into their parts of the tile's output arrays (a unit of work).

        See :meth:`decode_into`; returns whether a count exceeds 2^24. The small chunks without exceptions
        (most of them) are decoded together, in one kernel call (``codec._batch``); the others, and all of
        them if that finds a problem, one after the other, each raising what is wrong with it.
        """
        numbers = np.fromiter(chunks, dtype=np.int64) if not isinstance(chunks, np.ndarray) else chunks
        numbers = numbers.astype(np.int64, copy=False)
        # The writer's chunks hold about equal nonzeros: those of a tile whose chunks average twice a run's bound
        # are not looked at (the look costs microseconds of the GIL, for each unit of a dense tile).
        if self.nnz <= 2 * RUN_MAX_CHUNK_NNZ * max(1, self.header.n_chunks):
            plain = plain_chunks(self.table, numbers)
            if plain.any():
                args = (self.source, self.table, numbers[plain], self.indptr, self.n_genes, out_indices, out_data)
                whole = self.source.view if isinstance(self.source, BlobSource) else None
                if try_decode_run(*args, columns, whole=whole):
                    numbers = numbers[~plain]
        large = False
        for chunk in numbers.tolist():
            large |= self.decode_chunk(chunk, out_indices, out_data, columns)
        return large

    def decode_chunk(
        self, chunk: int, out_indices: np.ndarray, out_data: np.ndarray, columns: np.ndarray | None = None
    ) -> bool:
        """Decode chunk ``chunk`` into its part of the tile's output arrays (see :meth:`decode_into`).

        The chunks of a tile may be decoded by several threads at once, each into its own part. Returns
        whether a count exceeds 2^24.
        """
        row = self.table[chunk]
        lo, hi = int(row[NNZ_LO]), int(row[NNZ_HI])
        return self.decode_chunk_into(chunk, out_indices[lo:hi], out_data[lo:hi], columns)

    def decode_chunk_into(
        self,
        chunk: int,
        out_indices: np.ndarray,
        out_data: np.ndarray,
        columns: np.ndarray | None = None,
        *,
        sort: bool = True,
    ) -> bool:
        """Decode chunk ``chunk`` into arrays of its own: ``out_indices`` and ``out_data`` hold its nonzeros.

        For a reader that puts chunks of several tiles side by side. Their rows are the tile's cells
        ``cell_lo .. cell_hi - 1`` (the chunk table's), with the tile's ``indptr`` shifted by ``nnz_lo``.
        ``columns`` maps stored genes as in :meth:`decode_into`; with ``sort`` false the mapped columns of a
        row are left in stored order (for a reader that makes dense rows of them). Returns whether a count
        exceeds 2^24.

        Raises
        ------
        InvalidValueError
            If the arrays do not hold exactly the chunk's nonzeros.
        FormatError
            If a frame breaks a rule of the format (the message names the tile, chunk and stream).
        """
        row = self.table[chunk]
        n = int(row[NNZ_HI]) - int(row[NNZ_LO])
        if out_indices.shape != (n,) or out_data.shape != (n,):
            shapes = f"{out_indices.shape} and {out_data.shape}"
            msg = f"{self.name}: chunk {chunk} holds {n} nonzeros, the output arrays {shapes}"
            raise InvalidValueError(msg)
        where = f"{self.name}: chunk {chunk}"
        return _decode_chunk(self.source, row, self.indptr, self.n_genes, out_indices, out_data, where, columns, sort)

    def _check_outputs(self, out_indices: np.ndarray, out_data: np.ndarray) -> None:
        n = self.header.nnz
        if out_indices.shape != (n,) or out_data.shape != (n,):
            msg = f"{self.name}: the output arrays hold {out_indices.shape} and {out_data.shape}, the tile {n} nonzeros"
            raise InvalidValueError(msg)


def decode_tiles(
    tiles: Sequence[CheckedTile],
    whole: memoryview,
    offsets: np.ndarray,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    out_starts: np.ndarray,
    columns: np.ndarray | None = None,
) -> bool:
    """Decode every chunk of checked tiles whose objects lie side by side in ``whole``; whether a count exceeds 2^24.

    The small chunks of all of them decode in one kernel call, their frames decompressed in one call of
    zstandard (``codec._batch.try_decode_tiles``): an atlas's tiles of a few thousand nonzeros cost their
    bytes, not a call each. The other chunks (exceptions, large ones), and every chunk if that finds a
    problem, are decoded tile by tile (:meth:`CheckedTile.decode_chunks`), which raises the error of the
    first broken tile.

    Parameters
    ----------
    tiles
        The tiles, checked (:func:`check_tile_bytes`) from views of ``whole``.
    whole
        Their objects: tile ``k`` from byte ``offsets[k]``.
    offsets
        ``int64``: where each tile starts in ``whole``.
    out_indices, out_data
        The output arrays (int32, and a dtype the decoder writes); tile ``k`` fills ``nnz`` of them from
        ``out_starts[k]``.
    out_starts
        ``int64``: where each tile's nonzeros go.
    columns
        As for :meth:`CheckedTile.decode_into` (rows are sorted).

    Raises
    ------
    FormatError
        If a tile breaks a rule of the format (the message names it, the chunk and the stream).
    """
    if not tiles:
        return False
    n_genes = tiles[0].n_genes
    done, others = False, list[np.ndarray]()
    if all(tile.n_genes == n_genes for tile in tiles):
        tables, indptrs = [tile.table for tile in tiles], [tile.indptr for tile in tiles]
        outputs = (out_indices, out_data, np.asarray(out_starts, dtype=np.int64), columns)
        done, others = try_decode_tiles(whole, np.asarray(offsets, dtype=np.int64), tables, indptrs, n_genes, *outputs)
    large = False
    for k, tile in enumerate(tiles):
        start = int(out_starts[k])
        indices, data = out_indices[start : start + tile.nnz], out_data[start : start + tile.nnz]
        if not done:
            large |= tile.decode_chunks(range(tile.header.n_chunks), indices, data, columns)
            continue
        for chunk in others[k].tolist():
            large |= tile.decode_chunk(chunk, indices, data, columns)
    return large


def check_tile_bytes(blob: bytes | bytearray | memoryview, *, name: str = "tile") -> CheckedTile:
    """Check everything of a whole tile object that comes before decompression; nothing is decoded yet.

    The header, the CRC-32 of the payload, the indptr, the chunk table, and the content size every frame
    declares, in that order (what :func:`decode_tile` checks before it allocates its output).

    Raises
    ------
    FormatError
        If the bytes break one of those rules; the message names ``name`` and the field at fault.
    """
    require_little_endian()
    view = memoryview(blob).cast("B")
    header = TileHeader.unpack(view, name=name)
    check_crc(view, header, name)
    indptr = np.frombuffer(view, dtype="<i8", count=header.n_cells + 1, offset=header.indptr_off)
    # Read-only whatever the bytes (a pooled bytearray is writable): it is a view of the object, never written,
    # and the kernels are compiled for one kind of indptr only.
    indptr.flags.writeable = False
    _check_indptr(indptr, header, name)
    table = read_chunk_table(view, header)
    check_table(table, indptr, header, name)
    source = BlobSource(view)
    if not frame_sizes_ok(view, table):  # one kernel call; else (or to say what is wrong) frame by frame
        _check_frame_sizes(source, table, range(header.n_chunks), name)
    return CheckedTile(header, indptr, table, source, name)


def check_crc(view: memoryview, header: TileHeader, name: str) -> None:
    """Check the CRC-32 of a whole tile object's payload (bytes ``[64, total_size)``) against its header.

    Raises
    ------
    FormatError
        If they differ.
    """
    crc = crc32(view[HEADER_SIZE:])
    if crc != header.crc32:
        msg = f"{name}: CRC-32 of the payload is {crc:#010x}, the header field crc32 says {header.crc32:#010x}"
        raise FormatError(msg)


def check_table(table: np.ndarray, indptr: np.ndarray, header: TileHeader, name: str) -> None:
    """:func:`~deltacells.codec._layout.check_chunk_table`, in one compiled pass when the table is valid.

    The rules are checked by a numba kernel first (a few microseconds, against about a hundred for the
    numpy checks of ``check_chunk_table``; until numba's kernels are loaded, by its numpy version); only when
    it finds a broken one do the numpy checks run, to say which and where. The ``indptr`` must have been
    checked (non-decreasing from 0).
    """
    min_offset = HEADER_SIZE + CHUNK_ENTRY_SIZE * header.n_chunks
    sizes = (header.n_cells, header.nnz, header.total_size, min_offset)
    if not chunk_table_ok(table, indptr, *(np.uint64(size) for size in sizes)):
        check_chunk_table(table, indptr, header, name=name)
        msg = f"{name}: the chunk table breaks a rule of the format"  # pragma: no cover - both agree
        raise FormatError(msg)


def work_units(table: np.ndarray, chunks: np.ndarray, min_nnz: int | None = None) -> list[list[int]]:
    """``chunks`` (sorted chunk numbers) cut into runs of at least ``min_nnz`` nonzeros: the decoding threads' tasks.

    Consecutive chunks go together until their nonzeros reach ``min_nnz`` (the last run may hold fewer): a
    chunk of ``min_nnz`` (default :data:`WORK_UNIT_NNZ`) or more is a task of its own, smaller ones share one.
    Chunks are a unit of the format (of ranged reads), tasks one of scheduling; this keeps the threads'
    overhead a share of the nonzeros, not of the chunks.

    Examples
    --------
    >>> import numpy as np
    >>> table = np.zeros((5, 12), dtype=np.uint64)
    >>> table[:, NNZ_HI] = np.cumsum([40, 40, 40, 150, 10])
    >>> table[1:, NNZ_LO] = table[:-1, NNZ_HI]
    >>> work_units(table, np.arange(5), min_nnz=100)
    [[0, 1, 2], [3], [4]]
    """
    chunks = np.asarray(chunks, dtype=np.intp)
    if chunks.shape[0] == 0:
        return []
    if min_nnz is None:
        min_nnz = WORK_UNIT_NNZ
    counts = (table[chunks, NNZ_HI] - table[chunks, NNZ_LO]).astype(np.int64)
    units: list[list[int]] = [[]]
    total = 0
    for chunk, count in zip(chunks.tolist(), counts.tolist(), strict=True):  # per chunk, never per cell
        if total >= min_nnz:
            units.append([])
            total = 0
        units[-1].append(chunk)
        total += count
    return units


def chunk_bounds(table: np.ndarray, n_cells: int) -> np.ndarray:
    """``int64[n_chunks + 1]``: the chunks' first cells (``cell_lo``), then ``n_cells``."""
    bounds = np.empty(table.shape[0] + 1, dtype=np.int64)
    bounds[:-1] = table[:, CELL_LO]
    bounds[-1] = n_cells
    return bounds


def _check_indptr(indptr: np.ndarray, header: TileHeader, name: str) -> None:
    if indptr[0] != 0:
        msg = f"{name}: indptr[0] is {indptr[0]}, must be 0"
        raise FormatError(msg)
    if header.nnz >= 2**63 or indptr[-1] != header.nnz:
        msg = f"{name}: indptr[n_cells] is {indptr[-1]} but the header field nnz is {header.nnz}"
        raise FormatError(msg)
    decreasing = np.flatnonzero(indptr[1:] < indptr[:-1])
    if decreasing.size:
        i = int(decreasing[0])
        msg = f"{name}: indptr decreases at cell {i} ({indptr[i]} -> {indptr[i + 1]}); it must be non-decreasing"
        raise FormatError(msg)


def _check_frame_sizes(source: ByteSource, table: np.ndarray, chunks: Iterable[int], name: str) -> None:
    """Check the declared size of every frame of ``chunks`` before any output is allocated."""
    for c in chunks:
        row = table[c]
        n = int(row[NNZ_HI] - row[NNZ_LO])
        for field, off, length in (("gaps", GAPS_OFF, GAPS_LEN), ("vals", VALS_OFF, VALS_LEN)):
            where = f"{name}: chunk {c} {field} stream"
            size = frame_content_size(_stream(source, row, off, length, where), where=where)
            if size != 2 * n:
                msg = f"{where}: the zstd frame declares {size} bytes, the format requires 2 * {n} = {2 * n}"
                raise FormatError(msg)
        for field, off, length in (("vexc", VEXC_OFF, VEXC_LEN), ("gexc", GEXC_OFF, GEXC_LEN)):
            if row[length] == 0:
                continue
            where = f"{name}: chunk {c} {field} frame"
            size = frame_content_size(_stream(source, row, off, length, where), where=where)
            if size % 8 or size // 8 > n:
                msg = f"{where}: declares {size} bytes; must be 8 * k with k <= {n} (the chunk's nonzeros)"
                raise FormatError(msg)


def _stream(source: ByteSource, row: np.ndarray, off: int, length: int, where: str) -> memoryview:
    return source.read(int(row[off]), int(row[length]), where)


def _decode_chunk(
    source: ByteSource,
    row: np.ndarray,
    indptr: np.ndarray,
    n_genes: int,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    where: str,
    columns: np.ndarray | None = None,
    sort: bool = True,
) -> bool:
    """Decode one chunk into ``out_indices`` and ``out_data``; return whether a count exceeds 2^24.

    ``out_indices`` and ``out_data`` hold exactly the chunk's ``nnz_hi - nnz_lo``
    nonzeros (e.g. its slices of the tile's arrays); ``indptr`` is the tile's.
    ``columns`` maps stored genes to output columns (see ``CheckedTile.decode_into``); each row's columns are
    then sorted (with their values), as scipy's canonical CSR has them, unless ``sort`` is false.
    """
    entry = row.tolist()  # Python ints: a chunk's dozen fields read once, not as numpy scalars
    cell_lo, cell_hi, nnz_lo = entry[CELL_LO], entry[CELL_HI], entry[NNZ_LO]
    n = entry[NNZ_HI] - nnz_lo
    assert out_indices.shape[0] == n and out_data.shape[0] == n
    gaps_where, vals_where = f"{where} gaps", f"{where} vals"
    # The frames' declared sizes were checked (_check_frame_sizes) before the output was allocated. They are
    # decompressed into this thread's scratch buffers, which the kernel consumes before the next chunk.
    gaps_frame = source.read(entry[GAPS_OFF], entry[GAPS_LEN], gaps_where)
    vals_frame = source.read(entry[VALS_OFF], entry[VALS_LEN], vals_where)
    gaps = np.frombuffer(decompress_scratch(gaps_frame, 2 * n, 0, where=gaps_where), np.uint8)
    vals = np.frombuffer(decompress_scratch(vals_frame, 2 * n, 1, where=vals_where), np.uint8)
    # Columns are mapped as the indices are written, unless gap exceptions must first be added to them.
    mapped = columns if not entry[GEXC_LEN] else None
    code, pos = _engine.decode_chunk(
        gaps, vals, indptr, cell_lo, cell_hi, nnz_lo, n_genes, out_indices, out_data, mapped
    )
    if code != _codes.OK:
        _raise_kernel_error(code, pos, f"{where} gaps/vals", "nonzero")
    large = False
    if entry[VEXC_LEN]:
        positions, payloads = _exception_arrays(source, row, VEXC_OFF, VEXC_LEN, f"{where} vexc frame")
        code, pos = _engine.apply_value_exceptions(positions, payloads, out_data)
        _raise_kernel_error(code, pos, f"{where} vexc frame", "exception")
        large = bool(payloads.size and payloads.max() > FLOAT32_EXACT)
    if entry[GEXC_LEN]:
        positions, payloads = _exception_arrays(source, row, GEXC_OFF, GEXC_LEN, f"{where} gexc frame")
        code, pos = _engine.apply_gap_exceptions(
            positions, payloads, indptr, cell_lo, cell_hi, nnz_lo, n_genes, out_indices
        )
        _raise_kernel_error(
            code, pos, f"{where} gexc frame", "nonzero" if code == _codes.GENE_OUT_OF_RANGE else "exception"
        )
        if columns is not None:
            _engine.map_columns(out_indices, columns)
    if columns is not None and sort:  # mapped columns are no longer increasing: a canonical CSR sorts each row
        _engine.sort_rows(indptr, cell_lo, cell_hi, nnz_lo, out_indices, out_data, columns.shape[0])
    return large


def _exception_arrays(
    source: ByteSource, row: np.ndarray, off: int, length: int, where: str
) -> tuple[np.ndarray, np.ndarray]:
    frame = _stream(source, row, off, length, where)
    size = frame_content_size(frame, where=where)
    raw = np.frombuffer(decompress_frame(frame, size, where=where), dtype="<u4")
    k = raw.shape[0] // 2
    return raw[:k], raw[k:]


def _raise_kernel_error(code: int, position: int, where: str, unit: str) -> None:
    if code != _codes.OK:
        msg = f"{where}: {_KERNEL_ERRORS[code]} (at {unit} {position})"
        raise FormatError(msg)
