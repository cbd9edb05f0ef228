"""Readers survive appends (issue 42): an append only adds cells, so a reader goes on with the same answers.

A reader that opened a dataset before an append and then reads the last tile, which the append rewrote with
the new cells after the old ones, keeps its own version of that tile and goes on, on every read path; a
reader opening while appends land opens the new version. Tested on one append at a time (every read path,
on a local disk and on S3), and under concurrent appenders in other processes, on a local disk and on S3
(moto's server): not one failed read, and every cell read is the cell written.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
from scipy import sparse
from tests.servers import S3Bucket
from tests.servers.appenders import append_batch, batch

import deltacells
from deltacells.core import Collection, open_dataset
from deltacells.errors import FormatError
from deltacells.format import tile_path

TILE = 16
BASE = 20  # cells written first: the last tile (4 cells) is partial, so the first append rewrites it


def _location(where: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any] | None]:
    if where == "s3":
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        return f"{bucket.url}/ds", bucket.storage_options
    return str(tmp_path / "ds"), None


def _dense(matrix: Any) -> np.ndarray:
    return np.asarray(matrix.toarray() if sparse.issparse(matrix) else matrix)


def _tile(tile: Any) -> np.ndarray:
    return _dense(sparse.csr_matrix((tile.data, tile.indices, tile.indptr), shape=tile.shape))


READS = {
    "rows in any order": lambda d: _dense(d.read_rows(np.array([19, 3, 17, 16, 0, 19]))),
    "a full read": lambda d: _dense(d.read_rows()),
    "a range": lambda d: _dense(d.read_rows(slice(10, 20))),
    "rows past the cache": lambda d: _dense(d.read_rows_uncached(np.arange(20))),
    "batches": lambda d: np.vstack([_dense(m) for m in d.read_row_batches(slice(None), [0, 7, 20])]),
    "tiles": lambda d: np.vstack([_tile(t) for _, t in d.iter_tiles()]),
    "one tile": lambda d: _tile(d.read_tile(1)),
    "a collection's range": lambda d: _dense(Collection([d, d]).read_rows(slice(15, 25))),
    "chunk starts": lambda d: d.chunk_starts()[-2:],
}


@pytest.mark.parametrize("cache", [0, 2**20], ids=["no cache", "cache"])
@pytest.mark.parametrize("kind", list(READS))
@pytest.mark.parametrize("where", ["local", "s3"])
def test_an_old_reader_reads_the_cells_it_knew_after_appends(
    request: pytest.FixtureRequest, tmp_path: Path, where: str, kind: str, cache: int
) -> None:
    url, options = _location(where, request, tmp_path)
    deltacells.write_deltacells(batch(0, BASE), url, tile_size=TILE, progress=False, storage_options=options)
    old = open_dataset(url, storage_options=options, tile_cache_bytes=cache)
    read = READS[kind]
    before = read(old) if cache else None  # with a cache: the last tile cached before the append
    deltacells.write_deltacells(batch(1001, 9), url, append=True, progress=False, storage_options=options)
    assert open_dataset(url, storage_options=options).tile_bytes[1] != old.tile_bytes[1]  # the last tile rewritten
    got = read(old)
    deltacells.write_deltacells(batch(2000, 30), url, append=True, progress=False, storage_options=options)
    again = read(old)
    assert old.n_cells == BASE
    if before is not None:
        np.testing.assert_array_equal(got, before)
    np.testing.assert_array_equal(got, again)
    if kind == "chunk starts":
        assert got[-1] == BASE
        return
    grown = open_dataset(url, storage_options=options)  # its first cells are the old reader's, in the same genes
    np.testing.assert_array_equal(_dense(old.read_rows()), _dense(grown.read_rows(np.arange(BASE))))
    assert _dense(old.read_rows()).sum() == _dense(batch(0, BASE).X).sum()


def test_an_old_anndata_reads_as_before_after_appends(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first = batch(0, BASE)
    deltacells.write_deltacells(first, path, tile_size=TILE, progress=False)
    old = deltacells.read_deltacells(path, tile_cache_bytes=0)
    deltacells.write_deltacells(batch(1001, 9), path, append=True, progress=False)
    deltacells.write_deltacells(batch(2000, 40), path, append=True, progress=False)
    assert old.n_obs == BASE
    np.testing.assert_array_equal(old.X[np.arange(BASE)].toarray(), first.X.toarray())
    np.testing.assert_array_equal(old.to_memory().X.toarray(), first.X.toarray())
    lazy = deltacells.read_deltacells(path, chunks=8)
    assert lazy.n_obs == BASE + 49


def test_a_reader_whose_last_tile_is_broken_still_gets_the_error(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    deltacells.write_deltacells(batch(0, BASE), path, tile_size=TILE, progress=False)
    old = open_dataset(path, tile_cache_bytes=0)
    tile = path / tile_path(1)
    tile.write_bytes(tile.read_bytes()[:-3])  # no append: a damaged tile
    with pytest.raises(FormatError, match=r"tile_000001\.dct"):
        old.read_rows()


def _check_cells(adata: ad.AnnData, reference: ad.AnnData) -> None:
    """Every cell of ``adata`` is the cell of that name written (its counts by gene name, its obs)."""
    expected = reference[list(adata.obs_names), list(adata.var_names)]
    np.testing.assert_array_equal(_dense(adata.X), _dense(expected.X))
    np.testing.assert_array_equal(adata.obs["value"].to_numpy(), expected.obs["value"].to_numpy())


@pytest.mark.parametrize("where", ["local", "s3"])
def test_no_read_fails_while_appenders_commit(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    url, options = _location(where, request, tmp_path)
    writers, per_writer, rounds = 3, 7, 3  # 7 cells: every append completes (rewrites) the last tile
    deltacells.write_deltacells(batch(0, BASE), url, tile_size=TILE, progress=False, storage_options=options)
    starts = [1000 * (w + 1) + 100 * r + w % 2 for w in range(writers) for r in range(rounds)]
    reference = ad.concat([batch(0, BASE)] + [batch(s, per_writer)[:, [f"g{i}" for i in range(30)]] for s in starts])
    long_lived = deltacells.read_deltacells(url, storage_options=options, tile_cache_bytes=0)
    first_answer = long_lived.to_memory()
    _check_cells(first_answer, reference)

    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.syspath_prepend(root)  # spawned children start with the parent's sys.path
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 4.0
    processes = []
    for k, start in enumerate(starts):
        result = str(tmp_path / f"result-{start}")
        at = start_at + 0.4 * (k // writers)  # rounds of overlapping appenders
        process = context.Process(target=append_batch, args=(url, options, start, per_writer, at, result))
        process.start()
        processes.append(process)

    failures: list[str] = []
    opens = reads = 0
    while any(p.is_alive() for p in processes) or opens < 3:
        try:
            adata = deltacells.read_deltacells(url, storage_options=options, tile_cache_bytes=0)
            _check_cells(adata.to_memory(), reference)
            opens += 1
            _check_cells(long_lived[::-1].to_memory(), reference)
            np.testing.assert_array_equal(long_lived.X[np.arange(BASE)].toarray(), first_answer.X.toarray())
            reads += 1
        except (FormatError, OSError, KeyError) as exc:  # a read an append broke
            failures.append(f"{type(exc).__name__}: {exc}")
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    assert not failures, failures
    assert opens >= 3 and reads >= 3
    outcomes = [(tmp_path / f"result-{s}").read_text() for s in starts]
    assert all(o == "ok" for o in outcomes), outcomes
    final = deltacells.read_deltacells(url, storage_options=options).to_memory()
    assert final.n_obs == BASE + per_writer * len(starts)
    _check_cells(final, reference)


def test_threads_of_one_reader_follow_an_append_once(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    deltacells.write_deltacells(batch(0, BASE), path, tile_size=TILE, progress=False)
    old = open_dataset(path, tile_cache_bytes=0)
    deltacells.write_deltacells(batch(1001, 9), path, append=True, progress=False)
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(_dense(old.read_rows()))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    expected = _dense(open_dataset(path).read_rows(np.arange(BASE)))  # the same genes (stored order)
    for result in results:
        np.testing.assert_array_equal(result, expected)
