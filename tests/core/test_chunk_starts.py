"""Where each tile's chunks start (``Dataset.chunk_starts``): from the tiles' headers and chunk tables, checked."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse
from tests.servers.stores import RemoteLookingStore

from deltacells.codec import CELL_HI, HEADER_SIZE
from deltacells.core import open_dataset
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import tile_path

N_CELLS, TILE, CHUNKS = 700, 128, 4


@pytest.fixture
def path(write_dataset: Callable[..., Path], make_counts: Callable[..., sparse.csr_matrix]) -> Path:
    return write_dataset(make_counts(N_CELLS, 60, density=0.2, seed=5), tile_size=TILE, n_chunks=CHUNKS)


def _decoded_starts(path: Path) -> np.ndarray:
    ds = open_dataset(path)
    starts = [ds.tile_range(t)[0] + bounds for t, tile in ds.iter_tiles() for bounds in tile.chunk_bounds[:-1]]
    return np.array([*starts, ds.n_cells])


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_the_starts_of_every_chunk(path: Path, remote: bool) -> None:
    ds = open_dataset(RemoteLookingStore(path) if remote else path)
    starts = ds.chunk_starts()
    np.testing.assert_array_equal(starts, _decoded_starts(path))
    assert starts.shape[0] == 6 * CHUNKS + 1  # 5 full tiles and the last (60 cells), 4 chunks each; n_cells
    assert ds.chunk_starts() is starts and not starts.flags.writeable  # read once, kept
    assert ds.tiles_decoded == 0 and ds.chunks_decoded == 0


def test_a_manifest_saying_fewer_chunks_than_the_tiles_have(path: Path) -> None:
    """n_chunks is informational: the first read is sized by it, a longer chunk table is read again whole."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["n_chunks"] = 1
    (path / "manifest.json").write_text(json.dumps(manifest))
    np.testing.assert_array_equal(open_dataset(path).chunk_starts(), _decoded_starts(path))


def test_a_chunk_table_not_covering_the_tile_is_named(path: Path) -> None:
    target = path / tile_path(2)
    blob = bytearray(target.read_bytes())
    table = np.frombuffer(blob, dtype="<u8", count=12 * CHUNKS, offset=HEADER_SIZE).reshape(CHUNKS, 12).copy()
    table[0, CELL_HI] += 1  # chunk 0 ends where chunk 1 does not start
    blob[HEADER_SIZE : HEADER_SIZE + table.nbytes] = table.tobytes()
    target.write_bytes(bytes(blob))
    with pytest.raises(FormatError, match=r"tile_000002.*chunk table"):
        open_dataset(path).chunk_starts()


def test_a_tile_disagreeing_with_the_manifest_is_named(path: Path) -> None:
    one, two = path / tile_path(1), path / tile_path(5)  # tile 5 holds 60 cells, not 128
    one.write_bytes(two.read_bytes())
    with pytest.raises(FormatError, match=r"tile_000001"):
        open_dataset(path).chunk_starts()


def test_a_missing_tile_is_named(path: Path) -> None:
    (path / tile_path(3)).unlink()
    with pytest.raises(MissingObjectError, match="tile 3"):
        open_dataset(path).chunk_starts()


def test_kept_in_a_cache_directory(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``cache_dir`` the starts are written there once, then read from there (no tile read)."""
    from deltacells.tiles import _chunk_layout

    cache = tmp_path / "cache"
    starts = open_dataset(path).chunk_starts(cache_dir=cache)
    np.testing.assert_array_equal(starts, _decoded_starts(path))
    (kept,) = (cache / "chunk-starts").glob("*.npy")

    def no_read(reader: object) -> np.ndarray:
        msg = "the tiles were read again"
        raise AssertionError(msg)

    monkeypatch.setattr(_chunk_layout, "read_chunk_starts", no_read)
    again = open_dataset(path).chunk_starts(cache_dir=cache)
    np.testing.assert_array_equal(again, starts)
    assert not again.flags.writeable
    monkeypatch.undo()
    # kept starts that cannot be this dataset's are read again: not increasing, not ending at n_cells, missing
    # a tile's first cell, not integers
    for wrong in ([0, 300, 200, N_CELLS], [0, 128, 256], np.delete(starts, CHUNKS), np.zeros((2, 2)), [0.0, 700.0]):
        np.save(kept, np.asarray(wrong))
        np.testing.assert_array_equal(open_dataset(path).chunk_starts(cache_dir=cache), starts)
        np.testing.assert_array_equal(np.load(kept), starts)
    kept.write_bytes(b"not an npy file")
    np.testing.assert_array_equal(open_dataset(path).chunk_starts(cache_dir=cache), starts)


def test_a_cache_that_cannot_be_written_is_skipped(path: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache's folder would go")
    np.testing.assert_array_equal(open_dataset(path).chunk_starts(cache_dir=blocked), _decoded_starts(path))
