"""``write_deltacells`` from a dask-backed matrix: tiles encoded and stored by dask tasks, the manifest last.

The oracle is the in-memory writer: the same AnnData written from memory and from a dask X (whatever its
blocks, on dask's local scheduler or on a ``LocalCluster`` of processes) gives the same files, byte for byte
(``var.parquet`` the same table: a var read back by anndata may have other pandas dtypes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.errors import InvalidValueError
from deltacells.io._dask_write import task_rows

da = pytest.importorskip("dask.array")

N_CELLS, N_GENES, TILE_SIZE = 1000, 60, 128


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    return synthetic_counts(N_CELLS, N_GENES, seed=5)


@pytest.fixture(scope="module")
def expected(source: ad.AnnData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``source`` written from memory: the files every dask write must reproduce."""
    out = tmp_path_factory.mktemp("memory") / "cells.deltacells"
    deltacells.write_deltacells(source, out, tile_size=TILE_SIZE, progress=False)
    return out


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_same_files(got: Path, expected: Path) -> None:
    """The same files, byte for byte, but ``var.parquet``: the same table (a var that went through anndata's
    readers may come back with other pandas dtypes for the same values, e.g. pandas 3's strings)."""
    got_files, expected_files = files(got), files(expected)
    assert sorted(got_files) == sorted(expected_files)
    differ = [name for name in expected_files if got_files[name] != expected_files[name] and name != "var.parquet"]
    assert not differ, f"these files differ: {differ}"
    pd.testing.assert_frame_equal(
        pd.read_parquet(got / "var.parquet"), pd.read_parquet(expected / "var.parquet"), check_dtype=False
    )


def with_dask_x(adata: ad.AnnData, chunks: tuple[int, int], *, dense: bool = False) -> ad.AnnData:
    matrix = adata.X.toarray() if dense else sparse.csr_matrix(adata.X)
    X = da.from_array(matrix, chunks=chunks, asarray=False)
    return ad.AnnData(X=X, obs=adata.obs.copy(), var=adata.var.copy())


# ---------------------------------------------------------------------- the tasks' rows


@pytest.mark.parametrize(
    ("row_chunks", "tile_size", "expected_spans"),
    [
        ((256, 256, 100), 128, [(0, 256), (256, 512), (512, 612)]),  # blocks of two tiles: tasks of two tiles
        ((300, 300, 300), 128, [(0, 256), (256, 512), (512, 768), (768, 900)]),  # 300 cells: two tiles a task
        ((50,) * 10, 128, [(0, 128), (128, 256), (256, 384), (384, 500)]),  # small blocks: one tile a task
        ((0,), 128, []),
    ],
)
def test_tasks_cover_whole_tiles(row_chunks, tile_size, expected_spans):
    assert task_rows(row_chunks, tile_size) == expected_spans


# ---------------------------------------------------------------------- dask's local scheduler


@pytest.mark.parametrize(
    ("chunks", "dense"),
    [
        ((128, N_GENES), False),  # blocks of one tile
        ((300, N_GENES), False),  # blocks that straddle tiles
        ((77, 25), False),  # blocks across the genes too
        ((250, 30), True),  # dense blocks
    ],
    ids=["tile-blocks", "straddling", "gene-blocks", "dense"],
)
def test_same_files_as_from_memory(source, expected, tmp_path, chunks, dense):
    out = tmp_path / "dask.deltacells"
    deltacells.write_deltacells(with_dask_x(source, chunks, dense=dense), out, tile_size=TILE_SIZE, progress=False)
    assert_same_files(out, expected)


def test_views_and_options(source, tmp_path):
    """A view (rows and genes chosen), genes in their order, another level: the same as from memory."""
    rows = np.sort(np.random.default_rng(0).choice(N_CELLS, 400, replace=False))
    genes = np.arange(5, 50)
    options = {"tile_size": 64, "reorder_genes": False, "level": 3, "n_chunks": 2, "progress": False}
    deltacells.write_deltacells(source[rows, genes], tmp_path / "memory", **options)
    deltacells.write_deltacells(with_dask_x(source, (300, N_GENES))[rows, genes], tmp_path / "dask", **options)
    assert_same_files(tmp_path / "dask", tmp_path / "memory")


def test_overwrite_swaps_in_the_new_dataset(source, expected, tmp_path):
    out = tmp_path / "cells.deltacells"
    deltacells.write_deltacells(source[:10], out, tile_size=TILE_SIZE, progress=False)
    deltacells.write_deltacells(
        with_dask_x(source, (300, N_GENES)), out, tile_size=TILE_SIZE, overwrite=True, progress=False
    )
    assert_same_files(out, expected)


def test_a_value_that_is_no_count_is_named_and_nothing_is_left(source, tmp_path):
    matrix = sparse.csr_matrix(source.X, dtype=np.float32, copy=True)
    row = 700
    matrix.data[matrix.indptr[row]] = 2.5
    adata = ad.AnnData(X=da.from_array(matrix, chunks=(300, N_GENES), asarray=False), obs=source.obs, var=source.var)
    out = tmp_path / "bad.deltacells"
    with pytest.raises(InvalidValueError, match=f"cell {row}"):
        deltacells.write_deltacells(adata, out, tile_size=TILE_SIZE, progress=False)
    assert not out.exists() or not any(out.iterdir())
    with pytest.raises(InvalidValueError, match=f"cell {row}"):  # the second pass checks too (no gene totals)
        deltacells.write_deltacells(adata, out, tile_size=TILE_SIZE, reorder_genes=False, progress=False)
    assert not out.exists() or not any(out.iterdir())


def bad_value_at_cell_700(source: ad.AnnData) -> ad.AnnData:
    """``source`` with 2.5 (no count) in cell 700, in dask blocks of one tile each."""
    matrix = sparse.csr_matrix(source.X, dtype=np.float32, copy=True)
    matrix.data[matrix.indptr[700]] = 2.5
    return ad.AnnData(
        X=da.from_array(matrix, chunks=(TILE_SIZE, N_GENES), asarray=False), obs=source.obs, var=source.var
    )


def encoding_slowed_by(delay: float) -> tuple[Callable[[], None], Callable[[], None]]:
    """Two functions: one makes every tile take ``delay`` more seconds to encode, the other undoes it.

    They act in the process that calls them (through ``client.run``: in each worker's). They are local
    functions, so that cloudpickle sends them to the workers by value.
    """

    def slow_down() -> None:
        import time

        import deltacells.codec as codec

        encode = getattr(codec, "_unslowed_encode_tile", codec.encode_tile)

        def slow_encode_tile(*args, **kwargs):
            time.sleep(delay)
            return encode(*args, **kwargs)

        codec._unslowed_encode_tile = encode
        codec.encode_tile = slow_encode_tile

    def undo() -> None:
        import deltacells.codec as codec

        codec.encode_tile = getattr(codec, "_unslowed_encode_tile", codec.encode_tile)

    return slow_down, undo


def test_tasks_still_running_at_an_error_store_nothing_after_it(source, tmp_path):
    """The error comes back only once the tasks that were running have ended: none stores a tile afterwards.

    One tile per task, each slow to encode, one task failing fast (cell 700, tile 5): when it fails, the other
    thread is encoding a tile it is about to store.
    """
    out = tmp_path / "bad.deltacells"
    slow_down, undo = encoding_slowed_by(0.3)
    slow_down()
    try:
        with pytest.raises(InvalidValueError, match="cell 700"):
            deltacells.write_deltacells(
                bad_value_at_cell_700(source), out, tile_size=TILE_SIZE, reorder_genes=False, progress=False
            )
    finally:
        undo()
    time.sleep(0.6)  # a tile that a task still running stores comes within its delay
    assert not out.exists() or not any(out.iterdir())


def test_progress_bar_counts_both_passes(source, tmp_path, capsys):
    deltacells.write_deltacells(with_dask_x(source, (300, N_GENES)), tmp_path / "out", tile_size=TILE_SIZE)
    err = capsys.readouterr().err
    assert "gene totals" in err and "tiles" in err and "1.00k/1.00k" in err


# ---------------------------------------------------------------------- on a cluster of processes


@pytest.mark.parametrize("store", ["h5ad", "zarr"])
def test_lazy_h5ad_and_zarr_on_a_cluster(source, expected, tmp_path, client, store):
    """anndata's ``read_lazy`` (X a dask array, obs and var lazy): the workers read, encode and store the tiles."""
    path = tmp_path / f"cells.{store}"
    if store == "h5ad":
        source.write_h5ad(path)
    else:
        source.write_zarr(path)
    lazy = ad.experimental.read_lazy(path)
    assert isinstance(lazy.X, da.Array)
    out = tmp_path / "cells.deltacells"
    deltacells.write_deltacells(lazy, out, tile_size=TILE_SIZE, progress=False)
    assert_same_files(out, expected)


def test_deltacells_blocks_on_a_cluster(expected, tmp_path, client):
    """A dataset read with chunks= (blocks of whole tiles, read by the workers) written again: the same files."""
    adata = deltacells.read_deltacells(expected, chunks=3 * TILE_SIZE, cache_dir=tmp_path / "cache")
    out = tmp_path / "again.deltacells"
    deltacells.write_deltacells(adata, out, tile_size=TILE_SIZE, progress=False)
    assert_same_files(out, expected)


def test_a_worker_error_reaches_the_caller(source, tmp_path, client):
    matrix = sparse.csr_matrix(source.X, dtype=np.float64, copy=True)
    matrix.data[matrix.indptr[999]] = -1
    adata = ad.AnnData(X=da.from_array(matrix, chunks=(128, N_GENES), asarray=False), obs=source.obs, var=source.var)
    out = tmp_path / "bad.deltacells"
    with pytest.raises(InvalidValueError, match="cell 999"):
        deltacells.write_deltacells(adata, out, tile_size=TILE_SIZE, progress=False)
    assert not out.exists() or not any(out.iterdir())


def test_tasks_still_running_on_workers_at_an_error_store_nothing_after_it(source, tmp_path, client):
    out = tmp_path / "bad.deltacells"
    slow_down, undo = encoding_slowed_by(0.3)
    client.run(slow_down)
    try:
        with pytest.raises(InvalidValueError, match="cell 700"):
            deltacells.write_deltacells(
                bad_value_at_cell_700(source), out, tile_size=TILE_SIZE, reorder_genes=False, progress=False
            )
    finally:
        client.run(undo)
    time.sleep(0.6)
    assert not out.exists() or not any(out.iterdir())


def test_everything_else_on_a_cluster(source, tmp_path, client, monkeypatch):
    """obsm as a dask array and a dask layer: written by the workers into anndata.zarr, read back lazily there."""
    from deltacells.io import _extras

    adata = with_dask_x(source, (256, -1))
    embedding = np.random.default_rng(0).random((N_CELLS, 6)).astype(np.float32)
    adata.obsm["X_emb"] = da.from_array(embedding, chunks=(300, -1))
    adata.layers["half"] = da.from_array(source.X.toarray().astype(np.float32) / 2, chunks=(300, -1))
    adata.uns["params"] = {"k": 3}
    out = tmp_path / "cells.deltacells"
    deltacells.write_deltacells(adata, out, tile_size=TILE_SIZE, progress=False)
    monkeypatch.setattr(_extras, "IN_MEMORY_BYTES", 1000)
    got = deltacells.read_deltacells(out, chunks="tiles", cache_dir=tmp_path / "cache")
    assert isinstance(got.obsm["X_emb"], da.Array) and isinstance(got.layers["half"], da.Array)
    cells = np.array([5, 900, 300])
    subset = got[cells]
    np.testing.assert_array_equal(client.compute(subset.obsm["X_emb"]).result(), embedding[cells])
    np.testing.assert_array_equal(client.compute(subset.layers["half"]).result(), source.X[cells].toarray() / 2)
    assert got.uns["params"] == {"k": 3}
