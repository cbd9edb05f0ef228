"""Reads of sparse atlases: small tiles read, checked and decoded in groups, their small chunks in one kernel call.

An atlas of a few nonzeros a cell has thousands of tiles of a few thousand nonzeros, cut in chunks of a few
hundred: ``tiles._into`` makes groups of consecutive small tiles (``tile_groups``), each a task that reads,
checks and decodes its own, and ``codec._batch`` decodes the small chunks of a tile in one kernel call. The
results must be those of scipy, whatever the group boundaries, the dtype or the gene order, and a malformed
tile inside a group must raise the error that names it, as reading it alone does.
"""

from __future__ import annotations

import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zstandard
from scipy import sparse

import deltacells
from deltacells.codec import HEADER_SIZE, NNZ_HI, NNZ_LO, TileHeader, _batch, read_chunk_table
from deltacells.core import open_dataset
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import tile_path
from deltacells.tiles import _into
from deltacells.tiles._into import tile_groups

#: Columns of the chunk table that deltacells.codec does not export (docs/format.md, "Chunk table").
GAPS_OFF, GAPS_LEN = 4, 5

N_CELLS, N_GENES, TILE = 3000, 60, 32  # 94 tiles, the last of 24 cells
N_TILES = -(-N_CELLS // TILE)
ORDER = np.random.default_rng(11).permutation(N_GENES)


@pytest.fixture(scope="module")
def counts(make_counts: Callable[..., sparse.csr_matrix]) -> sparse.csr_matrix:
    """About 3 nonzeros a cell, a fifth of the cells empty: tiles of about 100 nonzeros, chunks of a few.

    A few counts above 65535 put value exceptions in some chunks, which are decoded one by one.
    """
    matrix = make_counts(N_CELLS, N_GENES, density=0.06, seed=8, empty_fraction=0.2)
    matrix.data[::401] = 70_000
    return matrix


@pytest.fixture(scope="module")
def atlas(write_module_dataset: Callable[..., Path], counts: sparse.csr_matrix) -> Path:
    """The counts in tiles of 32 cells, 24 chunks each (the writer's default), genes stored in another order."""
    return write_module_dataset(counts, tile_size=TILE, gene_order=ORDER)


def _expected(counts: sparse.csr_matrix, index: slice, gene_order: str, dtype: type) -> sparse.csr_matrix:
    matrix = counts[index] if gene_order == "original" else counts[index][:, ORDER]
    matrix = matrix.astype(dtype)
    matrix.sort_indices()
    return matrix


def _assert_same(got: sparse.csr_matrix, want: sparse.csr_matrix) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.has_canonical_format
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


RANGES = [
    slice(0, N_CELLS),  # every tile, the last one shorter
    slice(5, N_CELLS - 7),  # partial ends, 92 whole tiles between
    slice(TILE, 60 * TILE),  # whole tiles only
    slice(N_CELLS - 2 * TILE - 3, N_CELLS),  # to the end: the short last tile whole
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("gene_order", ["original", "stored"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("index", RANGES, ids=lambda s: f"{s.start}:{s.stop}")
def test_ranges_of_many_small_tiles_equal_scipy(
    atlas: Path, counts: sparse.csr_matrix, threads: int, gene_order: str, dtype: type, index: slice
) -> None:
    dataset = open_dataset(atlas, threads=threads, tile_cache_bytes=0).with_gene_order(gene_order)
    _assert_same(dataset.read_rows(index, dtype=dtype), _expected(counts, index, gene_order, dtype))
    assert dataset.tiles_decoded == (index.stop - 1) // TILE - index.start // TILE + 1


def test_the_tiles_are_small_and_finely_chunked(atlas: Path) -> None:
    """What the tests here are about: tiles below a work unit, chunks the runs decode together."""
    manifest = open_dataset(atlas).manifest
    assert manifest.n_tiles == N_TILES and manifest.tile_cells[-1] == N_CELLS % TILE
    assert int(np.max(manifest.tile_nnz)) < _into.WORK_UNIT_NNZ
    blob = (atlas / tile_path(3)).read_bytes()
    table = read_chunk_table(blob, TileHeader.unpack(blob))
    assert table.shape[0] == deltacells.codec.DEFAULT_N_CHUNKS
    assert _batch.plain_chunks(table, np.arange(table.shape[0], dtype=np.int64)).sum() >= table.shape[0] // 2


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("min_nnz", [1, 150, 1_000, 10**9])
def test_any_grouping_gives_the_same_matrix(
    atlas: Path, counts: sparse.csr_matrix, monkeypatch: pytest.MonkeyPatch, threads: int, min_nnz: int
) -> None:
    """Groups of one tile, of a few, of all; tiles above the bound read alone, their chunks in units."""
    monkeypatch.setattr(_into, "WORK_UNIT_NNZ", min_nnz)
    dataset = open_dataset(atlas, threads=threads, tile_cache_bytes=0).with_gene_order("original")
    _assert_same(dataset.read_rows(), _expected(counts, slice(None), "original", counts.dtype))  # as written


def test_tile_groups() -> None:
    assert tile_groups(np.array([], dtype=np.int64), min_nnz=10) == []
    assert tile_groups(np.array([3, 3, 3]), min_nnz=10) == [(0, 3)]
    assert tile_groups(np.array([3, 3, 4, 3]), min_nnz=10) == [(0, 3), (3, 4)]
    assert tile_groups(np.array([3, 20, 3, 3, 20]), min_nnz=10) == [(0, 1), (1, 2), (2, 4), (4, 5)]
    assert tile_groups(np.array([0, 0, 0]), min_nnz=1) == [(0, 3)]
    nnz = np.random.default_rng(0).integers(0, 50, 200)
    groups = tile_groups(nnz, min_nnz=100)
    assert [g[0] for g in groups[1:]] == [g[1] for g in groups[:-1]] and groups[0][0] == 0 and groups[-1][1] == 200
    for first, stop in groups[:-1]:  # every group but the last reaches the bound, and needed its last tile to
        assert nnz[first:stop].sum() >= 100 and nnz[first : stop - 1].sum() < 100


def test_the_runs_decode_what_the_chunks_decode_one_by_one(atlas: Path, compiled_kernels: None) -> None:
    """The kernel call of a tile's small chunks writes what decoding them one by one writes.

    (With numba's kernels loaded: until then, chunks decode one by one.)
    """
    columns = deltacells.codec.read_only(np.argsort(ORDER).astype(np.int32))
    for tile in (0, 17, N_TILES - 1):
        checked = deltacells.codec.check_tile_bytes((atlas / tile_path(tile)).read_bytes())
        chunks = np.arange(checked.header.n_chunks)
        plain = chunks[_batch.plain_chunks(checked.table, chunks)]
        outputs = np.empty(checked.nnz, np.int32), np.empty(checked.nnz, np.float32)
        args = (checked.source, checked.table, plain, checked.indptr, checked.n_genes, *outputs, None)
        assert _batch.try_decode_run(*args, whole=checked.source.view), "the run path decodes them"
        for mapped in (None, columns):
            run = np.empty(checked.nnz, np.int32), np.empty(checked.nnz, np.float64)
            one = np.empty(checked.nnz, np.int32), np.empty(checked.nnz, np.float64)
            checked.decode_chunks(chunks, *run, mapped)
            for chunk in chunks.tolist():
                checked.decode_chunk(chunk, *one, mapped)
            np.testing.assert_array_equal(run[0], one[0])
            np.testing.assert_array_equal(run[1], one[1])


# ---------------------------------------------------------------------- malformed tiles inside a group


def _rewrite(path: Path, edit: Callable[[bytearray, np.ndarray], None]) -> None:
    """Edit a tile's payload, then set its header's CRC-32 to match: only the later checks can find it."""
    blob = bytearray(path.read_bytes())
    edit(blob, read_chunk_table(bytes(blob), TileHeader.unpack(bytes(blob))))
    blob[56:60] = (zlib.crc32(blob[HEADER_SIZE:]) & 0xFFFFFFFF).to_bytes(4, "little")
    path.write_bytes(bytes(blob))


def _first_plain_chunk(table: np.ndarray) -> int:
    return int(np.flatnonzero(_batch.plain_chunks(table, np.arange(table.shape[0], dtype=np.int64)))[0])


def _frame_header(blob: bytearray, offset: int, length: int) -> tuple[int, int]:
    """``(header size, declared content size)`` of the zstd frame at ``blob[offset : offset + length]``."""
    frame = bytes(blob[offset : offset + length])
    return zstandard.frame_header_size(frame), zstandard.get_frame_parameters(frame).content_size


def _declare_another_size(blob: bytearray, table: np.ndarray) -> None:
    chunk = _first_plain_chunk(table)
    offset, length = int(table[chunk, GAPS_OFF]), int(table[chunk, GAPS_LEN])
    header, declared = _frame_header(blob, offset, length)
    assert declared == 2 * int(table[chunk, NNZ_HI] - table[chunk, NNZ_LO])
    field = 1 if declared < 256 else 2  # the content size ends the frame header (1 byte, or 2 less 256)
    blob[offset + header - field] ^= 0x01


def _break_a_block(blob: bytearray, table: np.ndarray) -> None:
    chunk = _first_plain_chunk(table)
    offset, length = int(table[chunk, GAPS_OFF]), int(table[chunk, GAPS_LEN])
    header, _ = _frame_header(blob, offset, length)
    blob[offset + header] |= 0x06  # the first block's type: reserved (3)


@pytest.fixture
def copy(atlas: Path, tmp_path: Path) -> Path:
    target = tmp_path / "atlas"
    shutil.copytree(atlas, target)
    return target


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_declare_another_size, r"gaps stream: the zstd frame declares \d+ bytes, the format requires"),
        (_break_a_block, r"gaps: the zstd frame has a block of the reserved type"),
    ],
    ids=["declared-size", "reserved-block"],
)
def test_a_malformed_tile_in_a_group_is_named(
    copy: Path, threads: int, edit: Callable[[bytearray, np.ndarray], None], message: str
) -> None:
    tile = 41  # inside a group of many tiles
    _rewrite(copy / tile_path(tile), edit)
    with pytest.raises(FormatError, match=message) as caught:
        deltacells.decode_tile((copy / tile_path(tile)).read_bytes())
    alone = str(caught.value)
    dataset = open_dataset(copy, threads=threads, tile_cache_bytes=0)
    with pytest.raises(FormatError, match=message) as caught:
        dataset.read_rows()
    assert tile_path(tile) in str(caught.value)
    assert alone.split(": ", 1)[1] in str(caught.value)  # what reading the tile alone says
    with pytest.raises(FormatError, match=message):
        dataset.read_rows(slice((tile - 3) * TILE + 1, (tile + 5) * TILE))
    assert dataset.read_rows(slice(0, tile * TILE)).shape == (tile * TILE, N_GENES)  # the tiles before it read


def test_the_first_malformed_tile_is_named(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two malformed tiles in different groups: the read names the first, as a read tile by tile would."""
    monkeypatch.setattr(_into, "WORK_UNIT_NNZ", 300)  # groups of a few tiles
    assert len(tile_groups(open_dataset(copy).manifest.tile_nnz)) > 10
    for tile in (70, 30):
        _rewrite(copy / tile_path(tile), _declare_another_size)
    for _ in range(3):
        with pytest.raises(FormatError, match=tile_path(30)):
            open_dataset(copy, threads=2, tile_cache_bytes=0).read_rows()


def test_a_malformed_tile_before_a_missing_one_is_named_first(copy: Path) -> None:
    """Tile 30 malformed, tile 50 missing, one group: the first in order is named, as reading them in turn does."""
    assert len(tile_groups(open_dataset(copy).manifest.tile_nnz)) == 1
    _rewrite(copy / tile_path(30), _declare_another_size)
    (copy / tile_path(50)).unlink()
    with pytest.raises(FormatError, match=tile_path(30)):
        open_dataset(copy, threads=2, tile_cache_bytes=0).read_rows()
    with pytest.raises(MissingObjectError, match="tile 50"):
        open_dataset(copy, threads=2, tile_cache_bytes=0).read_rows(slice(31 * TILE, N_CELLS))


def test_a_group_of_tiles_without_small_chunks(write_dataset: Callable[..., Path]) -> None:
    """Every chunk with a count above 65535 (a value exception): the group's run has nothing to decode."""
    matrix = sparse.csr_matrix(np.array([[70_000, 0, 3], [0, 2**24 + 1, 0]] * 100, dtype=np.int64))
    path = write_dataset(matrix, tile_size=50, n_chunks=2)
    for threads in (1, 2):
        got = open_dataset(path, threads=threads).read_rows(dtype=np.int64)
        assert (got != matrix).nnz == 0


@pytest.mark.parametrize("tile_tasks", [True, False], ids=["a-task-a-tile", "chunks-shared"])
def test_large_tiles_read_as_tasks_or_with_their_chunks_shared(
    atlas: Path, counts: sparse.csr_matrix, copy: Path, monkeypatch: pytest.MonkeyPatch, tile_tasks: bool
) -> None:
    """Every tile large (a unit of work each): a task a tile, or read here and their chunks shared: same results."""
    monkeypatch.setattr(_into, "WORK_UNIT_NNZ", 1)  # every tile large: a group of its own
    monkeypatch.setattr(_into, "TILE_TASKS_PER_THREAD", 1 if tile_tasks else 10**9)
    for gene_order in ("original", "stored"):
        dataset = open_dataset(atlas, threads=2, tile_cache_bytes=0).with_gene_order(gene_order)
        for index in RANGES:
            _assert_same(dataset.read_rows(index, dtype=np.float32), _expected(counts, index, gene_order, np.float32))
    for tile in (70, 30):
        _rewrite(copy / tile_path(tile), _declare_another_size)
    (copy / tile_path(50)).unlink()
    for _ in range(3):  # the first broken tile in order is named, whichever thread met which first
        with pytest.raises(FormatError, match=tile_path(30)):
            open_dataset(copy, threads=2, tile_cache_bytes=0).read_rows()
    with pytest.raises(MissingObjectError, match="tile 50"):
        open_dataset(copy, threads=2, tile_cache_bytes=0).read_rows(slice(31 * TILE, N_CELLS))
