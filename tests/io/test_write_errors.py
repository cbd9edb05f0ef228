"""write_deltacells: refusing what is not raw counts (leaving nothing behind), warnings, and its options."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts

N_CELLS, N_GENES, TILE = 700, 30, 64


@pytest.fixture
def source() -> ad.AnnData:
    return synthetic_counts(N_CELLS, N_GENES, seed=8)


def _nothing_left(path: Path) -> None:
    """No manifest, no tiles, no sidecars: at most an empty directory."""
    if path.exists():
        assert list(path.iterdir()) == [], sorted(p.name for p in path.rglob("*"))


def _with_value(adata: ad.AnnData, cell: int, gene: int, value: Any, dtype: Any) -> ad.AnnData:
    dense = adata.X.toarray().astype(dtype)
    dense[cell, gene] = value
    out = adata.copy()
    out.X = sparse.csr_matrix(dense)
    return out


# ---------------------------------------------------------------------- not raw counts


@pytest.mark.parametrize(
    ("value", "dtype", "problem"),
    [
        (2.5, np.float64, "not a whole number"),
        (0.5, np.float32, "not a whole number"),
        (-1, np.int32, r"outside \[0, 2\^31 - 1\]"),
        (-3.0, np.float64, r"outside \[0, 2\^31 - 1\]"),
        (2**31, np.int64, r"outside \[0, 2\^31 - 1\]"),
        (2.0**40, np.float64, r"outside \[0, 2\^31 - 1\]"),
        (np.nan, np.float64, "not a whole number"),
        (np.inf, np.float32, "not a whole number"),
    ],
    ids=["fraction", "fraction-f32", "negative", "negative-float", "2^31", "huge-float", "nan", "inf"],
)
@pytest.mark.parametrize("reorder", [True, False], ids=["reorder", "keep-order"])
def test_not_counts(source, new_path, value, dtype, problem, reorder):
    cell, gene = 650, 17  # late: with keep-order, several tiles are written before the bad value is seen
    bad = _with_value(source, cell, gene, value, dtype)
    path = new_path()
    with pytest.raises(ValueError, match=problem) as info:
        deltacells.write_deltacells(bad, path, tile_size=TILE, reorder_genes=reorder, progress=False)
    message = str(info.value)
    assert f"cell {cell}, gene {gene}" in message
    assert "layer=" in message and "raw=" in message
    _nothing_left(path)


@pytest.mark.parametrize("threads", [1, 2])
def test_not_counts_after_tiles_were_written(new_path, monkeypatch, threads):
    """The bad count is in the second block of rows read: tiles were already stored, and must be removed."""
    from deltacells.storage import FsspecStore

    source = synthetic_counts(4500, 12, seed=2)
    bad = _with_value(source, 4400, 5, 7.25, np.float32)
    written: list[str] = []
    original = FsspecStore.write

    def recording(self: FsspecStore, name: str, *args: Any, **kwargs: Any) -> Any:
        written.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(FsspecStore, "write", recording)
    path = new_path()
    with pytest.raises(ValueError, match="cell 4400, gene 5"):
        deltacells.write_deltacells(bad, path, tile_size=256, reorder_genes=False, threads=threads, progress=False)
    assert any(name.startswith("tiles/") for name in written), written  # the test reached the tiles
    assert "manifest.json" not in written
    _nothing_left(path)


def test_not_counts_in_a_view_names_the_view_cell(source, new_path):
    bad = _with_value(source, 600, 4, 1.5, np.float64)
    path = new_path()
    with pytest.raises(ValueError, match="cell 100, gene 4"):
        deltacells.write_deltacells(bad[500:], path, progress=False)
    _nothing_left(path)


def test_not_counts_dense_and_layer(source, new_path):
    adata = source.copy()
    adata.layers["lognorm"] = np.log1p(source.X.toarray())
    path = new_path()
    with pytest.raises(ValueError, match="not a whole number"):
        deltacells.write_deltacells(adata, path, layer="lognorm", progress=False)
    _nothing_left(path)


@pytest.mark.parametrize("dtype", [np.complex64, np.bool_])
def test_not_a_count_dtype(source, new_path, dtype):
    adata = source.copy()
    adata.X = sparse.csr_matrix(source.X.astype(dtype))
    path = new_path()
    with pytest.raises(TypeError, match="dtype"):
        deltacells.write_deltacells(adata, path, progress=False)
    _nothing_left(path)


def test_too_many_large_counts(source, new_path):
    """More than max(1024, nnz // 200) counts above 65535 in one tile: not raw counts (DECISIONS 7)."""
    dense = source.X.toarray().astype(np.int64)
    dense[:, :2] = 70_000  # 1400 exceptions in the first (only) tile
    adata = source.copy()
    adata.X = sparse.csr_matrix(dense)
    path = new_path()
    with pytest.raises(ValueError, match=r"tile_000000.*exceptions.*1024"):
        deltacells.write_deltacells(adata, path, tile_size=N_CELLS, progress=False)
    _nothing_left(path)


def test_many_large_counts_below_the_limit(source, roundtrip, assert_X_equal):
    dense = source.X.toarray().astype(np.int64)
    dense[: 1000 // N_GENES + 1, :] = 100_000  # 34 x 29 = 986 exceptions in tile 0: under the limit
    dense[: 1000 // N_GENES + 1, 0] = 0
    adata = source.copy()
    adata.X = sparse.csr_matrix(dense)
    got, _ = roundtrip(adata, tile_size=N_CELLS, reorder_genes=False)
    assert_X_equal(got.X, dense)


# ---------------------------------------------------------------------- obs the format cannot hold


@pytest.mark.parametrize(
    ("column", "values"),
    [
        ("when", pd.date_range("2024-01-01", periods=N_CELLS, freq="h")),
        ("delta", pd.to_timedelta(np.arange(N_CELLS), unit="s")),
        ("mixed", np.array([1, "a"] * (N_CELLS // 2), dtype=object)),
        ("cat_mixed", pd.Categorical([1, "a"] * (N_CELLS // 2))),
        ("period", pd.period_range("2024-01", periods=N_CELLS, freq="D")),
    ],
    ids=["datetime", "timedelta", "object-mixed", "categorical-mixed", "period"],
)
def test_unstorable_obs(source, new_path, column, values):
    adata = source.copy()
    adata.obs[column] = values
    path = new_path()
    with pytest.raises((TypeError, ValueError), match=f"'{column}'") as info:
        deltacells.write_deltacells(adata, path, progress=False)
    assert "obs_columns=" in str(info.value)
    assert not path.exists()  # checked before anything is written


def test_unknown_obs_columns_on_write(source, new_path):
    path = new_path()
    with pytest.raises(KeyError, match="nope"):
        deltacells.write_deltacells(source, path, obs_columns=["donor", "nope"], progress=False)
    assert not path.exists()


# ---------------------------------------------------------------------- existing output


def _snapshot(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in path.rglob("*") if p.is_file()
    }


def test_existing_dataset(source, new_path, cache_dir, assert_X_equal):
    path = new_path()
    deltacells.write_deltacells(source, path, tile_size=TILE, progress=False)
    before = _snapshot(path)
    other = synthetic_counts(50, N_GENES, seed=1)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        deltacells.write_deltacells(other, path, progress=False)
    assert _snapshot(path) == before
    got = deltacells.read_deltacells(path, cache_dir=cache_dir)
    assert got.shape == source.shape

    deltacells.write_deltacells(other, path, overwrite=True, reorder_genes=False, progress=False)
    got = deltacells.read_deltacells(path, cache_dir=cache_dir)
    assert got.shape == (50, N_GENES)
    assert_X_equal(got.X, other.X)
    assert list(got.obs_names) == list(other.obs_names)
    assert not (path / "gene_order.npy").exists()  # nothing of the old dataset is left
    assert len(list((path / "tiles").iterdir())) == 1


def test_existing_other_files(source, tmp_path):
    path = tmp_path / "mine"
    path.mkdir()
    (path / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        deltacells.write_deltacells(source, path, progress=False)
    with pytest.raises(FileExistsError):
        deltacells.write_deltacells(source, path, overwrite=True, progress=False)
    assert (path / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in path.iterdir()) == ["notes.txt"]


def _snapshot(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_failed_overwrite_keeps_the_old_dataset(source, new_path):
    """A conversion that fails midway (a non-integer count) leaves the old dataset byte-identical and readable."""
    path = new_path()
    deltacells.write_deltacells(source, path, progress=False, tile_size=4)
    before = _snapshot(path)
    bad = _with_value(source, source.n_obs - 2, 3, 0.5, np.float64)  # in the last tile: earlier tiles are written
    with pytest.raises(ValueError, match="whole number"):
        deltacells.write_deltacells(bad, path, overwrite=True, reorder_genes=False, progress=False, tile_size=4)
    assert _snapshot(path) == before
    assert sorted(p.name for p in path.iterdir()) == sorted({name.split("/")[0] for name in before})
    back = deltacells.read_deltacells(path, obs_columns=[], obs_names=False)
    assert back.X.to_memory().nnz == deltacells.open_dataset(path).manifest.nnz


# ---------------------------------------------------------------------- layer= and raw=


def test_missing_layer(source, new_path):
    path = new_path()
    with pytest.raises(KeyError, match="counts"):
        deltacells.write_deltacells(source, path, layer="counts", progress=False)
    assert not path.exists()


def test_raw_without_raw(source, new_path):
    path = new_path()
    with pytest.raises(ValueError, match="raw"):
        deltacells.write_deltacells(source, path, raw=True, progress=False)
    assert not path.exists()


def test_layer_and_raw(source, new_path):
    adata = source.copy()
    adata.layers["counts"] = adata.X.copy()
    adata.raw = adata
    path = new_path()
    with pytest.raises(ValueError, match="layer=.*raw=True|raw=True.*layer="):
        deltacells.write_deltacells(adata, path, layer="counts", raw=True, progress=False)
    assert not path.exists()


# ---------------------------------------------------------------------- nothing is dropped


def test_no_warning_for_a_whole_anndata(source, new_path):
    adata = source.copy()
    adata.uns["colors"] = ["red"]
    adata.obsm["X_pca"] = np.zeros((N_CELLS, 2))
    adata.layers["counts"] = adata.X.copy()
    adata.raw = adata
    deltacells.write_deltacells(adata, new_path(), progress=False)  # warnings are errors here: all is stored


def test_no_warning_for_plain_anndata(source, new_path):
    deltacells.write_deltacells(source, new_path(), progress=False)  # warnings are errors here


def test_no_warning_for_deltacells_uns(source, new_path, cache_dir):
    path = new_path()
    deltacells.write_deltacells(source, path, progress=False)
    lazy = deltacells.read_deltacells(path, cache_dir=cache_dir)
    deltacells.write_deltacells(lazy, new_path(), progress=False)  # nothing of ours in it: no warning


def test_an_unknown_layer_is_named(source, new_path):
    with pytest.raises(KeyError) as info:
        deltacells.write_deltacells(source, new_path(), layer="nope", progress=False)
    assert "None" not in str(info.value)


# ---------------------------------------------------------------------- options


def _tile_header(path: Path, tile: int) -> dict[str, int]:
    blob = (path / "tiles" / f"tile_{tile:06d}.dct").read_bytes()
    n_cells, nnz, n_genes, n_chunks = struct.unpack_from("<QQII", blob, 16)
    return {"n_cells": n_cells, "nnz": nnz, "n_genes": n_genes, "n_chunks": n_chunks}


def test_options_take_effect(source, new_path, cache_dir):
    path = new_path()
    adata = source.copy()
    adata.obs["barcode"] = pd.Categorical([f"bc{i}" for i in range(N_CELLS)])  # 700 categories
    metadata = {"organism": "human", "n": 3, "pi": 3.5, "nested": {"ok": True, "list": [1, 2]}}
    deltacells.write_deltacells(
        adata, path, tile_size=100, n_chunks=3, level=2, obs_tiles_per_file=3, max_categories=500,
        metadata=metadata, progress=False,
    )  # fmt: skip
    m = deltacells.open_dataset(path).manifest
    assert m.tile_size == 100
    assert m.tile_cells.tolist() == [100] * 7
    assert m.n_chunks == 3
    assert all(_tile_header(path, t)["n_chunks"] == 3 for t in range(7))
    assert m.zstd_level == 2
    assert m.obs_tiles_per_file == 3
    assert sorted(p.name for p in (path / "obs").glob("obs_*.parquet")) == [f"obs_000{i}.parquet" for i in range(3)]
    assert len(m.obs_shard_bytes) == 3
    assert {k: v for k, v in m.metadata.items() if k != "deltacells"} == metadata  # beside our own entry
    assert m.metadata["deltacells"]["obs_names_unique"] is True  # the writer's word beside the user's
    schema = json.loads((path / "obs" / "schema.json").read_text())
    kinds = {c["name"]: c["kind"] for c in schema["columns"]}
    assert kinds["barcode"] == "string"  # more than max_categories: stored as strings
    assert kinds["cell_type"] == "category"
    got = deltacells.read_deltacells(path, cache_dir=cache_dir)
    assert got.X.dataset.manifest.metadata == m.metadata
    assert got.X.dataset.manifest.n_chunks == 3 and got.X.dataset.manifest.zstd_level == 2
    assert list(got.obs["barcode"]) == [f"bc{i}" for i in range(N_CELLS)]
    assert not isinstance(got.obs["barcode"].dtype, pd.CategoricalDtype)


def test_level_changes_the_bytes(source, new_path):
    sizes = {}
    for level in (1, 19):
        path = new_path()
        deltacells.write_deltacells(source, path, level=level, progress=False)
        m = deltacells.open_dataset(path).manifest
        assert m.zstd_level == level
        sizes[level] = int(m.tile_bytes.sum())
    assert sizes[19] < sizes[1]


def test_metadata_with_nulls(source, new_path, cache_dir):
    """Metadata anndata's uns could not hold (nulls, mixed lists) is kept, and the AnnData reads as written."""
    path = new_path()
    metadata = {"a": None, "b": [1, "x"]}
    deltacells.write_deltacells(source, path, metadata=metadata, progress=False)
    stored = deltacells.open_dataset(path).manifest.metadata
    assert {k: v for k, v in stored.items() if k != "deltacells"} == metadata
    got = deltacells.read_deltacells(path, cache_dir=cache_dir)
    assert got.X.dataset.manifest.metadata == stored and "deltacells" not in got.uns


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"tile_size": 0}, ValueError),
        ({"n_chunks": 0}, ValueError),
        ({"obs_tiles_per_file": 0}, ValueError),
        ({"metadata": ["not", "a", "dict"]}, TypeError),
        ({"metadata": {"x": object()}}, TypeError),
    ],
    ids=["tile_size", "n_chunks", "obs_tiles_per_file", "metadata-list", "metadata-unserialisable"],
)
def test_bad_options(source, new_path, options, error):
    path = new_path()
    with pytest.raises(error):
        deltacells.write_deltacells(source, path, progress=False, **options)
    assert not (path / "manifest.json").exists()


def test_progress_bar(source, new_path, capsys):
    deltacells.write_deltacells(source, new_path(), progress=True)
    err = capsys.readouterr().err
    assert "tiles" in err and "cells" in err
    assert "gene totals" in err  # the first pass over the cells, then the tiles: 700 cells each
    assert "700/700" in err
    assert "1.40k" not in err
    deltacells.write_deltacells(source, new_path(), progress=True, reorder_genes=False)
    assert "700/700" in capsys.readouterr().err


def test_no_progress_bar(source, new_path, capsys):
    deltacells.write_deltacells(source, new_path(), progress=False)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
