"""obs and var of read_deltacells: which columns are read and when, where var comes from, conformance."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.storage import FsspecStore

#: Reading with genes as stored (the tests below check the stored order; test_gene_order.py the default).
read_stored = partial(deltacells.read_deltacells, gene_order="stored")

N_CELLS, N_GENES = 500, 40


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    src = synthetic_counts(N_CELLS, N_GENES, seed=3)
    src.obs["flag"] = src.obs["total_counts"] > 3000
    src.obs["label"] = np.where(src.obs["flag"], "big", None).astype(object)
    return src


@pytest.fixture(scope="module")
def dataset(source: ad.AnnData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("obsvar") / "data"
    deltacells.write_deltacells(source, path, tile_size=128, obs_tiles_per_file=2, progress=False)
    return path


def _cache_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


# ---------------------------------------------------------------------- obs_columns and obs_names


def test_all_columns_by_default(dataset, source, cache_dir, assert_obs_equal):
    adata = read_stored(dataset, cache_dir=cache_dir)
    assert_obs_equal(adata.obs, source.obs)
    assert _cache_files(cache_dir)  # localized into the cache given, nowhere else


@pytest.mark.parametrize("columns", [["donor"], ["pct_mito", "cell_type"], ["label", "flag", "total_counts"]])
def test_some_columns(dataset, source, cache_dir, assert_obs_equal, columns):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_columns=columns)
    assert list(adata.obs.columns) == columns
    assert_obs_equal(adata.obs, source.obs[columns])
    cached = {p.name for p in _cache_files(cache_dir)}
    others = set(source.obs.columns) - set(columns)
    assert not any(name.startswith(other) for name in cached for other in others), cached


def test_no_columns_keeps_names(dataset, source, cache_dir):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_columns=[])
    assert list(adata.obs.columns) == []
    assert list(adata.obs_names) == list(source.obs_names)


def test_obs_names_false(dataset, source, cache_dir, assert_obs_equal):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_names=False, obs_columns=["donor"])
    assert list(adata.obs_names) == [str(i) for i in range(N_CELLS)]
    np.testing.assert_array_equal(adata.obs["donor"].to_numpy(), source.obs["donor"].to_numpy())


def test_fast_path_names(dataset, cache_dir, assert_X_equal, source):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_columns=[], obs_names=False)
    assert list(adata.obs_names) == [str(i) for i in range(N_CELLS)]
    assert pd.api.types.is_string_dtype(adata.obs_names.dtype)
    assert list(adata.obs.columns) == []
    order = adata.X.dataset.gene_permutation()
    assert_X_equal(adata[:7].X, source.X[:7][:, order])


def test_fast_path_reads_no_obs(dataset, cache_dir, monkeypatch):
    read: list[str] = []
    original = FsspecStore.read

    def recording(self: FsspecStore, name: str, *args: Any, **kwargs: Any) -> bytes:
        read.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(FsspecStore, "read", recording)
    read_stored(dataset, cache_dir=cache_dir, obs_columns=[], obs_names=False)
    assert not [name for name in read if name.startswith("obs")], read
    assert _cache_files(cache_dir) == []


def test_unknown_obs_column(dataset, cache_dir):
    with pytest.raises(KeyError, match="nope") as info:
        read_stored(dataset, cache_dir=cache_dir, obs_columns=["donor", "nope"])
    for available in ("cell_type", "donor", "total_counts", "pct_mito", "flag", "label"):
        assert available in str(info.value)


# ---------------------------------------------------------------------- read_obs


def test_read_obs_adds_columns(dataset, source, cache_dir, assert_obs_equal):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_columns=[])
    frame = deltacells.read_obs(adata, ["cell_type"])
    assert list(adata.obs.columns) == ["cell_type"]
    assert_obs_equal(adata.obs, source.obs[["cell_type"]])
    assert_obs_equal(frame, source.obs[["cell_type"]])
    deltacells.read_obs(adata, ["label", "pct_mito"])
    assert list(adata.obs.columns) == ["cell_type", "label", "pct_mito"]
    assert_obs_equal(adata.obs, source.obs[["cell_type", "label", "pct_mito"]])
    deltacells.read_obs(adata)
    assert set(adata.obs.columns) == set(source.obs.columns)
    with pytest.raises(KeyError, match="nope"):
        deltacells.read_obs(adata, ["nope"])


def test_read_obs_uses_the_cache_dir_of_the_anndata(dataset, cache_dir):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_columns=["donor"])
    before = {p.name for p in _cache_files(cache_dir)}
    deltacells.read_obs(adata, ["flag"])  # no cache_dir: the one it was read with (else the test fails)
    after = {p.name for p in _cache_files(cache_dir)}
    assert after - before


def test_read_obs_with_fake_names(dataset, source, cache_dir):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_columns=[], obs_names=False)
    deltacells.read_obs(adata, ["total_counts"])
    assert list(adata.obs_names) == [str(i) for i in range(N_CELLS)]
    np.testing.assert_array_equal(adata.obs["total_counts"].to_numpy(), source.obs["total_counts"].to_numpy())


@pytest.mark.filterwarnings("ignore::anndata.ImplicitModificationWarning")
def test_read_obs_of_view(dataset, source, cache_dir, assert_obs_equal):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_columns=[])
    rows = np.array([400, 3, 250])
    frame = deltacells.read_obs(adata[rows], ["donor"])
    assert_obs_equal(frame, source.obs.iloc[rows][["donor"]])


def test_read_obs_of_path(dataset, source, cache_dir, assert_obs_equal):
    assert_obs_equal(deltacells.read_obs(dataset, cache_dir=cache_dir), source.obs)
    assert_obs_equal(deltacells.read_obs(dataset, ["donor"], cache_dir=cache_dir), source.obs[["donor"]])


def test_read_obs_of_other_anndata(source, cache_dir):
    with pytest.raises(TypeError, match="read_deltacells"):
        deltacells.read_obs(source.copy(), ["donor"], cache_dir=cache_dir)


def test_dataset_without_obs(tmp_path, cache_dir, make_counts):
    """A dataset written without an obs sidecar (TileWriter, no obs): default names, no columns."""
    from deltacells.core import DatasetWriter

    X = make_counts(50, 5)
    with DatasetWriter(tmp_path / "bare", 5, tile_size=16) as writer:
        writer.write(X)
    adata = read_stored(tmp_path / "bare", cache_dir=cache_dir)
    assert list(adata.obs_names) == [str(i) for i in range(50)]
    assert list(adata.var_names) == [str(i) for i in range(5)]
    with pytest.raises(KeyError, match="no obs"):
        read_stored(tmp_path / "bare", cache_dir=cache_dir, obs_columns=["x"])
    assert _cache_files(cache_dir) == []


# ---------------------------------------------------------------------- var


def _copy(dataset: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(dataset, target)
    return target


def _set_manifest(path: Path, **fields: Any) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(fields)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_var_table(dataset, source, cache_dir):
    adata = read_stored(dataset, cache_dir=cache_dir, obs_columns=[])
    order = adata.X.dataset.gene_permutation()
    pd.testing.assert_frame_equal(adata.var, source.var.iloc[order], check_index_type=False)
    assert list(adata.var_names) == (dataset / "var_names.txt").read_text().splitlines()


def test_var_table_index_kept(tmp_path, cache_dir, make_counts):
    var = pd.DataFrame(
        {"symbol": ["a", "b", "c"], "length": [1.5, 2.5, np.nan], "kind": pd.Categorical(["x", "y", "x"])},
        index=pd.Index(["ENSG1", "ENSG2", "ENSG3"], name="gene_id"),
    )
    src = ad.AnnData(X=make_counts(20, 3, density=0.5), var=var)
    deltacells.write_deltacells(src, tmp_path / "d", reorder_genes=False, progress=False)
    adata = read_stored(tmp_path / "d", cache_dir=cache_dir)
    assert adata.var.index.name == "gene_id"
    pd.testing.assert_frame_equal(adata.var, var, check_index_type=False)


def test_var_from_names_only(dataset, tmp_path, cache_dir, source):
    path = _copy(dataset, tmp_path)
    (path / "var.parquet").unlink()
    _set_manifest(path, has_var_table=False)
    adata = read_stored(path, cache_dir=cache_dir, obs_columns=[])
    order = adata.X.dataset.gene_permutation()
    assert list(adata.var_names) == list(source.var_names[order])
    assert list(adata.var.columns) == []


def test_var_from_nothing(dataset, tmp_path, cache_dir):
    path = _copy(dataset, tmp_path)
    (path / "var.parquet").unlink()
    (path / "var_names.txt").unlink()
    _set_manifest(path, has_var_table=False, has_var_names=False)
    adata = read_stored(path, cache_dir=cache_dir, obs_columns=[])
    assert list(adata.var_names) == [str(i) for i in range(N_GENES)]
    assert adata.shape == (N_CELLS, N_GENES)


def test_var_file_missing_but_promised(dataset, tmp_path, cache_dir):
    path = _copy(dataset, tmp_path)
    (path / "var.parquet").unlink()
    with pytest.raises(deltacells.FormatError, match="has_var_table"):
        read_stored(path, cache_dir=cache_dir)


# ---------------------------------------------------------------------- conformance datasets


@pytest.fixture(scope="module")
def conformance(request: pytest.FixtureRequest) -> Path:
    path = request.getfixturevalue("shared_dir") / "conformance" / "datasets"
    if not (path / "complete" / "manifest.json").exists():
        pytest.skip(f"conformance datasets not found at {path}")
    return path


def test_conformance_complete(conformance, cache_dir, assert_X_equal):
    adata = read_stored(conformance / "complete", cache_dir=cache_dir)
    with np.load(conformance / "complete.expected.npz") as npz:
        shape = tuple(npz["shape"])
        X = sparse.csr_matrix((npz["X_data"], npz["X_indices"], npz["X_indptr"]), shape=shape)
    order = np.load(conformance / "complete" / "gene_order.npy")
    np.testing.assert_array_equal(adata.X.dataset.gene_permutation(), order)
    assert adata.shape == shape
    assert_X_equal(adata.X, X[:, order], np.float32)  # it records no dtype: read as float32 (decision 9)
    rows = np.array([2599, 0, 1300, 7, 7])
    assert_X_equal(adata[rows].X, X[rows][:, order], np.float32)
    expected_obs = pd.read_parquet(conformance / "complete.expected_obs.parquet").set_index("_index")
    expected_obs.index.name = None
    pd.testing.assert_frame_equal(adata.obs, expected_obs, check_index_type=False)
    assert adata.obs["cell_type"].isna().any() and adata.obs["pct_mito"].isna().any()
    expected_var = pd.read_parquet(conformance / "complete.expected_var.parquet").iloc[order]
    pd.testing.assert_frame_equal(adata.var, expected_var, check_index_type=False)
    restored = deltacells.restore_gene_order(adata)
    assert_X_equal(restored.X, X, np.float32)


def test_conformance_obs_shard_tampered(conformance, cache_dir, tmp_path):
    with pytest.raises(deltacells.FormatError, match="obs_0000.parquet"):
        read_stored(conformance / "obs_shard_tampered", cache_dir=cache_dir)
    # Without obs it opens, and X is fine; the obs fail as soon as they are read.
    adata = read_stored(
        conformance / "obs_shard_tampered", cache_dir=tmp_path / "other", obs_columns=[], obs_names=False
    )
    assert adata.X[:5].shape == (5, adata.n_vars)
    with pytest.raises(deltacells.FormatError, match="SHA-256"):
        deltacells.read_obs(adata, ["cell_type"])
    with pytest.raises(deltacells.FormatError):
        deltacells.read_obs(conformance / "obs_shard_tampered", cache_dir=tmp_path / "third")
