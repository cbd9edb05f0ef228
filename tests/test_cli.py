"""The ``deltacells`` command line: convert, info, validate, demo; errors as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
from click.testing import CliRunner, Result
from scipy import sparse

import deltacells as dc
from deltacells.cli import INFO_JSON_VERSION, detect_format, main
from deltacells.datasets import synthetic_counts
from deltacells.tiles import DEFAULT_LEVEL, DEFAULT_N_CHUNKS

SHARED = Path(__file__).resolve().parents[2] / "shared"
VISIUM = SHARED / "data" / "visium-cytassist"
CONFORMANCE = SHARED / "conformance" / "datasets"

needs_conformance = pytest.mark.skipif(not (CONFORMANCE / "complete").is_dir(), reason="no conformance datasets")

#: Warnings anndata / zarr emit from their own code with the versions we support (not about deltacells).
pytestmark = [
    pytest.mark.filterwarnings("ignore:Writing zarr v2 data will no longer be the default"),
    pytest.mark.filterwarnings("ignore:The 'future.infer_string' option is deprecated"),
    pytest.mark.filterwarnings("ignore:The 'mode.chained_assignment' option is deprecated"),
]


@pytest.fixture(autouse=True)
def _no_default_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The commands never fill the user's obs cache: the default one must stay empty."""
    stray = tmp_path_factory.mktemp("default-cache")
    monkeypatch.setenv("DELTACELLS_CACHE", str(stray))
    yield
    assert not any(stray.iterdir()), f"something was written to the default obs cache: {list(stray.iterdir())}"


def run(*args: str | os.PathLike[str]) -> Result:
    """Invoke the CLI in process; the result has .exit_code, .stdout, .stderr, .output."""
    return CliRunner().invoke(main, [os.fspath(a) for a in args])


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert lines[-1] == errors[0]
    # warnings may come first, and the demo's note that a first run compiles the kernels (a cold numba cache)
    assert all(line.startswith(("warning: ", "note: ")) for line in lines[:-1]), result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def read_back(path: Path, cache: Path) -> ad.AnnData:
    """The tiles' matrix at ``path`` in memory as X (``extras=False``), genes back in the source's order, int32."""
    adata = dc.read_deltacells(path, cache_dir=cache, dtype="int32", extras=False)
    if adata.X.dataset.gene_permutation() is not None:
        adata = dc.restore_gene_order(adata)
    return adata.to_memory()


def same_X(a, b) -> bool:
    a, b = sparse.csr_matrix(a), sparse.csr_matrix(b)
    return a.shape == b.shape and (a != b).nnz == 0


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    return synthetic_counts(500, 120, seed=5)


@pytest.fixture(scope="module")
def h5ad(source: ad.AnnData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inputs") / "counts.h5ad"
    source.write_h5ad(path)
    return path


# ---------------------------------------------------------------------- help and version


def test_help_and_version():
    result = run("--help")
    assert result.exit_code == 0
    for command in ("convert", "info", "validate", "demo"):
        assert command in result.output
        sub = run(command, "--help")
        assert sub.exit_code == 0, sub.output
        assert "Usage: " in sub.output
    assert run("-h").exit_code == 0
    result = run("--version")
    assert result.exit_code == 0
    assert dc.__version__ in result.output


def test_python_dash_m_deltacells_is_the_command(tmp_path):
    """``python -m deltacells``: the command without its script on PATH (an environment not activated, a notebook)."""
    env = {**os.environ, "PATH": os.defpath}  # no virtual environment's bin directory
    proc = subprocess.run(
        [sys.executable, "-m", "deltacells", "info", tmp_path / "nothing-here"],
        capture_output=True, text=True, check=False, timeout=120, env=env,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"error: {tmp_path / 'nothing-here'}: no such file or directory\n"
    proc = subprocess.run(
        [sys.executable, "-m", "deltacells", "--help"], capture_output=True, text=True, check=True, timeout=120, env=env
    )
    assert proc.stdout.startswith("Usage: deltacells [OPTIONS] COMMAND")


def test_console_script_error_has_no_traceback(tmp_path):
    """The installed script: one error line on stderr, exit status 1."""
    script = Path(sys.executable).with_name("deltacells")
    if not script.exists():
        pytest.skip("the deltacells console script is not installed beside this Python")
    proc = subprocess.run(
        [script, "info", tmp_path / "nothing-here"], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: ")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_a_reader_that_stops_reading_is_no_error(h5ad, tmp_path):
    """``deltacells info DATASET | head -5``: the pipe closes before everything is written; exit status 0."""
    script = Path(sys.executable).with_name("deltacells")
    if not script.exists():
        pytest.skip("the deltacells console script is not installed beside this Python")
    assert run("convert", "-q", h5ad, tmp_path / "ds").exit_code == 0
    for options in ([], ["--json"]):
        proc = subprocess.Popen(
            [script, "info", *options, tmp_path / "ds"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        proc.stdout.close()  # the reader is gone before the command writes anything
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        assert err == b""


# ---------------------------------------------------------------------- convert


def test_convert_interrupted_leaves_nothing(h5ad, tmp_path, monkeypatch):
    """Ctrl-C (KeyboardInterrupt) once the output is open: status 130, what it leaves, and no output folder left."""
    from deltacells.core import DatasetWriter

    write = DatasetWriter.write
    calls = []

    def interrupted(self, block):
        calls.append(block.shape[0])
        write(self, block)  # the first tiles are stored (tiles of 64 cells), then the user presses Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(DatasetWriter, "write", interrupted)
    out = tmp_path / "out"
    result = run("convert", "-q", "--tile-size", "64", h5ad, out)
    assert_interrupted(result, "convert", f"{out} was not written (what had been written is removed)")
    assert calls == [500]
    assert not out.exists()
    existing = tmp_path / "existing"  # a folder that was there before is kept, emptied of what was written
    existing.mkdir()
    run("convert", "-q", "--tile-size", "64", h5ad, existing)
    assert existing.is_dir() and not any(existing.iterdir())


def test_convert_h5ad_backed(h5ad, source, tmp_path):
    out = tmp_path / "out.deltacells"
    result = run("convert", h5ad, out)
    assert result.exit_code == 0, result.output
    text = result.stdout
    for fragment in ("cells       500", "genes       120", f"nonzeros    {source.X.nnz:,}", "bytes per nonzero"):
        assert fragment in text
    assert "smaller than the input" in text
    assert "cells/s" in text
    assert "(h5ad," in text
    assert "cells/s" in result.stderr  # the progress bar
    back = read_back(out, tmp_path / "cache")
    assert same_X(back.X, source.X)
    assert list(back.obs.columns) == list(source.obs.columns)
    assert list(back.obs_names) == list(source.obs_names)
    assert list(back.var_names) == list(source.var_names)
    m = dc.open_dataset(out).manifest
    assert m.metadata["source"] == "counts.h5ad"
    assert m.metadata["source_format"] == "h5ad"
    assert m.has_gene_order


def test_convert_append(source, tmp_path):
    first, second = source[:300].copy(), source[300:].copy()
    first.write_h5ad(tmp_path / "first.h5ad")
    second[:, ::-1].copy().write_h5ad(tmp_path / "second.h5ad")  # genes in another order: matched by name
    out = tmp_path / "out.deltacells"
    assert run("convert", "-q", tmp_path / "first.h5ad", out).exit_code == 0
    result = run("convert", "-q", "--append", tmp_path / "second.h5ad", out)
    assert result.exit_code == 0, result.output
    back = read_back(out, tmp_path / "cache")
    assert same_X(back.X, source.X)
    assert list(back.obs_names) == list(source.obs_names)
    again = run("convert", "-q", "--append", tmp_path / "second.h5ad", out)
    assert again.exit_code == 1 and "not unique in the grown dataset" in again.stderr
    both = run("convert", "-q", "--append", "--overwrite", tmp_path / "second.h5ad", out)
    assert both.exit_code == 1 and "--append adds cells and --overwrite replaces the dataset" in both.stderr


def test_convert_keeps_everything_else_unless_told(source, tmp_path):
    adata = source.copy()
    adata.obsm["X_pca"] = np.ones((adata.n_obs, 3), dtype=np.float32)
    adata.uns["note"] = "kept"
    adata.write_h5ad(tmp_path / "in.h5ad")
    assert run("convert", "-q", tmp_path / "in.h5ad", tmp_path / "all").exit_code == 0
    back = dc.read_deltacells(tmp_path / "all", cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(back.obsm["X_pca"], adata.obsm["X_pca"])
    assert back.uns["note"] == "kept"
    info = run("info", tmp_path / "all").stdout
    assert "elements in anndata.zarr" in info and "obsm/X_pca" in info
    assert run("convert", "-q", "--no-extras", tmp_path / "in.h5ad", tmp_path / "counts").exit_code == 0
    assert not (tmp_path / "counts" / "anndata.zarr").exists()


def test_convert_options_take_effect(h5ad, source, tmp_path):
    out = tmp_path / "out.deltacells"
    result = run(
        "convert", h5ad, out,
        "--tile-size", "100", "--n-chunks", "2", "--level", "3", "--no-reorder-genes",
        "--obs-columns", "cell_type", "--obs-columns", "donor,total_counts", "--max-categories", "5",
        "--obs-tiles-per-file", "2", "-j", "1", "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "cells/s" not in result.stderr  # --quiet: no progress bar
    assert "(input order kept)" in result.stdout
    m = dc.open_dataset(out).manifest
    assert (m.tile_size, m.n_tiles, m.n_chunks, m.zstd_level) == (100, 5, 2, 3)
    assert not m.has_gene_order
    assert m.obs_tiles_per_file == 2
    assert m.n_obs_shards == 3
    info = json.loads(run("info", "--json", out).stdout)
    kinds = {c["name"]: c["kind"] for c in info["obs"]["columns"]}
    # cell_type has 6 categories: above --max-categories 5, stored as strings; donor has 4.
    assert kinds == {"cell_type": "string", "donor": "category", "total_counts": "numeric"}
    back = read_back(out, tmp_path / "cache")
    assert same_X(back.X, source.X)


def test_convert_io_concurrency_reaches_the_store(h5ad, source, tmp_path, monkeypatch):
    import deltacells.io._write as write_module

    seen = []
    real_open_store = write_module.open_store

    def recording_open_store(path, storage_options=None, *, io_concurrency=None):
        store = real_open_store(path, storage_options, io_concurrency=io_concurrency)
        seen.append(store.io_concurrency)
        return store

    monkeypatch.setattr(write_module, "open_store", recording_open_store)
    out = tmp_path / "out.deltacells"
    result = run("convert", h5ad, out, "--io-concurrency", "3", "--quiet")
    assert result.exit_code == 0, result.output
    assert seen == [3]
    assert same_X(read_back(out, tmp_path / "cache").X, source.X)
    assert run("convert", h5ad, tmp_path / "other", "--io-concurrency", "0").exit_code == 2


def test_convert_no_obs_and_overwrite(h5ad, tmp_path):
    out = tmp_path / "out.deltacells"
    assert run("convert", "-q", h5ad, out).exit_code == 0
    assert_one_line_error(run("convert", "-q", h5ad, out), "already holds a deltacells dataset", "--overwrite")
    result = run("convert", "-q", "--no-obs", "--overwrite", h5ad, out)
    assert result.exit_code == 0, result.output
    info = json.loads(run("info", "--json", out).stdout)
    assert info["obs"]["columns"] == []
    assert info["obs"]["has_index"] is True
    assert run("convert", "-q", "--no-obs", "--obs-columns", "donor", "--overwrite", h5ad, out).exit_code == 2


@pytest.fixture(scope="module")
def normalized_h5ad(source: ad.AnnData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """X is log-normalised (not counts); the counts are in layers['counts'] and in raw."""
    adata = source.copy()
    adata.layers["counts"] = adata.X.copy()
    adata.raw = adata
    X = adata.X.astype(np.float32)
    X.data = np.log1p(X.data)
    adata.X = X
    path = tmp_path_factory.mktemp("inputs") / "normalized.h5ad"
    adata.write_h5ad(path)
    return path


def test_convert_layer_and_raw(normalized_h5ad, source, tmp_path):
    result = run("convert", "-q", normalized_h5ad, tmp_path / "x")
    assert_one_line_error(result, "is not a whole number", "--layer counts or --raw")
    assert not (tmp_path / "x" / "manifest.json").exists()
    for option in (["--layer", "counts"], ["--raw"]):
        out = tmp_path / option[0].strip("-")
        result = run("convert", "-q", *option, normalized_h5ad, out)
        assert result.exit_code == 0, result.output
        assert same_X(read_back(out, tmp_path / "cache").X, source.X)
    assert_one_line_error(run("convert", "-q", "--layer", "nope", normalized_h5ad, tmp_path / "y"), "'nope'")


def test_convert_warnings_are_one_line(source, tmp_path):
    adata = source.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's own warning of names that are not unique
        adata.var_names = ["same"] * adata.n_vars
        adata.write_h5ad(tmp_path / "same_names.h5ad")
    path = tmp_path / "same_names.h5ad"
    result = run("convert", "-q", path, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert any(
        line.startswith("warning: ") and "var_names are not unique" in line for line in result.stderr.splitlines()
    )
    assert "UserWarning" not in result.stderr


def test_convert_zarr(source, tmp_path):
    adata = source.copy()
    adata.layers["counts"] = adata.X.copy()
    path = tmp_path / "counts.zarr"
    adata.write_zarr(path)
    assert detect_format(path) == "zarr"
    for option in ([], ["--layer", "counts"]):
        out = tmp_path / f"out{len(option)}"
        result = run("convert", "-q", *option, path, out)
        assert result.exit_code == 0, result.output
        assert "(zarr," in result.stdout
        back = read_back(out, tmp_path / "cache")
        assert same_X(back.X, source.X)
        assert list(back.obs.columns) == list(source.obs.columns)


def test_convert_zarr_raw(source, tmp_path):
    adata = source.copy()
    adata.raw = adata
    adata.X = sparse.csr_matrix(adata.X.astype(np.float32) / 2)  # not counts
    path = tmp_path / "raw.zarr"
    adata.write_zarr(path)
    out = tmp_path / "out"
    result = run("convert", "-q", "--raw", path, out)
    assert result.exit_code == 0, result.output
    back = read_back(out, tmp_path / "cache")
    assert same_X(back.X, source.X)
    assert list(back.var_names) == list(source.var_names)


def test_convert_csc_h5ad(source, tmp_path):
    adata = source.copy()
    adata.X = sparse.csc_matrix(adata.X)
    path = tmp_path / "csc.h5ad"
    adata.write_h5ad(path)
    result = run("convert", "-q", path, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "warning: X is stored as CSC" in result.stderr
    assert same_X(read_back(tmp_path / "out", tmp_path / "cache").X, source.X)


def test_convert_deltacells_keeps_the_original_gene_order(h5ad, source, tmp_path):
    """A dataset re-converted (here re-tiled) keeps the gene order of the original source."""
    first = tmp_path / "first"
    assert run("convert", "-q", h5ad, first).exit_code == 0
    second = tmp_path / "second"
    result = run("convert", "-q", "--tile-size", "64", first, second)
    assert result.exit_code == 0, result.output
    assert "(deltacells," in result.stdout
    assert dc.open_dataset(second).n_tiles == 8
    back = read_back(second, tmp_path / "cache")
    assert same_X(back.X, source.X)
    assert list(back.var_names) == list(source.var_names)


def write_10x_h5(adata: ad.AnnData, path: Path) -> None:
    """A Cell Ranger v3 ``filtered_feature_bc_matrix.h5``: CSC genes x cells, i.e. CSR cells x genes."""
    import h5py

    X = sparse.csr_matrix(adata.X)
    with h5py.File(path, "w") as f:
        g = f.create_group("matrix")
        g["barcodes"] = np.array(adata.obs_names, dtype="S")
        g["data"] = X.data.astype(np.int32)
        g["indices"] = X.indices.astype(np.int64)
        g["indptr"] = X.indptr.astype(np.int64)
        g["shape"] = np.array([adata.n_vars, adata.n_obs], dtype=np.int32)
        features = g.create_group("features")
        features["id"] = np.array(adata.var["gene_ids"], dtype="S")
        features["name"] = np.array(adata.var_names, dtype="S")
        features["feature_type"] = np.array(["Gene Expression"] * adata.n_vars, dtype="S")
        features["genome"] = np.array(["GRCh38"] * adata.n_vars, dtype="S")
        features["_all_tag_keys"] = np.array([b"genome"])


def test_convert_10x_h5(source, tmp_path):
    path = tmp_path / "filtered_feature_bc_matrix.h5"
    write_10x_h5(source, path)
    assert detect_format(path) == "10x-h5"
    out = tmp_path / "out"
    result = run("convert", "-q", path, out)
    assert result.exit_code == 0, result.output
    assert "(10x-h5," in result.stdout
    back = read_back(out, tmp_path / "cache")
    assert same_X(back.X, source.X)
    assert list(back.obs_names) == list(source.obs_names)
    assert list(back.var["gene_ids"]) == list(source.var["gene_ids"])


@pytest.mark.skipif(not VISIUM.is_dir(), reason="no shared Visium data")
def test_convert_10x_mtx_real_data(tmp_path):
    import scanpy as sc

    out = tmp_path / "visium.deltacells"
    result = run("convert", "-q", "--level", "3", VISIUM, out)
    assert result.exit_code == 0, result.output
    assert "(10x-mtx," in result.stdout
    assert "nonzeros    1,069,459" in result.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scanpy's own warnings about the 10x files
        expected = sc.read_10x_mtx(VISIUM)
    back = read_back(out, tmp_path / "cache")
    assert back.shape == (2898, 19465)
    assert same_X(back.X, expected.X)
    assert list(back.obs_names) == list(expected.obs_names)
    assert list(back.var_names) == list(expected.var_names)
    assert run("validate", "-q", out).exit_code == 0


def test_convert_loom(source, tmp_path):
    path = tmp_path / "counts.loom"
    try:
        import loompy  # noqa: F401
    except ImportError:
        path.write_bytes(b"")
        assert_one_line_error(run("convert", "-q", path, tmp_path / "out"), "loompy")
        pytest.skip("loompy is not installed: anndata can neither write nor read loom (the error was checked)")
    source.write_loom(path)
    out = tmp_path / "out"
    result = run("convert", "-q", path, out)
    assert result.exit_code == 0, result.output
    assert same_X(read_back(out, tmp_path / "cache").X, source.X)


def test_convert_errors(h5ad, tmp_path):
    assert_one_line_error(run("convert", tmp_path / "missing.h5ad", tmp_path / "out"), "missing.h5ad", "no such file")
    odd = tmp_path / "data.txt"
    odd.write_text("hello")
    assert_one_line_error(run("convert", odd, tmp_path / "out"), "--format")
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    assert_one_line_error(run("convert", empty, tmp_path / "out"), "--format")
    assert_one_line_error(run("convert", "-q", "--format", "zarr", h5ad, tmp_path / "out"))
    assert_one_line_error(run("convert", "-q", "--obs-columns", "nope", h5ad, tmp_path / "out"), "'nope'")
    assert run("convert", "--tile-size", "0", h5ad, tmp_path / "out").exit_code == 2  # click's usage error


def test_convert_non_integer_counts(source, tmp_path):
    adata = source.copy()
    adata.X = adata.X.astype(np.float32)
    adata.X.data[7] = 0.5
    path = tmp_path / "bad.h5ad"
    adata.write_h5ad(path)
    out = tmp_path / "out"
    assert_one_line_error(run("convert", "-q", path, out), "is not a whole number", "no layers and no raw")
    assert not out.exists()  # a failed conversion leaves nothing it created


@pytest.mark.parametrize(
    ("where", "suggested", "not_suggested"),
    [
        pytest.param(None, "the input has no layers and no raw", ["--layer", "--raw"], id="neither"),
        pytest.param("layer", "(e.g. --layer counts)", ["--raw"], id="counts-layer"),
        pytest.param("raw", "(e.g. --raw)", ["--layer"], id="raw"),
    ],
)
def test_convert_not_counts_suggests_what_the_input_has(source, tmp_path, where, suggested, not_suggested):
    """X holds non-integer floats: the message suggests only the layers (by name) and the raw the input has."""
    adata = source.copy()
    counts = adata.X.copy()
    adata.X = adata.X.astype(np.float32)
    adata.X.data[:] = np.log1p(adata.X.data)
    if where == "layer":
        adata.layers["counts"] = counts
    elif where == "raw":
        adata.raw = ad.AnnData(X=counts, var=adata.var)
    path = tmp_path / "normalized.h5ad"
    adata.write_h5ad(path)
    result = run("convert", "-q", path, tmp_path / "out")
    assert_one_line_error(result, "is not a whole number", suggested)
    error = result.stderr.strip().splitlines()[-1]
    for option in not_suggested:
        assert option not in error
    assert "write_deltacells" not in error
    assert "=" not in error  # no Python argument (layer=, raw=True) in the command line's message


def test_convert_too_many_large_values_suggests_the_counts_layer(source, tmp_path):
    """Whole numbers too large to be counts (X scaled up): the codec's refusal names the options, not arguments."""
    adata = source.copy()
    adata.layers["counts"] = adata.X.copy()
    adata.X = adata.X.astype(np.int64) * 100_000
    path = tmp_path / "scaled.h5ad"
    adata.write_h5ad(path)
    result = run("convert", "-q", path, tmp_path / "out")
    assert_one_line_error(result, "do not look like raw counts", "(e.g. --layer counts)")
    error = result.stderr.strip().splitlines()[-1]
    assert "write_deltacells" not in error
    assert "=" not in error
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_convert_raw_without_raw(source, tmp_path):
    """--raw on an input without raw: one line naming the input, not a traceback."""
    plain = tmp_path / "plain.h5ad"
    source.write_h5ad(plain)
    assert_one_line_error(run("convert", "-q", "--raw", plain, tmp_path / "out"), "plain.h5ad", "has no raw")
    assert not (tmp_path / "out" / "manifest.json").exists()
    adata = source.copy()
    adata.layers["spliced"] = adata.X.copy()
    layered = tmp_path / "layered.h5ad"
    adata.write_h5ad(layered)
    assert_one_line_error(run("convert", "-q", "--raw", layered, tmp_path / "out"), "has no raw", "spliced")


def test_convert_not_counts_with_layer_suggests_x(normalized_h5ad, tmp_path):
    """The layer picked holds no counts: X and raw are suggested, not the same layer again."""
    adata = ad.read_h5ad(normalized_h5ad)
    adata.layers["lognorm"] = adata.X.copy()
    path = tmp_path / "two_layers.h5ad"
    adata.write_h5ad(path)
    result = run("convert", "-q", "--layer", "lognorm", path, tmp_path / "out")
    assert_one_line_error(result, "is not a whole number", "--layer counts, --raw or X, without --layer or --raw")
    assert "--layer lognorm" not in result.stderr


# ---------------------------------------------------------------------- info


INFO_KEYS = {
    "info_version", "path", "format", "version", "n_cells", "n_genes", "n_tiles", "tile_size", "n_chunks",
    "zstd_level", "nnz", "density", "tile_bytes", "obs_bytes", "other_bytes", "total_bytes", "bytes_per_nonzero",
    "has_gene_order", "has_var_names", "has_var_table", "has_obs", "var", "obs", "metadata", "anndata",
    "problems", "sizes_checked",
}  # fmt: skip


@needs_conformance
def test_info_json_on_conformance_dataset():
    path = CONFORMANCE / "complete"
    result = run("info", "--json", path)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == INFO_KEYS
    assert doc["anndata"] is None  # written by the other implementation: counts, obs and var only
    assert doc["problems"] == []
    assert doc["sizes_checked"] is True  # a local disk
    m = dc.open_dataset(path).manifest
    assert doc["info_version"] == INFO_JSON_VERSION
    assert (doc["n_cells"], doc["n_genes"], doc["n_tiles"], doc["tile_size"]) == (2600, 1200, 11, 256)
    assert doc["nnz"] == m.nnz
    assert doc["tile_bytes"] == int(m.tile_bytes.sum())
    assert doc["bytes_per_nonzero"] == pytest.approx(doc["tile_bytes"] / m.nnz)
    assert doc["obs_bytes"] == sum(m.obs_shard_bytes)
    assert doc["total_bytes"] == doc["tile_bytes"] + doc["obs_bytes"] + doc["other_bytes"]
    assert doc["has_gene_order"] and doc["has_var_names"] and doc["has_var_table"] and doc["has_obs"]
    assert doc["var"]["n_rows"] == 1200
    obs = doc["obs"]
    assert (obs["n_shards"], obs["tiles_per_file"], obs["has_index"]) == (4, 3, True)
    columns = {c["name"]: c for c in obs["columns"]}
    assert list(columns) == ["cell_type", "n_counts", "pct_mito", "is_doublet", "donor", "note"]
    assert columns["cell_type"]["kind"] == "category"
    assert columns["cell_type"]["n_categories"] == 5
    assert columns["donor"]["n_categories"] == 7
    assert columns["n_counts"] == {
        "name": "n_counts", "kind": "numeric", "arrow_type": "int64", "n_categories": None, "ordered": False,
    }  # fmt: skip
    assert (columns["is_doublet"]["kind"], columns["note"]["kind"]) == ("bool", "string")


def test_info_text(h5ad, tmp_path):
    out = tmp_path / "out"
    assert run("convert", "-q", "--tile-size", "200", h5ad, out).exit_code == 0
    result = run("info", out)
    assert result.exit_code == 0, result.output
    text = result.stdout
    for fragment in (
        "cells       500",
        "genes       120",
        f"3 tiles of up to 200 cells, {DEFAULT_N_CHUNKS} chunks each, zstd level {DEFAULT_LEVEL}",
        "bytes per nonzero",
        "genes sorted by decreasing total counts",
        "var.parquet, 120 rows: gene_ids (",  # string or large_string, by pandas version
        "mito (bool); var_names.txt",
        "cell names and 4 columns in 1 shard",
        "cell_type     category, 6 categories",
        "total_counts  numeric, int64",
        '"source": "counts.h5ad"',
    ):
        assert fragment in text, text


def test_info_errors(tmp_path):
    assert_one_line_error(run("info", tmp_path / "nope"), "no such file")
    (tmp_path / "empty").mkdir()
    assert_one_line_error(run("info", tmp_path / "empty"), "manifest.json")


def test_info_on_a_file_suggests_convert(h5ad, tmp_path):
    """An h5ad (or any file) is not a dataset: the message says so and names deltacells convert."""
    result = run("info", h5ad)
    assert_one_line_error(result, "counts.h5ad", "an h5ad file", "not a deltacells dataset", "deltacells convert")
    assert "Errno" not in result.stderr
    assert_one_line_error(run("info", "--json", h5ad), "not a deltacells dataset", "deltacells convert")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert_one_line_error(run("info", text), "is a file, not a deltacells dataset", "deltacells convert")


def test_info_on_a_zarr_store_suggests_convert(source, tmp_path):
    path = tmp_path / "counts.zarr"
    source.write_zarr(path)
    assert_one_line_error(run("info", path), "a zarr store, not a deltacells dataset", "deltacells convert")


@needs_conformance
@pytest.mark.parametrize("name", ["version_1", "wrong_format", "counts_inconsistent", "no_manifest"])
def test_info_on_broken_datasets(name):
    result = run("info", CONFORMANCE / name)
    assert_one_line_error(result, "manifest.json")
    if name != "no_manifest":  # a malformed manifest: validate lists every problem (a folder without one: nothing)
        assert_one_line_error(result, f"deltacells validate {CONFORMANCE / name} lists every problem")


@pytest.fixture
def converted(h5ad: Path, tmp_path: Path) -> Path:
    """A dataset of 3 tiles and 1 obs shard, converted from ``h5ad``."""
    out = tmp_path / "out"
    assert run("convert", "-q", "--tile-size", "200", h5ad, out).exit_code == 0
    return out


def test_info_says_what_it_checked_and_to_validate_the_contents(converted):
    """A tile damaged inside (same size) passes info, which says that validate is what reads the contents."""
    tile = converted / "tiles" / "tile_000001.dct"
    blob = bytearray(tile.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    tile.write_bytes(bytes(blob))
    result = run("info", converted)
    assert result.exit_code == 0, result.output
    assert "checked     the manifest and small files; its 3 tiles and 1 obs shard are there, of the sizes it " in (
        result.stdout
    )
    assert f"(their contents are not read: deltacells validate {converted} decodes and checks every byte)" in (
        result.stdout
    )
    assert "problems" not in result.stdout
    assert run("validate", "-q", converted).exit_code == 1  # what validate is there for


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("delete tile", "tiles/tile_000001.dct: tile 1 of 3 is missing from the dataset"),
        ("truncate tile", "tiles/tile_000002.dct: size is"),
        ("truncate shard", "obs/obs_0000.parquet: size is"),
        ("delete shard", "obs/obs_0000.parquet: missing"),
    ],
)
def test_info_on_a_damaged_dataset_lists_the_problems_and_fails(converted, damage, expected):
    """Missing or truncated tiles and obs shards: the summary, the problems, exit 1 with a pointer to validate."""
    if damage == "delete tile":
        (converted / "tiles" / "tile_000001.dct").unlink()
    elif damage == "truncate tile":
        tile = converted / "tiles" / "tile_000002.dct"
        tile.write_bytes(tile.read_bytes()[:-10])
    elif damage == "truncate shard":
        shard = converted / "obs" / "obs_0000.parquet"
        shard.write_bytes(shard.read_bytes()[:-10])
    else:
        (converted / "obs" / "obs_0000.parquet").unlink()
    result = run("info", converted)
    assert "cells       500" in result.stdout  # the summary still comes
    assert f"  problems    {expected}" in result.stdout, result.stdout
    assert_one_line_error(result, f"{converted} is damaged: 1 problem", f"deltacells validate {converted}")
    json_result = run("info", "--json", converted)
    assert json_result.exit_code == 1
    doc = json.loads(json_result.stdout)
    assert len(doc["problems"]) == 1
    assert f"{doc['problems'][0]['object']}: {doc['problems'][0]['message']}".startswith(expected)
    assert run("validate", "-q", converted).exit_code == 1  # validate agrees


def test_info_on_object_storage_checks_presence_not_sizes(source):
    """Off a local disk, info lists the folders (one request each) but asks no object for its size."""
    import fsspec

    url = "memory://info-presence/ds.deltacells"
    dc.write_deltacells(source, url, tile_size=200, progress=False)
    fs = fsspec.filesystem("memory")
    try:
        result = run("info", url)
        assert result.exit_code == 0, result.output
        assert "its 3 tiles and 1 obs shard are there\n" in result.stdout
        fs.rm("/info-presence/ds.deltacells/tiles/tile_000000.dct")
        result = run("info", "--json", url)
        assert result.exit_code == 1
        doc = json.loads(result.stdout)
        assert doc["sizes_checked"] is False
        assert [p["object"] for p in doc["problems"]] == ["tiles/tile_000000.dct"]
    finally:
        fs.rm("/info-presence", recursive=True)


# ---------------------------------------------------------------------- validate


@needs_conformance
def test_validate_conformance_complete():
    result = run("validate", CONFORMANCE / "complete")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: ")
    assert "11 of 11 tiles" in result.stdout
    assert "4 of 4 obs shards" in result.stdout
    assert "tiles" in result.stderr  # the progress bar
    doc = json.loads(run("validate", "--json", CONFORMANCE / "complete").stdout)
    assert doc["ok"] is True
    assert doc["problems"] == []


@needs_conformance
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("missing_tile", "tiles/tile_000001.dct: tile 1 of 11 is missing"),
        ("counts_inconsistent", "manifest.json: field tile_cells sums to 2600 but field n_cells is 2601"),
        ("obs_shard_tampered", "obs/obs_0000.parquet: SHA-256 is"),
        ("tile_cells_wrong", "tiles/tile_000010.dct: holds 40 cells but manifest.json field tile_cells[10] says 256"),
        ("version_1", "manifest.json: field version is 1"),
        ("wrong_format", "manifest.json: field format is 'something-else'"),
        ("no_manifest", "manifest.json: missing"),
    ],
)
def test_validate_conformance_broken(name, expected):
    result = run("validate", "-q", CONFORMANCE / name)
    assert result.exit_code == 1, result.output
    assert f"  {expected}" in result.stdout
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ")
    doc = json.loads(run("validate", "--json", CONFORMANCE / name).stdout)
    assert doc["ok"] is False
    assert any(f"{p['object']}: {p['message']}".startswith(expected) for p in doc["problems"])


def test_validate_lists_every_problem(h5ad, tmp_path):
    out = tmp_path / "out"
    assert run("convert", "-q", "--tile-size", "100", h5ad, out).exit_code == 0
    tile = out / "tiles" / "tile_000001.dct"
    blob = bytearray(tile.read_bytes())
    blob[-2] ^= 0x40
    tile.write_bytes(bytes(blob))
    last = out / "tiles" / "tile_000004.dct"
    last.write_bytes(last.read_bytes()[:-1])
    result = run("validate", "-q", "-j", "2", out)
    assert result.exit_code == 1
    problems = [line.strip() for line in result.stdout.splitlines() if line.startswith("  ")]
    assert any(p.startswith("tiles/tile_000001.dct: CRC-32") for p in problems), problems
    assert any(p.startswith("tiles/tile_000004.dct: size is") and "tile_bytes[4]" in p for p in problems), problems
    assert "problems" in result.stdout
    assert_one_line_error(result, "not a valid deltacells dataset")


# ---------------------------------------------------------------------- demo


def test_demo_keeps_dataset_and_cache_beside_it(tmp_path):
    out = tmp_path / "demo.deltacells"
    result = run("demo", "--cells", "700", "--genes", "300", "--tile-size", "128", "--level", "3", "--out", out)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "identical to the source: True" in text
    assert text.count("identical: True") == 3
    for fragment in (
        "warm-up",
        "compiled decoding kernels loaded",
        "bytes per nonzero",
        "as gzip h5ad",
        "cells/s",
        "M nonzeros/s",
        "calculate_qc_metrics",
        "highly_variable_genes",
        "pca",
        "of 6 tiles",
        "vs h5ad     the whole AnnData into memory (X, obs and var), each read once untimed, then 5 times each",
        "read_deltacells(path).to_memory()",
        "anndata.read_h5ad(gzip h5ad)",
        "of a CPU",
        "on these generated counts (700 cells x 300 genes",
        "as fast as from the gzip h5ad (best of 5)",
        "benchmarks/bench_decode.py on a real 10x Visium matrix",
    ):
        assert fragment in text, text
    assert "from 1 of 6 tiles" in text  # the consecutive cells
    ds = dc.open_dataset(out)
    assert ds.shape == (700, 300)
    assert ds.n_tiles == 6
    assert ds.manifest.metadata["source"] == "deltacells demo"
    assert ds.manifest.has_obs and ds.manifest.has_gene_order
    assert (tmp_path / "demo.deltacells.obs-cache").is_dir()  # beside --out, not in the user's cache
    assert validate_ok(out)
    # Genes were written by decreasing totals.
    totals = np.asarray(ds.read_rows(dtype=np.int64).sum(axis=0)).ravel()
    assert np.all(np.diff(totals) <= 0)


def validate_ok(path: Path) -> bool:
    from deltacells.validate import validate_dataset

    return validate_dataset(path).ok


def test_demo_in_a_temporary_directory():
    result = run("demo", "--cells", "300", "--genes", "100", "--tile-size", "100", "--level", "1", "--seed", "3")
    assert result.exit_code == 0, result.output
    assert "identical to the source: True" in result.stdout


def test_demo_reports_the_level_a_preset_stands_for(tmp_path):
    """A preset name writes, and reports, the zstd level it stands for (the number, not the name)."""
    from deltacells.codec import ARCHIVE_LEVEL
    from deltacells.demo import format_report, run_demo

    out = tmp_path / "demo.deltacells"
    report = run_demo(n_cells=300, n_genes=100, tile_size=100, level="archive", out=out, seed=3)
    assert report.converted.level == ARCHIVE_LEVEL
    assert dc.open_dataset(out).manifest.zstd_level == ARCHIVE_LEVEL
    assert any(f"zstd level {ARCHIVE_LEVEL}," in line for line in format_report(report))


def test_demo_compares_the_same_reads_in_turn_after_an_untimed_one(tmp_path, monkeypatch):
    """Against the gzip h5ad, both sides make the whole AnnData in memory; untimed once, then in turn, best kept."""
    import anndata

    from deltacells.demo import _head_to_head

    path, h5ad = tmp_path / "ds", tmp_path / "ds.h5ad"
    source = synthetic_counts(300, 100, seed=2)
    source.write_deltacells(path, progress=False)
    source.write_h5ad(h5ad, compression="gzip")
    calls = []
    read_deltacells, read_h5ad = _head_to_head.read_deltacells, anndata.read_h5ad

    def ours(*args, **kwargs):
        calls.append("deltacells")
        return read_deltacells(*args, **kwargs)

    def theirs(*args, **kwargs):
        calls.append("h5ad")
        return read_h5ad(*args, **kwargs)

    monkeypatch.setattr(_head_to_head, "read_deltacells", ours)
    monkeypatch.setattr(anndata, "read_h5ad", theirs)
    result = _head_to_head.compare_whole_reads(path, h5ad, cache_dir=tmp_path / "cache", threads=1, rounds=3)
    assert calls == ["deltacells", "h5ad"] * 4
    assert (result.rounds, result.threads) == (3, 1)
    assert result.speedup == result.h5ad_seconds / result.deltacells_seconds
    assert result.h5ad_cpu_share > 0 and result.usable_cpus >= 1


@pytest.mark.parametrize(("share", "busy"), [(0.97, False), (0.45, True)])
def test_demo_says_when_other_work_made_its_timings_noisy(share, busy):
    from deltacells.demo import ReadComparison
    from deltacells.demo._format import _comparison

    comparison = ReadComparison(
        rounds=5, deltacells_seconds=0.1, h5ad_seconds=0.25, threads=2, usable_cpus=2, h5ad_cpu_share=share
    )
    assert comparison.busy is busy
    lines = _comparison(comparison)
    assert "deltacells 2.50x as fast" in lines[2]
    assert f"the h5ad reads had {share:.0%} of a CPU" in lines[3]
    assert ("these timings are noisy" in lines[3]) is busy


@pytest.mark.parametrize("cold", [True, False])
def test_demo_says_it_compiles_before_it_starts(monkeypatch, cold):
    """On a machine where the kernels were never compiled, the wait is announced first (on stderr)."""
    import deltacells._kernel_loading
    import deltacells.demo

    events = []
    monkeypatch.setattr(deltacells._kernel_loading, "kernels_to_compile", lambda: ["decode_chunk"] if cold else [])

    def run_demo(**options):
        events.append("demo started")
        msg = "stop here"
        raise dc.errors.DemoMismatchError(msg)

    monkeypatch.setattr(deltacells.demo, "run_demo", run_demo)
    result = run("demo", "--cells", "300")
    assert events == ["demo started"]
    announced = "compiles deltacells' decoding kernels" in result.stderr
    assert announced == cold
    if cold:
        assert result.stderr.index("compiles") < result.stderr.index("error: stop here")


def test_demo_reports_a_mismatch_as_one_error_line(monkeypatch):
    from deltacells.demo import _read
    from deltacells.errors import DeltaCellsError, DemoMismatchError

    assert issubclass(DemoMismatchError, DeltaCellsError)
    monkeypatch.setattr(_read, "same_matrix", lambda a, b: False)  # as if X read back differed
    result = run("demo", "--cells", "300", "--genes", "100", "--tile-size", "100", "--level", "1")
    assert_one_line_error(result, "differs from what was written", "X identical: False", "bug in deltacells")
    assert result.stdout == ""  # the report is printed whole or not at all


# ---------------------------------------------------------------------- Ctrl-C


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def assert_interrupted(result: Result, command: str, *fragments: str) -> None:
    """Exit status 130 and one line saying what was stopped and what it leaves: not click's bare "Aborted!"."""
    assert result.exit_code == 130, result.output
    assert "Aborted!" not in result.output
    assert "Traceback" not in result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"interrupted: deltacells {command} stopped (Ctrl-C); "), result.stderr
    for fragment in fragments:
        assert fragment in line, line


@pytest.mark.parametrize(
    ("options", "leaves"),
    [
        ((), "was not written (what had been written is removed); run the same command again"),
        (("--overwrite",), "is as it was (an overwrite replaces it only once the new one is complete)"),
        (("--append",), "has all of {h5ad}'s cells or none of them (an append is one atomic commit"),
    ],
    ids=["new", "overwrite", "append"],
)
def test_an_interrupted_convert_says_what_it_leaves(h5ad, tmp_path, monkeypatch, options, leaves):
    import deltacells.io

    out = tmp_path / "out"
    if options:
        assert run("convert", "-q", h5ad, out).exit_code == 0
    monkeypatch.setattr(deltacells.io, "write_deltacells", interrupt)
    result = run("convert", "-q", *options, h5ad, out)
    assert_interrupted(result, "convert", str(out), leaves.format(h5ad=h5ad))


def test_an_interrupted_reading_command_changed_nothing(h5ad, tmp_path, monkeypatch):
    import deltacells.cli._info
    import deltacells.validate

    out = tmp_path / "out"
    assert run("convert", "-q", h5ad, out).exit_code == 0
    monkeypatch.setattr(deltacells.cli._info, "dataset_info", interrupt)
    assert_interrupted(run("info", out), "info", "it only reads: nothing was changed")
    monkeypatch.setattr(deltacells.validate, "validate_dataset", interrupt)
    assert_interrupted(run("validate", out), "validate", "it only reads: nothing was changed")


@pytest.mark.parametrize("keep", [False, True])
def test_an_interrupted_demo_says_what_it_keeps(tmp_path, monkeypatch, keep):
    import deltacells.demo

    monkeypatch.setattr(deltacells.demo, "run_demo", interrupt)
    out = tmp_path / "demo.deltacells"
    result = run("demo", *(("--out", out) if keep else ()))
    if keep:
        assert_interrupted(result, "demo", f"{out} holds a complete dataset or none")
    else:
        assert_interrupted(result, "demo", "nothing is kept (its temporary directory is removed)")


#: Runs the command line in a process that sends itself SIGINT (Ctrl-C) once the conversion has written its first
#: block of cells: a real signal, at a point where tiles are on disk.
_SIGINT_AFTER_THE_FIRST_BLOCK = """
import os, signal, sys
# As at a terminal: a process started in the background by a shell without job control (a detached or CI run)
# inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
from deltacells.core import DatasetWriter
from deltacells.cli import main

write = DatasetWriter.write

def write_then_interrupt(self, block):
    write(self, block)
    os.kill(os.getpid(), signal.SIGINT)

DatasetWriter.write = write_then_interrupt
sys.argv[0] = "deltacells"
main()
"""


def test_ctrl_c_during_a_conversion_removes_what_it_wrote(h5ad, tmp_path):
    """SIGINT mid-write: status 130, the message, and nothing left at OUT (the writer aborts)."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", _SIGINT_AFTER_THE_FIRST_BLOCK, "convert", "-q", "--tile-size", "50", h5ad, out],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "DELTACELLS_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"interrupted: deltacells convert stopped (Ctrl-C); {out} was not written (what had been written is "
        "removed); run the same command again"
    )
    assert "Traceback" not in proc.stderr
    assert not out.exists()


# ---------------------------------------------------------------------- what is a user error


def test_a_bug_shows_its_traceback(h5ad, tmp_path, monkeypatch):
    """Only deltacells' own errors and OS errors naming their file are one-line messages: anything else is a bug."""
    import deltacells.io

    def broken(*args, **kwargs):
        msg = "an internal invariant broke"
        raise RuntimeError(msg)

    monkeypatch.setattr(deltacells.io, "write_deltacells", broken)
    result = run("convert", "-q", h5ad, tmp_path / "out")
    assert isinstance(result.exception, RuntimeError)
    assert "error: " not in result.stderr


def test_a_located_os_error_is_one_line(h5ad, tmp_path, monkeypatch):
    import deltacells.io

    def denied(adata, path, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(deltacells.io, "write_deltacells", denied)
    assert_one_line_error(run("convert", "-q", h5ad, tmp_path / "out"), "Permission denied", "out")


def test_an_unreadable_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.h5ad"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    assert_one_line_error(run("convert", "-q", "--format", "h5ad", bad, tmp_path / "out"), "bad.h5ad", "h5ad")


def test_convert_defaults_are_the_writers() -> None:
    """``deltacells convert`` writes with write_deltacells' own defaults (tile size, chunks a tile)."""
    from deltacells.cli import convert
    from deltacells.codec import DEFAULT_N_CHUNKS
    from deltacells.tiles import DEFAULT_TILE_SIZE

    defaults = {param.name: param.default for param in convert.params}
    assert defaults["tile_size"] == DEFAULT_TILE_SIZE
    assert defaults["n_chunks"] == DEFAULT_N_CHUNKS
