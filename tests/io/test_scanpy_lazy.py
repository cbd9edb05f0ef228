"""scanpy and anndata on the whole lazy AnnData: the table in the user guide (docs/user-guide/reading.md), tested.

Each call in the table either works on the lazy AnnData or fails at once with an error that names
``.to_memory()``; and each works on ``adata[cells].to_memory()``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import pandas as pd
import pytest
import scanpy as sc

import deltacells
from deltacells.datasets import synthetic_counts

GUIDE = Path(__file__).parents[2] / "docs" / "user-guide" / "reading.md"

#: What each row of the table runs.
CALLS: dict[str, Callable[[ad.AnnData], Any]] = {
    "sc.pp.calculate_qc_metrics": lambda a: sc.pp.calculate_qc_metrics(a, percent_top=(10,), inplace=True),
    "sc.pp.filter_cells": lambda a: sc.pp.filter_cells(a, min_genes=5),
    "sc.pp.filter_genes": lambda a: sc.pp.filter_genes(a, min_cells=5),
    "sc.pp.normalize_total": lambda a: sc.pp.normalize_total(a),
    "sc.pp.log1p": lambda a: sc.pp.log1p(a),
    "sc.pp.highly_variable_genes": lambda a: sc.pp.highly_variable_genes(a, n_top_genes=50),
    "sc.pp.scale": lambda a: sc.pp.scale(a, zero_center=False),
    "sc.pp.pca": lambda a: sc.pp.pca(a, n_comps=5),
    'sc.pp.highly_variable_genes(flavor="seurat_v3")': lambda a: sc.pp.highly_variable_genes(
        a, flavor="seurat_v3", n_top_genes=50
    ),
    "sc.tl.rank_genes_groups": lambda a: sc.tl.rank_genes_groups(a, "cell_type"),
    "adata.to_df()": lambda a: a.to_df(),
    "anndata.concat": lambda a: ad.concat([a, a], index_unique="-"),
    "selecting cells by obs (`adata[adata.obs[...] == ...]`)": lambda a: a[a.obs["cell_type"] == "type_B"].X,
    'plotting obs columns (`sc.pl.violin(adata, "total_counts")`...)': lambda a: sc.pl.violin(
        a, "total_counts", show=False
    ),
}


def table() -> dict[str, str]:
    """``{call: what happens on the lazy AnnData}`` from the guide's table."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## scanpy on the lazy AnnData") :]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0] not in ("call", "---"):
            rows[re.sub(r"^`([^`]*)`$", r"\1", cells[0])] = cells[1]
        elif rows and not line.startswith("|"):
            break
    return rows


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scanpy-lazy") / "ds"
    deltacells.write_deltacells(synthetic_counts(400, 150, seed=4), root, progress=False, tile_size=128)
    return root


def test_the_table_lists_every_call() -> None:
    assert set(table()) == set(CALLS)


@pytest.mark.parametrize("call", list(CALLS))
def test_call_on_the_lazy_anndata(call: str, path: Path, tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    adata = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    adata.obs["total_counts"] = adata.obs["total_counts"].astype("float64")
    expected = table()[call]
    if expected.startswith("error naming"):
        with pytest.raises((TypeError, ValueError, NotImplementedError)) as info:
            CALLS[call](adata)
        assert ".to_memory()" in str(info.value), str(info.value)
        in_memory = adata[adata.obs["cell_type"] != "nothing"].to_memory()
        if call == "sc.pp.highly_variable_genes":
            sc.pp.log1p(in_memory)  # its default flavor expects log counts
        if call == "sc.tl.rank_genes_groups":
            sc.pp.log1p(in_memory)
        CALLS[call](in_memory)  # the documented way works
    else:
        assert expected.startswith("works")
        got = CALLS[call](adata)
        if call == "adata.to_df()":
            pd.testing.assert_frame_equal(got, adata.to_memory().to_df())
