"""Decoding only the chunks that hold the cells wanted, on every store, and caching the partial tiles."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse
from tests.servers.stores import RemoteLookingStore

import deltacells
import deltacells.codec as codec_module
from deltacells.codec import parse_tile
from deltacells.core import DatasetWriter
from deltacells.errors import FormatError
from deltacells.format import Manifest
from deltacells.storage import FsspecStore
from deltacells.tiles import TileReader

N_CELLS, N_GENES, TILE, N_CHUNKS = 1200, 300, 400, 8


@pytest.fixture(scope="module")
def matrix() -> sparse.csr_matrix:
    rng = np.random.default_rng(17)
    return sparse.random(N_CELLS, N_GENES, density=0.1, format="csr", random_state=rng, dtype=np.float64).ceil()


@pytest.fixture(scope="module")
def root(matrix: sparse.csr_matrix, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chunks") / "ds"
    with DatasetWriter(path, N_GENES, tile_size=TILE, n_chunks=N_CHUNKS, level=1) as writer:
        writer.write(matrix)
    return path


@pytest.fixture(scope="module")
def manifest(root: Path) -> Manifest:
    return deltacells.open_dataset(root).manifest


@pytest.fixture(scope="module")
def bounds(root: Path) -> list[np.ndarray]:
    """The chunk boundaries (cells) of each tile."""
    return [parse_tile((root / "tiles" / f"tile_{t:06d}.dct").read_bytes()).chunk_bounds for t in range(3)]


def _rows(tile: deltacells.codec.DecodedTile, cells: np.ndarray) -> sparse.csr_matrix:
    return tile.to_csr(np.float64)[cells]


@pytest.mark.parametrize(
    ("store_class", "n_cells", "ranged"),
    [
        pytest.param(FsspecStore, 1, False, id="local-one-cell"),
        pytest.param(FsspecStore, 5, False, id="local-five-cells"),
        pytest.param(RemoteLookingStore, 1, True, id="remote-ranged"),
        pytest.param(RemoteLookingStore, 5, False, id="remote-whole-fetch"),
    ],
)
@pytest.mark.parametrize("how", ["get", "iter_tiles"])
def test_one_chunk_of_eight_decodes_one_chunk(
    root: Path,
    manifest: Manifest,
    bounds: list[np.ndarray],
    matrix: sparse.csr_matrix,
    store_class: type,
    n_cells: int,
    ranged: bool,
    how: str,
) -> None:
    """Cells of one chunk: one chunk decoded, locally (one whole read) and remotely (ranged or whole fetch)."""
    reader = TileReader(store_class(root), manifest)
    lo, hi = int(bounds[1][3]), int(bounds[1][4])
    cells = np.array([hi - 1, lo, lo + 1, hi - 2, lo])[:n_cells]
    assert reader.reads_ranged(1, n_cells, cells=cells) == ranged
    direct = how == "get" and not ranged
    tile = reader.get(1, cells=cells) if direct else dict(reader.iter_tiles([1], rows=[cells]))[1]
    assert not tile.complete and tile.n_chunks_decoded == 1
    assert reader.chunks_decoded == 1
    assert (_rows(tile, cells) != matrix[TILE + cells]).nnz == 0
    assert (reader.tiles_decoded, reader.tiles_read_ranged) == ((0, 1) if ranged else (1, 0))
    assert reader.cache.peek(1) is tile


def test_remote_whole_fetch_decodes_only_the_chunks_wanted(
    root: Path, manifest: Manifest, bounds: list[np.ndarray], matrix: sparse.csr_matrix
) -> None:
    """Many cells in two chunks: too many for a ranged read, so one whole fetch, but two chunks decoded."""
    reader = TileReader(RemoteLookingStore(root), manifest)
    cells = np.concatenate([np.arange(bounds[2][0], bounds[2][1]), np.arange(bounds[2][6], bounds[2][7])])
    assert not reader.reads_ranged(2, len(cells), cells=cells)
    got = dict(reader.iter_tiles([0, 2], rows=[None, cells]))
    assert got[0].complete and not got[2].complete
    assert got[2].n_chunks_decoded == 2 and reader.chunks_decoded == N_CHUNKS + 2
    assert reader.tiles_decoded == 2 and reader.tiles_read_ranged == 0
    assert (_rows(got[2], cells) != matrix[2 * TILE + cells]).nnz == 0


@pytest.mark.parametrize("store_class", [FsspecStore, RemoteLookingStore])
def test_partial_tiles_hit_and_grow(
    root: Path, manifest: Manifest, bounds: list[np.ndarray], matrix: sparse.csr_matrix, store_class: type
) -> None:
    """A repeat is a hit; more chunks decode only the missing ones; the cache then holds the union."""
    reader = TileReader(store_class(root), manifest)
    b = bounds[0]

    def read(cells: np.ndarray) -> deltacells.codec.DecodedTile:
        (_, tile), *_ = reader.iter_tiles([0], rows=[cells])
        assert (_rows(tile, cells) != matrix[cells]).nnz == 0
        return tile

    first = read(np.array([b[1], b[1] + 1]))  # chunk 1
    assert reader.chunks_decoded == 1 and reader.cache.misses == 1
    assert read(np.array([b[1] + 1])) is first  # a hit
    assert reader.chunks_decoded == 1 and reader.cache.hits == 1
    grown = read(np.array([b[5], b[1]]))  # chunks 1 and 5: only 5 is decoded
    assert reader.chunks_decoded == 2
    assert np.flatnonzero(grown.chunk_mask).tolist() == [1, 5]
    assert reader.cache.peek(0) is grown and len(reader.cache) == 1
    assert read(np.array([b[5] + 2, b[2] - 1])) is grown  # both in chunks held: a hit
    whole = reader.get(0)  # the other six chunks
    assert whole.complete and reader.chunks_decoded == N_CHUNKS
    assert (whole.to_csr(np.float64) != matrix[:TILE]).nnz == 0
    assert reader.get(0) is whole and reader.cache.peek(0) is whole
    assert reader.cache.nbytes == whole.nbytes


def test_whole_tiles_still_go_through_decode_tile(
    root: Path, manifest: Manifest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tiles wanted whole are decoded by decode_tile (its chunks in parallel); partial ones never are."""
    calls: Counter[str] = Counter()
    real = codec_module.decode_tile

    def counting(blob, *, name="tile", threads=None):
        calls[name.rsplit("/", 1)[-1]] += 1
        return real(blob, name=name, threads=threads)

    monkeypatch.setattr(codec_module, "decode_tile", counting)
    reader = TileReader(FsspecStore(root), manifest, threads=2)
    list(reader.iter_tiles([0, 1], rows=[np.array([3]), None]))
    assert calls == Counter({"tile_000001.dct": 1})
    assert reader.chunks_decoded == 1 + N_CHUNKS


def test_partial_decoding_switch(root: Path, manifest: Manifest, matrix: sparse.csr_matrix) -> None:
    """With the private switch off, tiles wanted for a few cells are decoded whole (what the benchmark compares)."""
    reader = TileReader(FsspecStore(root), manifest)
    reader._partial_decode = False
    tile = reader.get(1, cells=np.array([5]))
    assert tile.complete and reader.chunks_decoded == N_CHUNKS


def test_partial_local_read_checks_the_whole_tile(root: Path, manifest: Manifest, tmp_path: Path) -> None:
    """A corrupted byte in a chunk not decoded still fails the read: the CRC-32 covers the object read."""
    copy = tmp_path / "ds"
    shutil.copytree(root, copy)
    path = copy / "tiles" / "tile_000001.dct"
    blob = bytearray(path.read_bytes())
    blob[-3] ^= 0x40  # in the last chunk's frames
    path.write_bytes(bytes(blob))
    reader = TileReader(FsspecStore(copy), manifest)
    with pytest.raises(FormatError, match=r"tile_000001\.dct: CRC-32"):
        reader.get(1, cells=np.array([0]))
    assert reader.tiles_decoded == 0 and reader.chunks_decoded == 0 and len(reader.cache) == 0


def test_partial_local_read_checks_the_manifest(root: Path, manifest: Manifest, tmp_path: Path) -> None:
    """The size and the header's counts are checked against the manifest as for whole tiles."""
    copy = tmp_path / "ds"
    shutil.copytree(root, copy)
    (copy / "tiles" / "tile_000000.dct").write_bytes((copy / "tiles" / "tile_000002.dct").read_bytes())
    reader = TileReader(FsspecStore(copy), manifest)
    with pytest.raises(FormatError, match=r"tile_000000\.dct: .*tile_bytes\[0\]"):
        reader.get(0, cells=np.array([0]))
    import dataclasses

    fields = dataclasses.replace(manifest.to_fields(), tile_bytes=None)
    reader._fields = fields
    with pytest.raises(FormatError, match=r"tile_000000\.dct: .*tile_nnz\[0\]"):
        reader.get(0, cells=np.array([0]))


def test_threads_wanting_other_chunks_of_one_tile(
    root: Path, manifest: Manifest, bounds: list[np.ndarray], matrix: sparse.csr_matrix
) -> None:
    """Threads asking for different chunks of the same tile at once: right rows, no chunk decoded twice."""
    reader = TileReader(FsspecStore(root), manifest, threads=1)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            barrier.wait()
            for _ in range(30):
                t = int(rng.integers(0, 3))
                cells = rng.integers(0, TILE, int(rng.integers(1, 4)))
                tile = reader.get(t, cells=cells)
                assert (_rows(tile, cells) != matrix[t * TILE + cells]).nnz == 0
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]
    assert reader.chunks_decoded <= 3 * N_CHUNKS, "a chunk decoded twice"
    assert reader.cache.hits + reader.cache.misses >= 8 * 30 - 8
    held = sum(reader.cache.peek(t).n_chunks_decoded for t in range(3))
    assert held == reader.chunks_decoded


def test_ranged_read_skips_the_chunks_held(
    root: Path, manifest: Manifest, bounds: list[np.ndarray], matrix: sparse.csr_matrix
) -> None:
    """A ranged read of a tile the cache holds partially fetches only the chunks it lacks, and merges."""
    from deltacells.tiles._ranged import decode_ranged, submit_ranged_fetch

    store = RemoteLookingStore(root)
    b = bounds[1]
    held = TileReader(FsspecStore(root), manifest).get(1, cells=np.array([b[2]]))
    cells = np.array([b[2] + 1, b[7]])
    fetched = submit_ranged_fetch(store, manifest, 1, cells, held=held)
    assert fetched.result().chunks.tolist() == [7] and fetched.result().held is held
    tile = decode_ranged(1, fetched, store=store, fields=manifest.to_fields())
    assert np.flatnonzero(tile.chunk_mask).tolist() == [2, 7]
    assert (_rows(tile, cells) != matrix[TILE + cells]).nnz == 0
    reader = TileReader(store, manifest)
    reader.cache.put(1, held)
    got = dict(reader.iter_tiles([1], rows=[cells[1:]]))[1]  # one cell: a ranged read, merged with what is held
    assert reader.tiles_read_ranged == 1 and reader.chunks_decoded == 1
    assert np.flatnonzero(got.chunk_mask).tolist() == [2, 7] and reader.cache.peek(1) is got
