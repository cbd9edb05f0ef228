"""Binary layout of a tile: the header and the chunk table (docs/format.md, "A tile").

Nothing here touches compressed data: these helpers pack and unpack the fixed-size
parts of a tile and check every rule that can be checked on them alone.
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass

import numpy as np

from deltacells.errors import FormatError, InvalidValueError

MAGIC = b"DELTACEL"
VERSION = 2
HEADER_SIZE = 64
CHUNK_ENTRY_SIZE = 96
ALIGNMENT = 8
MAX_GENES = 2**31
MAX_COUNT = 2**31 - 1
U16_MAX = 65535

#: magic, version, flags, n_cells, nnz, n_genes, n_chunks, indptr_off, total_size, crc32, reserved
_HEADER = struct.Struct("<8sIIQQIIQQII")
assert _HEADER.size == HEADER_SIZE

#: Column positions in the chunk table (each entry is 12 little-endian uint64).
CHUNK_FIELDS = (
    "cell_lo",
    "cell_hi",
    "nnz_lo",
    "nnz_hi",
    "gaps_off",
    "gaps_len",
    "vals_off",
    "vals_len",
    "vexc_off",
    "vexc_len",
    "gexc_off",
    "gexc_len",
)
CELL_LO, CELL_HI, NNZ_LO, NNZ_HI, GAPS_OFF, GAPS_LEN, VALS_OFF, VALS_LEN, VEXC_OFF, VEXC_LEN, GEXC_OFF, GEXC_LEN = (
    range(12)
)


def align(offset: int) -> int:
    """Round ``offset`` up to the next multiple of 8."""
    return (offset + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True, slots=True)
class TileHeader:
    """The 64-byte header of a tile."""

    n_cells: int
    nnz: int
    n_genes: int
    n_chunks: int
    indptr_off: int
    total_size: int
    crc32: int
    version: int = VERSION
    flags: int = 0

    def pack(self) -> bytes:
        """Return the 64 header bytes."""
        return _HEADER.pack(
            MAGIC,
            self.version,
            self.flags,
            self.n_cells,
            self.nnz,
            self.n_genes,
            self.n_chunks,
            self.indptr_off,
            self.total_size,
            self.crc32,
            0,
        )

    @classmethod
    def unpack(cls, blob: bytes | memoryview, *, name: str = "tile", object_size: int | None = None) -> TileHeader:
        """Parse and check the header at the start of ``blob``.

        Checks everything the header alone can tell: magic, version, flags,
        reserved, ``n_genes`` range, ``indptr_off`` alignment and position,
        ``total_size`` against the object size, and that the chunk table and the
        indptr fit inside the object (so nothing sized by the header is allocated
        before it is known to exist).

        Parameters
        ----------
        blob
            The whole tile object, or (with ``object_size``) its first bytes, at
            least the :data:`HEADER_SIZE` bytes of the header.
        name
            How to call the object in error messages (e.g. its path).
        object_size
            Size of the whole object, which the header fields are checked against;
            ``None`` (the default) means ``len(blob)``, i.e. ``blob`` is the whole
            object. A ranged reader that holds only the start of the object passes
            the size it knows from the manifest or the store.

        Returns
        -------
        TileHeader

        Raises
        ------
        FormatError
            Naming ``name`` and the offending field.
        InvalidValueError
            If ``object_size`` is given and ``blob`` holds fewer than
            :data:`HEADER_SIZE` bytes of an object that is at least that large.
        """
        size = len(blob) if object_size is None else operator.index(object_size)
        if size < HEADER_SIZE:
            msg = f"{name}: {size} bytes is shorter than the {HEADER_SIZE}-byte header"
            raise FormatError(msg)
        if len(blob) < HEADER_SIZE:
            msg = f"{name}: {len(blob)} bytes given; the {HEADER_SIZE}-byte header of the object is needed"
            raise InvalidValueError(msg)
        (magic, version, flags, n_cells, nnz, n_genes, n_chunks, indptr_off, total_size, crc32, reserved) = (
            _HEADER.unpack_from(blob, 0)
        )
        if magic != MAGIC:
            msg = f"{name}: header field magic is {bytes(magic)!r}, expected {MAGIC!r} (not a deltacells tile)"
            raise FormatError(msg)
        if version != VERSION:
            msg = f"{name}: header field version is {version}; this reader understands version {VERSION} only"
            raise FormatError(msg)
        if flags != 0:
            msg = f"{name}: header field flags is {flags:#x}; unknown flags (must be 0)"
            raise FormatError(msg)
        if reserved != 0:
            msg = f"{name}: header field reserved is {reserved:#x}, must be 0"
            raise FormatError(msg)
        if not 1 <= n_genes <= MAX_GENES:
            msg = f"{name}: header field n_genes is {n_genes}, must be 1 .. 2^31"
            raise FormatError(msg)
        if total_size != size:
            msg = f"{name}: header field total_size is {total_size} but the object has {size} bytes"
            raise FormatError(msg)
        table_end = HEADER_SIZE + CHUNK_ENTRY_SIZE * n_chunks
        if table_end > size:
            msg = (
                f"{name}: header field n_chunks is {n_chunks}; the chunk table would end past the object ({size} bytes)"
            )
            raise FormatError(msg)
        if indptr_off % ALIGNMENT:
            msg = f"{name}: header field indptr_off is {indptr_off}, not a multiple of {ALIGNMENT}"
            raise FormatError(msg)
        if indptr_off < table_end:
            msg = f"{name}: header field indptr_off is {indptr_off}, inside the chunk table (which ends at {table_end})"
            raise FormatError(msg)
        # (n_cells + 1) * 8 must fit: compare without forming huge products first.
        if n_cells >= size or indptr_off + 8 * (n_cells + 1) > size:
            msg = f"{name}: header field n_cells is {n_cells}; its indptr would end past the object ({size} bytes)"
            raise FormatError(msg)
        if n_cells > 0 and n_chunks == 0:
            msg = f"{name}: header field n_chunks is 0 but the tile has {n_cells} cells"
            raise FormatError(msg)
        return cls(
            n_cells=n_cells,
            nnz=nnz,
            n_genes=n_genes,
            n_chunks=n_chunks,
            indptr_off=indptr_off,
            total_size=total_size,
            crc32=crc32,
        )


def read_chunk_table(blob: bytes | memoryview, header: TileHeader) -> np.ndarray:
    """Return the chunk table as a ``(n_chunks, 12)`` uint64 array: a read-only view of ``blob``.

    Read-only whatever the bytes (a pooled ``bytearray`` is writable): it is never written, and the kernels that
    read it are compiled for read-only arrays only.
    """
    table = np.frombuffer(blob, dtype="<u8", count=12 * header.n_chunks, offset=HEADER_SIZE)
    table.flags.writeable = False
    return table.reshape(header.n_chunks, 12)


def check_chunk_table(table: np.ndarray, indptr: np.ndarray, header: TileHeader, *, name: str = "tile") -> None:
    """Check that the chunks cover the tile contiguously and agree with the indptr.

    Also checks that every stream lies inside the object. Exception-frame offsets
    are only checked where their length is non-zero (the spec ignores them
    otherwise).

    Raises
    ------
    FormatError
        Naming the chunk and the field at fault.
    """
    n_chunks = header.n_chunks
    if n_chunks == 0:
        return
    cell_lo, cell_hi, nnz_lo, nnz_hi = table[:, CELL_LO], table[:, CELL_HI], table[:, NNZ_LO], table[:, NNZ_HI]
    if cell_lo[0] != 0 or nnz_lo[0] != 0:
        msg = f"{name}: chunk 0 starts at cell {cell_lo[0]}, nonzero {nnz_lo[0]}; must start at 0, 0"
        raise FormatError(msg)
    breaks = np.flatnonzero((cell_lo[1:] != cell_hi[:-1]) | (nnz_lo[1:] != nnz_hi[:-1]))
    if breaks.size:
        i = int(breaks[0]) + 1
        msg = (
            f"{name}: chunk {i} starts at cell {cell_lo[i]}, nonzero {nnz_lo[i]} but chunk {i - 1} ended at "
            f"cell {cell_hi[i - 1]}, nonzero {nnz_hi[i - 1]} (chunks must be contiguous)"
        )
        raise FormatError(msg)
    bad = np.flatnonzero((cell_hi < cell_lo) | (nnz_hi < nnz_lo))
    if bad.size:
        i = int(bad[0])
        msg = f"{name}: chunk {i} has cell_hi < cell_lo or nnz_hi < nnz_lo"
        raise FormatError(msg)
    if cell_hi[-1] != header.n_cells or nnz_hi[-1] != header.nnz:
        msg = (
            f"{name}: the last chunk ends at cell {cell_hi[-1]}, nonzero {nnz_hi[-1]}; the header says "
            f"n_cells = {header.n_cells}, nnz = {header.nnz}"
        )
        raise FormatError(msg)
    # cell_hi is now known to be <= n_cells, so it indexes the indptr safely.
    bad = np.flatnonzero(
        (indptr[cell_lo.astype(np.intp)] != nnz_lo.astype(np.int64))
        | (indptr[cell_hi.astype(np.intp)] != nnz_hi.astype(np.int64))
    )
    if bad.size:
        i = int(bad[0])
        msg = (
            f"{name}: chunk {i} covers nonzeros {nnz_lo[i]}..{nnz_hi[i]} but the indptr says "
            f"{indptr[int(cell_lo[i])]}..{indptr[int(cell_hi[i])]} for cells {cell_lo[i]}..{cell_hi[i]}"
        )
        raise FormatError(msg)
    n_per_chunk = nnz_hi - nnz_lo
    if np.any(n_per_chunk >= 2**32):
        i = int(np.flatnonzero(n_per_chunk >= 2**32)[0])
        msg = f"{name}: chunk {i} has {n_per_chunk[i]} nonzeros; a chunk must have fewer than 2^32"
        raise FormatError(msg)
    size = header.total_size
    for field, off_col, len_col, required in (
        ("gaps", GAPS_OFF, GAPS_LEN, True),
        ("vals", VALS_OFF, VALS_LEN, True),
        ("vexc", VEXC_OFF, VEXC_LEN, False),
        ("gexc", GEXC_OFF, GEXC_LEN, False),
    ):
        off, length = table[:, off_col], table[:, len_col]
        present = length > 0
        # Compare as Python-free uint64 without overflow: off <= size and length <= size - off.
        bad = np.flatnonzero(present & ((off > size) | (length > size - np.minimum(off, size))))
        if bad.size:
            i = int(bad[0])
            msg = (
                f"{name}: chunk {i} {field} stream at {off[i]} + {length[i]} runs past the end of the object "
                f"({size} bytes)"
            )
            raise FormatError(msg)
        bad = np.flatnonzero(present & (off < HEADER_SIZE + CHUNK_ENTRY_SIZE * n_chunks))
        if bad.size:
            i = int(bad[0])
            msg = f"{name}: chunk {i} {field} stream at offset {off[i]} overlaps the header or chunk table"
            raise FormatError(msg)
        if required:
            bad = np.flatnonzero(~present)
            if bad.size:
                i = int(bad[0])
                msg = f"{name}: chunk {i} has an empty {field} stream (every chunk has a gaps and a vals frame)"
                raise FormatError(msg)
