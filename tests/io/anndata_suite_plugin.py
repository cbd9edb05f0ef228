"""A pytest plugin that runs anndata's own ``tests/test_backed_sparse.py`` with deltacells' lazy X in anndata's place.

Used by ``test_anndata_backed_sparse_suite.py`` (``-p anndata_suite_plugin``, in a pytest of its own run in
anndata's test folder). Only the test run changes:

- ``scipy.sparse.random`` gives integer-valued matrices (``ceil(100 * x)``: the same nonzeros, as counts), since
  deltacells stores raw counts;
- the test module's ``sparse_dataset(group)`` gives, for a CSR group, its matrix written with
  ``deltacells.write_deltacells`` (tiles of 16 cells) and read back lazily (``read_deltacells(...).X``, float64, in
  the original gene order); CSC groups stay anndata's own;
- ``anndata.read_h5ad(path, backed="r")`` of a file whose X is CSR gives ``read_deltacells`` of that file written as
  a deltacells dataset (X lazy; deltacells has no backed mode);
- the parametrizations that test what a deltacells X does not offer are skipped as "n/a" (:data:`NOT_APPLICABLE`).

Each test that used a deltacells X says so; at the end, the outcomes of those and of the others (CSC or dense only)
are written as JSON to ``$DELTACELLS_SUITE_REPORT`` (and printed).
"""

from __future__ import annotations

import itertools
import json
import os
import unittest.mock
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import scipy.sparse

#: What a deltacells X does not offer, by test function of anndata's suite (CSR parametrizations only).
NOT_APPLICABLE = {
    "test_dataset_append_memory": "append: a deltacells X is read-only",
    "test_dataset_append_disk": "append: a deltacells X is read-only",
    "test_append_array_cache_bust": "append, and anndata's private _indptr/_indices/_data",
    "test_wrong_shape": "append: a deltacells X is read-only",
    "test_wrong_formats": "append: a deltacells X is read-only",
    "test_append_overflow_check": "append, and anndata's private _indptr",
    "test_lazy_array_cache": "should_cache_indptr= and the zarr keys anndata's layout reads",
    "test_indptr_cache": "the zarr keys anndata's layout reads",
    "test_data_access": "the zarr keys anndata's layout reads",
}
#: n/a when the parametrization counts calls of anndata's own CSR optimisation.
OPTIMISATION_COUNTED = ("test_consecutive_bool", "should_trigger_optimization")

_COUNTER = itertools.count()
_USED: set[str] = set()
_OUTCOMES: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    for mark in ("zarr_io", "gpu", "array_api"):
        config.addinivalue_line("markers", f"{mark}: anndata's")


def _is_csr(value: Any) -> bool:
    return value == "csr" or value in (scipy.sparse.csr_matrix, scipy.sparse.csr_array)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        params = getattr(getattr(item, "callspec", None), "params", {})
        fmt = params.get("sparse_format", params.get("sparse_class"))
        reason = NOT_APPLICABLE.get(name)
        if name == OPTIMISATION_COUNTED[0] and params.get(OPTIMISATION_COUNTED[1]):
            reason = "counts calls of anndata's private CSR optimisation (get_compressed_vectors_for_slices)"
        if reason and (fmt is None or _is_csr(fmt)):
            item.add_marker(pytest.mark.skip(reason=f"n/a: {reason}"))
            item.user_properties.append(("deltacells", True))


@pytest.fixture(autouse=True)
def _deltacells_x(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import anndata as ad
    from anndata.io import sparse_dataset as anndata_sparse_dataset

    import deltacells

    root = tmp_path_factory.mktemp("deltacells")
    random, read_h5ad = scipy.sparse.random, ad.read_h5ad

    def integer_random(*args: Any, **kwargs: Any) -> Any:
        matrix = random(*args, **kwargs)
        matrix.data = np.ceil(matrix.data * 100)
        return matrix

    def as_deltacells(adata: Any) -> Any:
        path = root / f"{next(_COUNTER)}-{uuid.uuid4().hex[:6]}"
        deltacells.write_deltacells(adata, path, tile_size=16, progress=False)
        if ("deltacells", True) not in request.node.user_properties:
            request.node.user_properties.append(("deltacells", True))
        return deltacells.read_deltacells(path, dtype=np.float64, gene_order="original", cache_dir=root / "cache")

    def sparse_dataset(group: Any, *args: Any, **kwargs: Any) -> Any:
        backed = anndata_sparse_dataset(group, *args, **kwargs)
        if backed.format != "csr" or args or kwargs:
            return backed
        return as_deltacells(ad.AnnData(X=scipy.sparse.csr_matrix(backed.to_memory()))).X

    def read_h5ad_lazily(path: Any, *args: Any, backed: Any = None, **kwargs: Any) -> Any:
        if backed != "r":
            return read_h5ad(path, *args, backed=backed, **kwargs)
        import h5py

        with h5py.File(path, "r") as f:
            csr = "X" in f and f["X"].attrs.get("encoding-type") == "csr_matrix"
        return as_deltacells(read_h5ad(path)) if csr else read_h5ad(path, *args, backed=backed, **kwargs)

    monkeypatch.setattr(scipy.sparse, "random", integer_random)
    monkeypatch.setattr(ad, "read_h5ad", read_h5ad_lazily)
    if getattr(request.node, "originalname", None) != "test_data_access":  # n/a for CSR; compares the name
        monkeypatch.setattr(request.module, "sparse_dataset", sparse_dataset, raising=False)


class _Mocker:
    """pytest-mock's ``mocker.spy`` (the only part of it anndata's suite uses), when pytest-mock is not installed."""

    def __init__(self) -> None:
        self._patches: list[Any] = []

    def spy(self, owner: Any, name: str) -> Any:
        patch = unittest.mock.patch.object(owner, name, side_effect=getattr(owner, name), autospec=True)
        self._patches.append(patch)
        return patch.start()

    def stop(self) -> None:
        for patch in reversed(self._patches):
            patch.stop()


try:
    import pytest_mock  # noqa: F401 - its mocker fixture is used
except ImportError:

    @pytest.fixture
    def mocker() -> Iterator[_Mocker]:
        spies = _Mocker()
        yield spies
        spies.stop()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if ("deltacells", True) in report.user_properties:
        _USED.add(report.nodeid)
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = "n/a" if report.skipped else ("error" if report.when == "setup" else report.outcome)
        _OUTCOMES[report.nodeid] = outcome
    elif report.when == "teardown" and report.outcome == "failed":
        _OUTCOMES[report.nodeid] = "error"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    summary: dict[str, dict[str, Any]] = {"deltacells": {}, "anndata": {}}
    for nodeid, outcome in sorted(_OUTCOMES.items()):
        group = summary["deltacells" if nodeid in _USED else "anndata"]
        group.setdefault(outcome, []).append(nodeid.split("::", 1)[-1])
    for group, outcomes in summary.items():
        counts = {outcome: len(ids) for outcome, ids in sorted(outcomes.items())}
        terminalreporter.write_line(f"{'with a deltacells X' if group == 'deltacells' else 'CSC or dense'}: {counts}")
    report = os.environ.get("DELTACELLS_SUITE_REPORT")
    if report:
        with open(report, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=1)
