"""The reader and ``validate`` apply the same rules: on every conformance vector and broken dataset, the reader
fails exactly when validation finds a problem, and the reader's error is one of the problems validation lists.

Tile vectors are wrapped in a one-tile dataset whose manifest agrees with what the tile's header claims, so
that the only rule a bad vector breaks is the one it was made to break.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import deltacells
from deltacells.codec import TileHeader
from deltacells.errors import DeltaCellsError
from deltacells.format import MANIFEST_NAME, Manifest, tile_path
from deltacells.obs import ObsStore
from deltacells.validate import validate_dataset

CONFORMANCE = (Path(__file__).parents[1] / ".." / "shared" / "conformance").resolve()
if not CONFORMANCE.is_dir():
    pytest.skip(f"conformance vectors not found at {CONFORMANCE}", allow_module_level=True)

DATASETS = sorted(p for p in (CONFORMANCE / "datasets").iterdir() if p.is_dir())
TILES = sorted((CONFORMANCE / "valid").glob("*.dct")) + sorted((CONFORMANCE / "invalid").glob("*.dct"))


def read_everything(path: Path, cache: Path) -> None:
    """Everything a reader can be asked for: every cell, the gene order and names, var, every obs column."""
    dataset = deltacells.open_dataset(path)
    dataset.read_rows(dtype=np.int64)
    dataset.gene_permutation()
    dataset.var_names()
    dataset.var_table()
    if dataset.manifest.has_obs:
        ObsStore(dataset.store, dataset.manifest, cache_dir=cache).to_dataframe()


def reader_error(path: Path, cache: Path) -> DeltaCellsError | None:
    try:
        read_everything(path, cache)
    except DeltaCellsError as exc:
        return exc
    return None


def assert_agree(path: Path, cache: Path) -> None:
    error = reader_error(path, cache)
    report = validate_dataset(path, threads=1)
    if error is None:
        assert report.ok, f"the reader reads {path.name}, but validate finds:\n{report}"
        return
    assert not report.ok, f"the reader fails on {path.name} ({error}), but validate finds nothing"
    listed = [f"{path}/{problem}" for problem in report.problems]
    assert str(error) in listed or str(error).startswith(f"{path}: no {MANIFEST_NAME}"), (
        f"the reader's error on {path.name} is not among validate's problems:\n  {error}\n" + "\n".join(listed)
    )


@pytest.mark.parametrize("dataset", DATASETS, ids=[p.name for p in DATASETS])
def test_conformance_datasets(dataset: Path, tmp_path: Path) -> None:
    assert_agree(dataset, tmp_path / "cache")


def one_tile_dataset(blob: bytes, root: Path) -> Path:
    """A dataset holding ``blob`` as its only tile, with a manifest that agrees with the tile's header."""
    try:
        header = TileHeader.unpack(blob)
        n_cells, nnz, n_genes = header.n_cells, header.nnz, max(1, header.n_genes)
    except deltacells.FormatError:
        n_cells, nnz, n_genes = 1, 0, 1
    nnz = min(nnz, n_cells * n_genes)  # a tile of no cells makes a manifest both sides refuse
    manifest = Manifest(
        n_cells=n_cells,
        n_genes=n_genes,
        tile_size=max(1, n_cells),
        tile_cells=np.array([n_cells]),
        tile_nnz=np.array([nnz]),
        tile_bytes=np.array([max(64, len(blob))]),
        n_chunks=1,
        zstd_level=1,
    )
    (root / "tiles").mkdir(parents=True)
    (root / tile_path(0)).write_bytes(blob)
    (root / MANIFEST_NAME).write_text(manifest.to_json())
    return root


@pytest.mark.parametrize("vector", TILES, ids=[f"{p.parent.name}/{p.stem}" for p in TILES])
def test_conformance_tiles(vector: Path, tmp_path: Path) -> None:
    root = one_tile_dataset(vector.read_bytes(), tmp_path / "ds")
    assert_agree(root, tmp_path / "cache")
    if vector.parent.name == "valid" and TileHeader.unpack(vector.read_bytes()).n_cells:
        assert validate_dataset(root).ok
    elif len(vector.read_bytes()) >= 64:  # shorter ones break the manifest's tile_bytes minimum too
        assert not validate_dataset(root).ok


def test_unflagged_file_is_ignored_by_the_reader(tmp_path: Path) -> None:
    """A file the manifest says is absent: the reader never lists, so it never looks; validate reports it."""
    root = tmp_path / "ds"
    shutil.copytree(CONFORMANCE / "datasets" / "complete", root)
    doc = json.loads((root / MANIFEST_NAME).read_text())
    doc["has_var_names"] = False
    (root / MANIFEST_NAME).write_text(json.dumps(doc))
    assert reader_error(root, tmp_path / "cache") is None
    problems = [str(problem) for problem in validate_dataset(root).problems]
    assert problems == ["var_names.txt: present, but manifest.json field has_var_names is false"]


@pytest.mark.parametrize(
    "damage",
    ["gene_order_int64", "gene_order_not_permutation", "var_names_short", "var_table_garbage", "flag_lies"],
)
def test_damaged_sidecars(damage: str, tmp_path: Path) -> None:
    """The optional files: the reader and validate reject the same damage, with the same message."""
    root = tmp_path / "ds"
    shutil.copytree(CONFORMANCE / "datasets" / "complete", root)
    order = np.load(root / "gene_order.npy")
    if damage == "gene_order_int64":
        np.save(root / "gene_order.npy", order.astype(np.int64))
    elif damage == "gene_order_not_permutation":
        np.save(root / "gene_order.npy", np.zeros_like(order))
    elif damage == "var_names_short":
        lines = (root / "var_names.txt").read_text().splitlines()
        (root / "var_names.txt").write_text("\n".join(lines[:-1]) + "\n")
    elif damage == "var_table_garbage":
        (root / "var.parquet").write_bytes(b"not parquet")
    elif damage == "flag_lies":  # var_names.txt promised, not there
        (root / "var_names.txt").unlink()
    assert reader_error(root, tmp_path / "cache") is not None
    assert_agree(root, tmp_path / "cache")
