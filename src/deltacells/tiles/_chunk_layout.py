"""Where the chunks of a dataset's tiles start: from each tile's header and chunk table, nothing decoded.

A chunk is the unit of decoding: reading one cell of it decompresses all of it. The writer cuts tiles into
chunks of about equal nonzeros (docs/format.md, decision 3), so chunk boundaries are not at round numbers of cells and
are not in the manifest. A reader that wants each chunk decoded once per pass (a training loader cutting
the cells into blocks) reads them here: the first ``64 + 96 * n_chunks`` bytes of every tile (its header
and chunk table: under a kilobyte for the writer's 8 chunks), many requests in flight at once.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells.codec import CELL_HI, CELL_LO, CHUNK_ENTRY_SIZE, HEADER_SIZE, TileHeader, read_chunk_table
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import check_tile, first_problem_raises, missing_tile, tile_path
from deltacells.tiles._ranged import HeaderCounts

if TYPE_CHECKING:
    from deltacells.tiles._reader import TileReader

__all__ = ["kept_chunk_starts", "read_chunk_starts"]

#: Folder of the local cache where chunk starts are kept, one file per dataset layout.
CHUNK_STARTS_FOLDER = "chunk-starts"


def kept_chunk_starts(reader: TileReader, cache_dir: Path) -> np.ndarray:
    """:func:`read_chunk_starts`, kept in a local cache between processes (for datasets on object storage).

    The starts are read from ``cache_dir / "chunk-starts" / <layout digest>.npy`` when a file there matches the
    manifest (the digest covers the cells, nonzeros and bytes of every tile and the chunks per tile), else
    read from the tiles and written there (atomically; a cache that cannot be written is skipped). A kept file
    that does not fit the manifest (increasing starts from 0 to ``n_cells`` holding every tile's first cell)
    is read again. Starts that were wrong could only cut a loader's blocks elsewhere than at the chunks
    (slower, never other cells).
    """
    manifest = reader.manifest
    path = cache_dir / CHUNK_STARTS_FOLDER / f"{_layout_digest(reader)}.npy"
    try:
        kept = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        kept = None
    if kept is not None and _fits(kept, manifest):
        kept_starts: np.ndarray = kept.astype(np.int64, copy=False)
        return kept_starts
    starts = read_chunk_starts(reader)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as file:
            np.save(file, starts, allow_pickle=False)
        os.replace(file.name, path)
    except OSError:
        pass  # a cache only: the starts are read again next time
    return starts


def _layout_digest(reader: TileReader) -> str:
    """What fixes where chunks start, as far as the manifest tells: every tile's cells, nonzeros and bytes."""
    manifest = reader.manifest
    digest = hashlib.sha256()
    digest.update(repr((int(manifest.n_cells), int(manifest.n_genes), int(manifest.n_chunks))).encode())
    for values in (manifest.tile_cells, manifest.tile_nnz, manifest.tile_bytes):
        digest.update(np.asarray(values, dtype="<i8").tobytes())
    return digest.hexdigest()[:32]


def _fits(starts: np.ndarray, manifest: Any) -> bool:
    """Whether kept starts can be the manifest's: increasing int64 from 0 to ``n_cells``, every tile's start."""
    n_cells = int(manifest.n_cells)
    if starts.ndim != 1 or starts.dtype.kind not in "iu" or not 1 <= starts.shape[0] <= n_cells + 1:
        return False
    starts = starts.astype(np.int64, copy=False)
    if starts[-1] != n_cells or (n_cells and starts[0] != 0) or np.any(np.diff(starts) <= 0):
        return False
    return bool(np.isin(np.asarray(manifest.starts, dtype=np.int64), starts).all())


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
    size = int(reader.manifest.tile_bytes[tile])
    header = TileHeader.unpack(memoryview(head), name=_where(reader, tile), object_size=size)
    return HEADER_SIZE + CHUNK_ENTRY_SIZE * header.n_chunks


def _chunk_firsts(reader: TileReader, tile: int, head: bytes) -> np.ndarray:
    """The tile-local first cell of each chunk holding cells, from its header and checked chunk table."""
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
