"""Fixtures shared by every test directory: an obs cache that must stay unused, a dask cluster; anndata's marks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """``anndata.tests.helpers`` uses marks of its own at import time; register them under ``--strict-markers``."""
    for mark in ("gpu", "array_api"):
        config.addinivalue_line("markers", f"{mark}: used by anndata.tests.helpers (not by deltacells)")


@pytest.fixture
def no_default_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point the default obs cache at an empty directory and fail the test if anything lands there."""
    stray = tmp_path_factory.mktemp("default-cache")
    monkeypatch.setenv("DELTACELLS_CACHE", str(stray))
    yield
    assert not any(stray.iterdir()), "a test read obs without cache_dir= (it used the default cache)"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real ``dask.distributed`` cluster of two worker processes (one thread each), for the module."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=":0",  # a free port: two test processes may each start a cluster
            local_directory=tmp_path_factory.mktemp("dask-workers"),
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
