"""Fixtures shared by every test directory: an obs cache that must stay unused, a dask cluster, numba's kernels
loaded; anndata's marks.

And a guard on memory: a test (its setup or its call) that takes its test process, or a process it started and
waited for, past :data:`MAX_PEAK_RSS_BYTES` of peak resident memory fails, named (``$DELTACELLS_TEST_MAX_RSS_GB``
changes the bound; 0 turns the guard off). The suite runs on machines of a few GB a worker.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import pytest

#: The peak resident memory a test may take its process (or a child it waited for) to: 4 GB by default.
MAX_PEAK_RSS_BYTES = int(float(os.environ.get("DELTACELLS_TEST_MAX_RSS_GB", "4")) * 2**30)


def _peaks() -> tuple[int, int]:
    """Peak resident bytes of this process and of its largest waited-for child so far (Linux: KiB units)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return own * 1024, children * 1024


def _guard_memory(item: pytest.Item, phase: str) -> Iterator[None]:
    before = _peaks()
    yield
    if MAX_PEAK_RSS_BYTES <= 0:
        return
    for who, was, now in zip(("the test process", "a child process"), before, _peaks(), strict=True):
        if was <= MAX_PEAK_RSS_BYTES < now:  # this test crossed the bound (the peak only grows)
            msg = (
                f"{item.nodeid} ({phase}) took {who}'s peak resident memory to {now / 2**30:.1f} GB, above the "
                f"suite's bound of {MAX_PEAK_RSS_BYTES / 2**30:.1f} GB ($DELTACELLS_TEST_MAX_RSS_GB)"
            )
            pytest.fail(msg, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Fail a test whose setup (its fixtures) crosses the memory bound."""
    return (yield from _guard_memory(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fail a test whose call crosses the memory bound."""
    return (yield from _guard_memory(item, "call"))


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


@pytest.fixture
def compiled_kernels() -> None:
    """numba's compiled kernels, loaded in this process (until then reads and writes run their numpy versions)."""
    from deltacells._kernel_loading import load_compiled_kernels

    load_compiled_kernels()
