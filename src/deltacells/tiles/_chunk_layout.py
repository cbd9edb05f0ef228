"""Where the chunks of a dataset's tiles start: from each tile's header and chunk table, nothing decoded.

A chunk is the unit of decoding: reading one cell of it decompresses all of it. The writer cuts tiles into
chunks of about equal nonzeros (DECISIONS.md 3), so chunk boundaries are not at round numbers of cells and
are not in the manifest. A reader that wants each chunk decoded once per pass (a training loader cutting
the cells into blocks) reads them here: the first ``64 + 96 * n_chunks`` bytes of every tile (its header
and chunk table: under a kilobyte for the writer's 8 chunks), many requests in flight at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import check_tile, first_problem_raises, missing_tile, tile_path
from deltacells.tiles._ranged import HeaderCounts

if TYPE_CHECKING:
    from deltacells.tiles._reader import TileReader

__all__ = ["read_chunk_starts"]


def read_chunk_starts(reader: TileReader) -> np.ndarray:
    """The dataset cell number where each chunk (with cells) of each tile starts, then ``n_cells``.

    Parameters
    ----------
    reader
        The dataset's tile reader (its store and manifest).

    Returns
    -------
    numpy.ndarray
        ``int64``, increasing: the first cell of every chunk holding cells, in tile and chunk order (so
        every tile's first cell is among them), and the number of cells last.

    Raises
    ------
    FormatError
        If a tile's header or chunk table breaks a rule of the format or disagrees with the manifest.
    MissingObjectError
        If a tile is not there.
    """
    from deltacells.codec._layout import CHUNK_ENTRY_SIZE, HEADER_SIZE

    manifest = reader.manifest
    store = reader.store
    sizes = np.asarray(manifest.tile_bytes, dtype=np.int64)
    n_tiles = int(manifest.n_tiles)
    guess = HEADER_SIZE + CHUNK_ENTRY_SIZE * max(1, int(manifest.n_chunks))
    want = np.minimum(sizes, guess)
    try:
        heads = store.read_many([(tile_path(t), 0, int(want[t])) for t in range(n_tiles)])
    except MissingObjectError as exc:
        raise _missing(reader, exc) from exc
    starts = np.asarray(manifest.starts, dtype=np.int64)
    firsts = []
    for t in range(n_tiles):
        head = heads[t]
        table_end = _table_end(reader, t, head)
        if table_end > len(head):  # more chunks than the manifest's n_chunks (another writer): read the rest
            try:
                head = store.read(tile_path(t), 0, table_end)
            except MissingObjectError as exc:
                raise _missing(reader, exc) from exc
        firsts.append(_chunk_firsts(reader, t, head) + starts[t])
    return np.concatenate([*firsts, np.array([manifest.n_cells], dtype=np.int64)])


def _where(reader: TileReader, tile: int) -> str:
    return f"{reader.store.url.rstrip('/')}/{tile_path(tile)}"


def _missing(reader: TileReader, exc: MissingObjectError) -> Exception:
    """The missing tile named, from the store's error (its message names the object)."""
    text = str(exc)
    for t in range(int(reader.manifest.n_tiles)):
        if tile_path(t) in text:
            return missing_tile(t, reader.fields).to_exception(reader.store.url)
    return exc


def _table_end(reader: TileReader, tile: int, head: bytes) -> int:
    """Where the tile's chunk table ends, from its header (checked against the tile's size in the manifest)."""
    from deltacells.codec._layout import CHUNK_ENTRY_SIZE, HEADER_SIZE, TileHeader

    size = int(reader.manifest.tile_bytes[tile])
    header = TileHeader.unpack(memoryview(head), name=_where(reader, tile), object_size=size)
    return HEADER_SIZE + CHUNK_ENTRY_SIZE * header.n_chunks


def _chunk_firsts(reader: TileReader, tile: int, head: bytes) -> np.ndarray:
    """The tile-local first cell of each chunk holding cells, from its header and checked chunk table."""
    from deltacells.codec._layout import CELL_HI, CELL_LO, TileHeader, read_chunk_table

    where = _where(reader, tile)
    view = memoryview(head)
    header = TileHeader.unpack(view, name=where, object_size=int(reader.manifest.tile_bytes[tile]))
    counts = HeaderCounts(header.n_cells, header.nnz, header.n_genes)
    first_problem_raises(check_tile(counts, tile, reader.fields), reader.store.url)
    table = read_chunk_table(view, header)
    lo, hi = table[:, CELL_LO].astype(np.int64), table[:, CELL_HI].astype(np.int64)
    n = header.n_cells
    if n and (lo.shape[0] == 0 or lo[0] != 0 or hi[-1] != n or np.any(lo[1:] != hi[:-1]) or np.any(hi < lo)):
        msg = (
            f"{where}: the chunk table's cell_lo and cell_hi do not cover the tile's {n} cells in order "
            "(each chunk must start where the previous one ends, the first at 0, the last end at n_cells)"
        )
        raise FormatError(msg)
    return lo[hi > lo]
