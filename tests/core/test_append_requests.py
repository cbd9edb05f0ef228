"""``deltacells.core.append_cells`` refuses requests that do not fit the dataset, and changes nothing then.

An ``AppendRequest`` of another number of genes, without obs for a dataset that has obs, whose blocks hold fewer
rows than it announces, or whose obs has another number of rows: each is an ``InvalidValueError`` saying what
differs, and the dataset reads as before (no new version, nothing left behind that ``validate`` would flag).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import deltacells
from deltacells.core import AppendRequest, append_cells, open_dataset
from deltacells.datasets import synthetic_counts
from deltacells.errors import InvalidValueError
from deltacells.storage import open_store
from deltacells.validate import validate_dataset

N_CELLS, N_GENES, TILE, N_NEW = 100, 20, 32, 12


@pytest.fixture
def path(tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    adata = synthetic_counts(N_CELLS, N_GENES, seed=1)
    deltacells.write_deltacells(adata, out, tile_size=TILE, reorder_genes=False, progress=False)
    return out


def _new_cells(n: int = N_NEW) -> tuple[sparse.csr_matrix, pd.DataFrame]:
    adata = synthetic_counts(n, N_GENES, seed=2)
    obs = adata.obs.copy()
    obs.index = [f"new{i}" for i in range(n)]
    return sparse.csr_matrix(adata.X), obs


def _request(**changes) -> AppendRequest:
    matrix, obs = _new_cells()
    fields = {"n_cells": N_NEW, "blocks": lambda: [matrix], "columns": np.arange(N_GENES), "obs": obs}
    return AppendRequest(**{**fields, **changes})


def _unchanged(path: Path) -> None:
    dataset = open_dataset(path)
    assert dataset.n_cells == N_CELLS
    report = validate_dataset(path)
    assert report.ok, report.problems


def test_a_fitting_request_appends_its_cells(path: Path) -> None:
    matrix, _ = _new_cells()
    manifest = append_cells(open_store(path), _request(), single_writer=True)
    assert manifest.n_cells == N_CELLS + N_NEW
    grown = open_dataset(path)
    np.testing.assert_array_equal(grown.read_rows(slice(N_CELLS, None)).toarray(), matrix.toarray())
    assert validate_dataset(path).ok


def test_cells_of_another_number_of_genes(path: Path) -> None:
    with pytest.raises(InvalidValueError, match=f"the new cells have {N_GENES - 1} genes; the dataset has {N_GENES}"):
        append_cells(open_store(path), _request(columns=np.arange(N_GENES - 1)), single_writer=True)
    _unchanged(path)


def test_cells_without_obs_for_a_dataset_with_obs(path: Path) -> None:
    with pytest.raises(InvalidValueError, match="the dataset has obs: the new cells need theirs"):
        append_cells(open_store(path), _request(obs=None), single_writer=True)
    _unchanged(path)


def test_blocks_that_hold_fewer_rows_than_announced(path: Path) -> None:
    matrix, _ = _new_cells()
    request = _request(n_cells=N_NEW + 3, blocks=lambda: [matrix[:5], matrix[5:]])
    with pytest.raises(InvalidValueError, match=f"the new cells' blocks held {N_NEW} rows, not {N_NEW + 3}"):
        append_cells(open_store(path), request, single_writer=True)
    _unchanged(path)


def test_obs_of_another_number_of_rows(path: Path) -> None:
    _, obs = _new_cells()
    with pytest.raises(InvalidValueError, match=f"obs has {N_NEW - 2} rows for {N_NEW} new cells"):
        append_cells(open_store(path), _request(obs=obs.iloc[: N_NEW - 2]), single_writer=True)
    _unchanged(path)
