"""The tile reader: cached tiles shared read-only, safe from many threads, each tile decoded once, fork-safe."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

import deltacells
import deltacells.codec as codec_module
from deltacells import _threads
from deltacells.core import DatasetWriter

N_CELLS, N_GENES, TILE = 600, 40, 50


@pytest.fixture(scope="module")
def matrix() -> sparse.csr_matrix:
    rng = np.random.default_rng(7)
    return sparse.random(N_CELLS, N_GENES, density=0.2, format="csr", random_state=rng, dtype=np.float64).ceil()


@pytest.fixture(scope="module")
def root(matrix: sparse.csr_matrix, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiles") / "ds"
    with DatasetWriter(path, N_GENES, tile_size=TILE, n_chunks=2, level=1) as writer:
        writer.write(matrix)
    return path


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times each tile (by its number of cells and first bytes) is decoded."""
    counts: Counter[int] = Counter()
    real = codec_module.decode_tile
    lock = threading.Lock()

    def counting(blob, *, name="tile", threads=None):
        with lock:
            counts[int(name.rsplit("_", 1)[-1].split(".")[0])] += 1
        return real(blob, name=name, threads=threads)

    monkeypatch.setattr(codec_module, "decode_tile", counting)
    return counts


def test_cached_tiles_are_read_only(root: Path, matrix: sparse.csr_matrix) -> None:
    ds = deltacells.open_dataset(root)
    tile = ds.read_tile(0)
    tile.data[:] = 7  # a copy: the cache does not see it
    np.testing.assert_array_equal(ds.read_rows(slice(0, TILE)).toarray(), matrix[:TILE].toarray())
    for _, shared in ds.iter_tiles([0, 1]):
        assert not shared.data.flags.writeable and not shared.indices.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            shared.data[0] = 1
        csr = shared.to_csr(np.int32)
        assert not np.shares_memory(csr.data, shared.data) and not np.shares_memory(csr.indices, shared.indices)
        assert not np.shares_memory(csr.indptr, shared.indptr)
    rows = ds.read_rows([0, 1, 2], dtype=np.int32)
    rows.data[:] = 9
    np.testing.assert_array_equal(ds.read_rows([0, 1, 2]).toarray(), matrix[:3].toarray())


def test_many_threads_read_right_and_decode_each_tile_once(
    root: Path, matrix: sparse.csr_matrix, decodes: Counter[int]
) -> None:
    ds = deltacells.open_dataset(root, threads=2)
    n_threads, rounds = 8, 5
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            barrier.wait()
            for _ in range(rounds):
                rows = rng.choice(N_CELLS, size=120, replace=True)
                np.testing.assert_array_equal(ds.read_rows(rows).toarray(), matrix[rows].toarray())
            np.testing.assert_array_equal(ds.read_rows().toarray(), matrix.toarray())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[0]
    n_tiles = ds.n_tiles
    # A tile may be decoded in parts (the chunks a batch wants, then the others), never a chunk twice.
    assert ds.chunks_decoded == 2 * n_tiles, "every chunk decoded exactly once (the cache holds them all)"
    assert all(count == 1 for count in decodes.values()), "a tile decoded whole at most once"
    assert n_tiles <= ds.tiles_decoded <= 2 * n_tiles


def test_failed_decode_reaches_every_waiting_thread(root: Path, tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(root, broken)
    tile = broken / "tiles" / "tile_000003.dct"
    blob = bytearray(tile.read_bytes())
    blob[100] ^= 0xFF
    tile.write_bytes(bytes(blob))
    ds = deltacells.open_dataset(broken)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def work() -> None:
        barrier.wait()
        try:
            ds.read_rows(slice(3 * TILE, 3 * TILE + 5))
        except deltacells.FormatError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == 4 and all("tile_000003.dct" in text for text in outcomes)
    assert ds.tiles_decoded == 0


def _read_in_child(root: str, queue: multiprocessing.Queue) -> None:
    ds = _PARENT_DATASET  # inherited through fork: its locks may have been held by a parent thread
    total = int(ds.read_rows(np.arange(N_CELLS)[::-1]).sum()) + sum(int(t.data.sum()) for _, t in ds.iter_tiles())
    queue.put(total)


_PARENT_DATASET = None


def test_forked_child_inherits_no_held_lock_and_no_dead_pool(root: Path, matrix: sparse.csr_matrix) -> None:
    global _PARENT_DATASET
    ds = deltacells.open_dataset(root, threads=2, tile_cache_bytes=0)
    ds.read_rows()  # the shared pool now has threads, which a forked child does not get
    _PARENT_DATASET = ds
    release = threading.Event()
    holding = threading.Event()

    def hold_locks() -> None:
        with ds._tiles._guard(), ds.cache._lock, _threads._lock:
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=hold_locks)
    holder.start()
    assert holding.wait(10)
    try:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_read_in_child, args=(str(root), queue))
        child.start()
        child.join(60)
        if child.is_alive():
            child.kill()
            pytest.fail("the forked child hung on a lock held by a parent thread")
        assert child.exitcode == 0
        assert queue.get(timeout=10) == 2 * int(matrix.sum())
    finally:
        release.set()
        holder.join(10)
        _PARENT_DATASET = None
