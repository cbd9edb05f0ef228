"""``validate_dataset`` on ``anndata.zarr``: appended parts, raw, and elements that cannot be read.

Each damage is one problem naming the element (or the manifest field) at fault; the rest is still checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anndata as ad
import numpy as np
import pytest

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.format import EXTRAS_NAME
from deltacells.validate import ValidationReport, validate_dataset

N_CELLS, N_GENES, N_APPENDED = 200, 30, 20


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every test here must leave the default obs cache empty."""


def _with_embedding(adata: ad.AnnData, seed: int) -> ad.AnnData:
    adata.obsm["X_emb"] = np.random.default_rng(seed).random((adata.n_obs, 2)).astype(np.float32)
    return adata


@pytest.fixture(scope="module")
def appended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset with an embedding, grown by one append (its embedding in ``anndata.zarr/parts/000001``)."""
    path = tmp_path_factory.mktemp("extras") / "appended"
    deltacells.write_deltacells(_with_embedding(synthetic_counts(N_CELLS, N_GENES, seed=1), 1), path, progress=False)
    more = _with_embedding(synthetic_counts(N_APPENDED, N_GENES, seed=2), 2)
    more.obs_names = more.obs_names + "-2"
    deltacells.write_deltacells(more, path, append=True, progress=False)
    return path


@pytest.fixture(scope="module")
def with_raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset whose X was normalised and whose raw holds the counts (written from X: raw is an element)."""
    path = tmp_path_factory.mktemp("extras") / "with_raw"
    adata = synthetic_counts(N_CELLS, N_GENES, seed=3)
    adata.raw = adata.copy()
    deltacells.write_deltacells(adata, path, progress=False)
    return path


@pytest.fixture(scope="module")
def from_raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset whose tiles hold raw's counts (``raw=True``), X (fewer genes) an element beside them."""
    path = tmp_path_factory.mktemp("extras") / "from_raw"
    adata = synthetic_counts(N_CELLS, N_GENES, seed=5)
    adata.raw = adata.copy()
    adata = adata[:, : N_GENES - 5].copy()
    deltacells.write_deltacells(adata, path, raw=True, progress=False)
    return path


def _copy(path: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(path, tmp_path / path.name))


def _messages(report: ValidationReport) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for problem in report.problems:
        found.setdefault(problem.object, []).append(problem.message)
    return found


def _edit_manifest(path: Path, edit) -> None:
    doc = json.loads((path / "manifest.json").read_text())
    edit(doc)
    (path / "manifest.json").write_text(json.dumps(doc))


def test_the_fixtures_are_valid(appended: Path, with_raw: Path, from_raw: Path) -> None:
    for path in (appended, with_raw, from_raw):
        report = validate_dataset(path)
        assert report.ok, (path.name, report.problems)
    assert (appended / EXTRAS_NAME / "parts" / "000001" / "obsm" / "X_emb").is_dir()
    entry = json.loads((from_raw / "manifest.json").read_text())["metadata"]["deltacells"]["anndata"]
    assert entry["counts"] == "raw"


def test_parts_that_hold_every_cell_are_a_manifest_problem(appended: Path, tmp_path: Path) -> None:
    path = _copy(appended, tmp_path)

    def grow_parts(doc: dict) -> None:
        doc["metadata"]["deltacells"]["anndata"]["parts"][0]["n_cells"] = N_CELLS + N_APPENDED

    _edit_manifest(path, grow_parts)
    messages = _messages(validate_dataset(path))
    total = N_CELLS + N_APPENDED
    assert messages == {"manifest.json": [f"metadata.deltacells.anndata.parts hold {total} cells of the {total}"]}


def test_a_missing_part_group_is_named_and_the_base_elements_still_checked(appended: Path, tmp_path: Path) -> None:
    path = _copy(appended, tmp_path)
    shutil.rmtree(path / EXTRAS_NAME / "parts" / "000001")
    shutil.rmtree(path / EXTRAS_NAME / "obsm" / "X_emb")  # the base's embedding gone as well
    messages = _messages(validate_dataset(path))
    part = f"{EXTRAS_NAME}/parts/000001"
    assert set(messages) == {part, f"{EXTRAS_NAME}/obsm/X_emb"}
    (message,) = messages[part]
    assert message.startswith("cannot be opened as a zarr group")


def test_a_part_element_of_the_wrong_length_is_named_in_its_part(appended: Path, tmp_path: Path) -> None:
    path = _copy(appended, tmp_path)
    array = path / EXTRAS_NAME / "parts" / "000001" / "obsm" / "X_emb" / ".zarray"
    meta = json.loads(array.read_text())
    meta["shape"][0] = N_APPENDED + 1
    array.write_text(json.dumps(meta))
    messages = _messages(validate_dataset(path))
    where = f"{EXTRAS_NAME}/parts/000001/obsm/X_emb"
    assert list(messages) == [where]
    assert messages[where] == [
        f"has shape ({N_APPENDED + 1}, 2), where the dataset's (or its part's) cells and genes give ({N_APPENDED},)"
    ]


def test_an_element_whose_metadata_is_not_json_cannot_be_read(appended: Path, tmp_path: Path) -> None:
    path = _copy(appended, tmp_path)
    (path / EXTRAS_NAME / "obsm" / "X_emb" / ".zarray").write_text("{not json")
    messages = _messages(validate_dataset(path))
    (message,) = messages[f"{EXTRAS_NAME}/obsm/X_emb"]
    assert message.startswith("cannot be read (")


def test_raw_without_its_matrix_cannot_be_read(with_raw: Path, tmp_path: Path) -> None:
    path = _copy(with_raw, tmp_path)
    shutil.rmtree(path / EXTRAS_NAME / "raw" / "X")
    messages = _messages(validate_dataset(path))
    (message,) = messages[f"{EXTRAS_NAME}/raw"]
    assert message.startswith("cannot be read (KeyError")


def test_raw_whose_matrix_has_other_genes_than_its_var(with_raw: Path, tmp_path: Path) -> None:
    path = _copy(with_raw, tmp_path)
    attrs = path / EXTRAS_NAME / "raw" / "X" / ".zattrs"
    meta = json.loads(attrs.read_text())
    meta["shape"] = [N_CELLS, N_GENES - 1]
    attrs.write_text(json.dumps(meta))
    messages = _messages(validate_dataset(path))
    assert messages == {f"{EXTRAS_NAME}/raw": [f"X has {N_GENES - 1} columns for {N_GENES} genes in var"]}


def test_counts_from_raw_without_the_anndatas_var(from_raw: Path, tmp_path: Path) -> None:
    """The genes of X come from ``anndata.zarr/var`` when the tiles hold raw's: without it, that is the problem."""
    path = _copy(from_raw, tmp_path)
    shutil.rmtree(path / EXTRAS_NAME / "var")
    messages = _messages(validate_dataset(path))
    assert any(m.startswith("cannot be read (") for m in messages[f"{EXTRAS_NAME}/var"]), messages
