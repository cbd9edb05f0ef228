"""Appending cells (DECISIONS.md 17): the grown dataset equals ``anndata.concat`` of the parts, every time.

Appends of 1, tile_size - 1, tile_size and many tiles' worth of cells, to a dataset whose last tile is partial
or full, with obs (categories that grow, numbers, strings, booleans) and without obs columns; genes in another
order; per-cell elements (obsm, obsp block-diagonally); the errors for cells that do not fit; a commit left
pending by a killed writer, read as the new version and finished by the next (readers that opened the old
version: ``tests/storage/test_readers_during_appends.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.core import _commit as commit_module
from deltacells.core import open_dataset
from deltacells.errors import FormatError, InvalidValueError
from deltacells.format import APPEND_PREFIX, MANIFEST_NAME

TILE = 16
N_GENES = 40


def batch(n: int, start: int, *, seed: int, labels: tuple[str, ...] = ("a", "b"), obsm: bool = False) -> ad.AnnData:
    """``n`` cells named ``c<start>``..., raw counts over genes ``g0``..., obs of every kind obs stores."""
    rng = np.random.default_rng(seed)
    counts = sparse.random(n, N_GENES, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    counts.data = rng.integers(1, 50, counts.nnz).astype(np.float32)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(labels, n)),
            "n_counts": rng.integers(0, 1000, n),
            "score": rng.random(n),
            "barcode": [f"bc{start + i}" for i in range(n)],
            "flag": rng.random(n) > 0.5,
        },
        index=[f"c{start + i}" for i in range(n)],
    )
    adata = ad.AnnData(X=counts.astype(np.float32), obs=obs, var=pd.DataFrame(index=[f"g{i}" for i in range(N_GENES)]))
    if obsm:
        adata.obsm["X_emb"] = rng.random((n, 3)).astype(np.float32)
    return adata


def assert_same_cells(path: Path, expected: ad.AnnData, *, obsm: bool = False) -> None:
    """The dataset read back (in memory) has expected's counts, obs names, obs values and obsm."""
    got = deltacells.read_deltacells(path).to_memory()
    assert got.shape == expected.shape
    assert list(got.obs_names) == list(expected.obs_names)
    assert list(got.var_names) == list(expected.var_names)
    np.testing.assert_array_equal(got.X.toarray(), expected.X.toarray())
    for column in expected.obs.columns:
        np.testing.assert_array_equal(
            got.obs[column].astype(object).to_numpy(), expected.obs[column].astype(object).to_numpy(), err_msg=column
        )
    if obsm:
        np.testing.assert_array_equal(got.obsm["X_emb"], expected.obsm["X_emb"])


@pytest.mark.parametrize("first", [TILE * 3, TILE * 3 - 5], ids=["last-tile-full", "last-tile-partial"])
@pytest.mark.parametrize("added", [1, TILE - 1, TILE, TILE * 5 + 3], ids=["1", "tile-1", "tile", "many-tiles"])
def test_appends_equal_concat(tmp_path: Path, first: int, added: int) -> None:
    path = tmp_path / "ds"
    parts = [batch(first, 0, seed=1, obsm=True), batch(added, first, seed=2, labels=("b", "c"), obsm=True)]
    deltacells.write_deltacells(parts[0], path, tile_size=TILE, obs_tiles_per_file=2, progress=False)
    deltacells.write_deltacells(parts[1], path, append=True, progress=False)
    parts.append(batch(TILE + 2, first + added, seed=3, labels=("d",), obsm=True))
    deltacells.write_deltacells(parts[2], path, append=True, progress=False)

    assert_same_cells(path, ad.concat(parts), obsm=True)
    manifest = open_dataset(path).manifest
    assert (manifest.tile_cells[:-1] == TILE).all()
    assert manifest.n_obs_shards == -(-manifest.n_tiles // 2)
    assert deltacells.read_deltacells(path).obs["cell_type"].cat.categories.tolist() == ["a", "b", "c", "d"]
    assert not [p for p in path.iterdir() if p.name.startswith(APPEND_PREFIX)]
    from deltacells.validate import validate_dataset

    assert validate_dataset(path).ok


def test_genes_in_another_order_and_a_view(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first, second = batch(50, 0, seed=1), batch(30, 50, seed=2)
    deltacells.write_deltacells(first, path, tile_size=TILE, progress=False)
    shuffled = second[:, np.random.default_rng(0).permutation(N_GENES)]  # a view, genes shuffled
    deltacells.write_deltacells(shuffled, path, append=True, progress=False)
    assert_same_cells(path, ad.concat([first, second]))
    stored = open_dataset(path)
    assert stored.var_names() == open_dataset(path).var_names()  # gene order and var kept


def test_without_obs_columns(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    parts = [batch(20, 0, seed=1), batch(TILE, 20, seed=2)]
    deltacells.write_deltacells(parts[0], path, tile_size=TILE, obs_columns=[], progress=False)
    deltacells.write_deltacells(parts[1], path, append=True, obs_columns=[], progress=False)
    expected = ad.concat(parts)
    expected.obs = expected.obs[[]]
    assert_same_cells(path, expected)


def test_a_dataset_without_obs(tmp_path: Path) -> None:
    from deltacells.core import DatasetWriter

    path = tmp_path / "ds"
    first, second = batch(20, 0, seed=1), batch(9, 20, seed=2)
    with DatasetWriter(path, N_GENES, tile_size=TILE, var_names=list(first.var_names)) as writer:
        writer.write(first.X)
    deltacells.write_deltacells(second, path, append=True, progress=False)
    got = deltacells.read_deltacells(path)
    np.testing.assert_array_equal(got.X[np.arange(29)].toarray(), sparse.vstack([first.X, second.X]).toarray())


def test_append_creates_a_missing_dataset(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first = batch(20, 0, seed=1)
    deltacells.write_deltacells(first, path, append=True, tile_size=TILE, progress=False)
    assert_same_cells(path, first)


def test_graphs_only_block_diagonally(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    parts = [batch(20, 0, seed=1), batch(7, 20, seed=2)]
    for part in parts:
        graph = sparse.random(part.n_obs, part.n_obs, density=0.2, format="csr", random_state=0)
        part.obsp["connectivities"] = graph
    deltacells.write_deltacells(parts[0], path, tile_size=TILE, progress=False)
    with pytest.raises(InvalidValueError, match="obsp='block_diagonal'"):
        deltacells.write_deltacells(parts[1], path, append=True, progress=False)
    deltacells.write_deltacells(parts[1], path, append=True, obsp="block_diagonal", progress=False)
    got = deltacells.read_deltacells(path).to_memory()
    expected = ad.concat(parts, pairwise=True)
    np.testing.assert_allclose(got.obsp["connectivities"].toarray(), expected.obsp["connectivities"].toarray())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a[:, 1:], "genes differ from the dataset's: 1 of the dataset's are missing"),
        (lambda a: _renamed(a, "c0"), "not unique in the grown dataset"),
        (lambda a: _without(a, "score"), r"missing \['score'\]"),
        (lambda a: _with(a, "score", ["x"] * a.n_obs), "'score' is stored as numeric"),
        (lambda a: _with(a, "flag", a.obs["n_counts"]), r"'flag' is stored as bool \(bool\); anndata.concat .* int64"),
        (lambda a: _with_obsm(a), "stores no other elements of the AnnData"),
    ],
    ids=["genes", "names", "columns", "kind", "type", "obsm"],
)
def test_cells_that_do_not_fit(tmp_path: Path, change: object, message: str) -> None:
    path = tmp_path / "ds"
    deltacells.write_deltacells(batch(20, 0, seed=1), path, tile_size=TILE, progress=False)
    before = (path / MANIFEST_NAME).read_bytes()
    new = change(batch(9, 20, seed=2))  # type: ignore[operator]
    with pytest.raises((InvalidValueError, TypeError), match=message):
        deltacells.write_deltacells(new, path, append=True, progress=False)
    assert (path / MANIFEST_NAME).read_bytes() == before
    assert not [p for p in path.iterdir() if p.name.startswith(APPEND_PREFIX)]


def test_ordered_categories_cannot_grow(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first, second = batch(20, 0, seed=1), batch(5, 20, seed=2, labels=("z",))
    for part in (first, second):
        part.obs["cell_type"] = part.obs["cell_type"].cat.as_ordered()
    deltacells.write_deltacells(first, path, tile_size=TILE, progress=False)
    with pytest.raises(InvalidValueError, match="ordered categorical"):
        deltacells.write_deltacells(second, path, append=True, progress=False)


def test_many_categories_widen_the_codes(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first, second = batch(100, 0, seed=1), batch(60, 100, seed=2)
    first.obs["cell_type"] = pd.Categorical([f"t{i}" for i in range(100)])  # 160 categories: int8 no more
    second.obs["cell_type"] = pd.Categorical([f"u{i}" for i in range(60)])
    deltacells.write_deltacells(first, path, tile_size=TILE, obs_tiles_per_file=1, progress=False)
    deltacells.write_deltacells(second, path, append=True, progress=False)
    schema = json.loads((path / "obs" / "schema.json").read_text())
    assert next(c for c in schema["columns"] if c["name"] == "cell_type")["arrow_type"] == "int16"
    assert_same_cells(path, ad.concat([first, second]))


def test_append_and_overwrite_exclude_each_other(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="pass one of them"):
        deltacells.write_deltacells(batch(5, 0, seed=1), tmp_path / "ds", append=True, overwrite=True)


def test_a_pending_commit_reads_as_the_new_version_and_is_finished_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ds"
    parts = [batch(20, 0, seed=1, obsm=True), batch(9, 20, seed=2, obsm=True)]
    deltacells.write_deltacells(parts[0], path, tile_size=TILE, progress=False)

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # the writer dies right after its commit, before moving anything

    monkeypatch.setattr(commit_module, "roll_forward", killed)
    with pytest.raises(KeyboardInterrupt):
        deltacells.write_deltacells(parts[1], path, append=True, progress=False)
    monkeypatch.undo()
    manifest = json.loads((path / MANIFEST_NAME).read_text())
    assert "staging" in manifest["metadata"]["deltacells"]["commit"]  # committed, pending
    assert_same_cells(path, ad.concat(parts), obsm=True)  # read through the staging prefix

    parts.append(batch(5, 29, seed=3, obsm=True))
    deltacells.write_deltacells(parts[2], path, append=True, progress=False)  # finishes it first
    assert_same_cells(path, ad.concat(parts), obsm=True)
    assert not [p for p in path.iterdir() if p.name.startswith(APPEND_PREFIX)]
    assert json.loads((path / MANIFEST_NAME).read_text())["metadata"]["deltacells"]["commit"]["version"] == 2


def _renamed(adata: ad.AnnData, name: str) -> ad.AnnData:
    adata.obs_names = [name, *adata.obs_names[1:]]
    return adata


def _without(adata: ad.AnnData, column: str) -> ad.AnnData:
    del adata.obs[column]
    return adata


def _with(adata: ad.AnnData, column: str, values: object) -> ad.AnnData:
    adata.obs[column] = values
    return adata


def _with_obsm(adata: ad.AnnData) -> ad.AnnData:
    adata.obsm["X_new"] = np.zeros((adata.n_obs, 2))
    return adata


def test_an_append_of_no_cell_commits_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first = batch(20, 0, seed=1)
    deltacells.write_deltacells(first, path, tile_size=TILE, progress=False)
    before = (path / MANIFEST_NAME).read_bytes()
    deltacells.write_deltacells(batch(5, 20, seed=2)[:0], path, append=True, progress=False)
    assert (path / MANIFEST_NAME).read_bytes() == before  # no new version
    assert not [p for p in path.iterdir() if p.name.startswith(APPEND_PREFIX)]
    assert_same_cells(path, first)


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_an_append_to_a_damaged_dataset_is_refused_and_writes_nothing(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "ds"
    deltacells.write_deltacells(batch(40, 0, seed=1), path, tile_size=TILE, progress=False)
    first_tile = path / "tiles" / "tile_000000.dct"
    if damage == "truncated":
        first_tile.write_bytes(first_tile.read_bytes()[:100])
    else:
        first_tile.unlink()
    before = (path / MANIFEST_NAME).read_bytes()
    with pytest.raises(FormatError, match=r"damaged dataset: tiles/tile_000000\.dct.*deltacells validate"):
        deltacells.write_deltacells(batch(5, 40, seed=2), path, append=True, progress=False)
    assert (path / MANIFEST_NAME).read_bytes() == before
    assert not [p for p in path.iterdir() if p.name.startswith(APPEND_PREFIX)]
