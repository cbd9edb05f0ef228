"""``level=`` of the writers and ``convert --level``: presets, ``zstd_level`` in the manifest, bad values, reads."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import sparse

import deltacells
from deltacells.cli import main
from deltacells.codec import ARCHIVE_LEVEL, DEFAULT_LEVEL
from deltacells.core import DatasetWriter, open_dataset
from deltacells.datasets import synthetic_counts
from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.io._sources import matrix_source
from deltacells.io._write import gene_totals
from deltacells.storage import open_store
from deltacells.tiles import TileWriter, permute_columns, to_count_csr


@pytest.fixture(scope="module")
def adata():
    return synthetic_counts(700, 150, seed=11)


@pytest.mark.parametrize(("level", "recorded"), [("default", DEFAULT_LEVEL), ("archive", ARCHIVE_LEVEL), (7, 7)])
def test_manifest_records_the_integer_level(adata, tmp_path, level, recorded) -> None:
    path = tmp_path / "ds"
    deltacells.write_deltacells(adata, path, level=level, tile_size=256, progress=False)
    assert open_dataset(path).manifest.zstd_level == recorded


def test_default_is_the_default_preset(adata, tmp_path) -> None:
    deltacells.write_deltacells(adata, tmp_path / "ds", progress=False)
    assert open_dataset(tmp_path / "ds").manifest.zstd_level == DEFAULT_LEVEL


@pytest.mark.parametrize("level", ["default", "archive"])
def test_round_trip_is_exact(adata, tmp_path, level) -> None:
    path = tmp_path / "ds"
    deltacells.write_deltacells(adata, path, level=level, tile_size=256, progress=False)
    got = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    X = got.X.to_memory() if hasattr(got.X, "to_memory") else got.X
    expected = sparse.csr_matrix(adata.X)
    assert X.shape == expected.shape and (sparse.csr_matrix(X) != expected).nnz == 0
    assert list(got.obs_names) == list(adata.obs_names) and list(got.var_names) == list(adata.var_names)


def test_archive_is_smaller_than_level_1(adata, tmp_path) -> None:
    sizes = {}
    for level in (1, "archive"):
        path = tmp_path / str(level)
        deltacells.write_deltacells(adata, path, level=level, progress=False)
        sizes[level] = int(open_dataset(path).manifest.tile_bytes.sum())
    assert sizes["archive"] < sizes[1]


@pytest.mark.parametrize(
    ("level", "error", "match"),
    [
        (
            "best",
            InvalidValueError,
            "unknown zstd level 'best': pass an integer 1 .. 22 or one of 'default', 'archive'",
        ),
        (0, InvalidValueError, "zstd level 0 is out of range"),
        (23, InvalidValueError, "zstd level 23 is out of range"),
        (2.5, InvalidTypeError, "the zstd level must be"),
    ],
)
def test_bad_levels_write_nothing(adata, tmp_path, level, error, match) -> None:
    path = tmp_path / "ds"
    with pytest.raises(error, match=match):
        deltacells.write_deltacells(adata, path, level=level, progress=False)
    assert not path.exists()
    with pytest.raises(error, match=match):
        DatasetWriter(path, adata.n_vars, level=level)
    assert not path.exists()


def test_writers_keep_the_integer(tmp_path) -> None:
    with DatasetWriter(tmp_path / "ds", 10, level="archive") as writer:
        assert writer.level == ARCHIVE_LEVEL
        writer.write(np.eye(10, dtype=np.int32))
    assert open_dataset(tmp_path / "ds").manifest.zstd_level == ARCHIVE_LEVEL
    tiles = TileWriter(open_store(tmp_path / "t"), 10, level="default")
    assert tiles.level == DEFAULT_LEVEL
    tiles.finish()


@pytest.mark.parametrize("fmt", ["csr", "csc", "dense"])
def test_gene_totals(fmt) -> None:
    rng = np.random.default_rng(3)
    dense = rng.poisson(0.4, size=(300, 40)).astype(np.float32)
    X = dense if fmt == "dense" else sparse.csr_matrix(dense).asformat(fmt)
    import anndata as ad

    totals = gene_totals(matrix_source(ad.AnnData(X=X)), 64)
    assert totals.dtype == np.float64
    assert np.array_equal(totals, dense.sum(axis=0, dtype=np.float64))


@pytest.mark.parametrize(
    ("value", "match"), [(1.5, "is not a whole number"), (-2.0, "is outside"), (np.nan, "is not a whole number")]
)
@pytest.mark.parametrize("fmt", ["csr", "csc", "dense"])
def test_gene_totals_names_bad_counts(value, match, fmt) -> None:
    import anndata as ad

    dense = np.ones((50, 6), dtype=np.float32)
    dense[37, 4] = value
    X = dense if fmt == "dense" else sparse.csr_matrix(dense).asformat(fmt)
    with pytest.raises(InvalidValueError, match=f"the count of cell 37, gene 4 .*{match}"):
        gene_totals(matrix_source(ad.AnnData(X=X)), 16)


@pytest.mark.parametrize("compiled", [False, True], ids=["transpositions", "radix-kernel"])
@pytest.mark.parametrize("columns_dtype", [np.int32, np.int64])
def test_permute_columns_sorts_and_leaves_the_input(request, monkeypatch, compiled: bool, columns_dtype: type) -> None:
    import deltacells.tiles._writer as tile_writer

    if compiled:
        request.getfixturevalue("compiled_kernels")
    monkeypatch.setattr(tile_writer, "kernels_loaded", lambda: compiled)
    rng = np.random.default_rng(5)
    dense = rng.poisson(0.1, size=(200, 300)) * rng.integers(1, 100_000, size=(200, 300))
    dense[7] = rng.integers(1, 9, size=300)  # a full row, and empty ones
    dense[8:11] = 0
    csr = to_count_csr(dense)
    before = csr.copy()
    columns = rng.permutation(300).astype(columns_dtype)
    got = permute_columns(csr, columns)
    expected = np.zeros_like(dense)
    expected[:, columns] = dense
    assert got.has_canonical_format
    assert np.array_equal(got.toarray(), expected)
    for row in range(got.shape[0]):
        idx = got.indices[got.indptr[row] : got.indptr[row + 1]]
        assert np.all(np.diff(idx) > 0)
    assert (csr != before).nnz == 0 and np.array_equal(csr.indices, before.indices)


def test_cli_level_archive(tmp_path, adata) -> None:
    h5ad = tmp_path / "in.h5ad"
    adata.write_h5ad(h5ad)
    runner = CliRunner()
    result = runner.invoke(main, ["convert", "-q", "--level", "archive", str(h5ad), str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert f"zstd level {ARCHIVE_LEVEL}" in result.output
    assert open_dataset(tmp_path / "a").manifest.zstd_level == ARCHIVE_LEVEL
    result = runner.invoke(main, ["convert", "-q", "--level", "5", str(h5ad), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert open_dataset(tmp_path / "b").manifest.zstd_level == 5
    result = runner.invoke(main, ["convert", "-q", str(h5ad), str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert open_dataset(tmp_path / "c").manifest.zstd_level == DEFAULT_LEVEL


@pytest.mark.parametrize("value", ["fastest", "0", "23"])
def test_cli_bad_level(tmp_path, adata, value) -> None:
    h5ad = tmp_path / "in.h5ad"
    adata.write_h5ad(h5ad)
    result = CliRunner().invoke(main, ["convert", "--level", value, str(h5ad), str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "Invalid value for '--level'" in result.output and "zstd level" in result.output
    assert not (tmp_path / "out").exists()
