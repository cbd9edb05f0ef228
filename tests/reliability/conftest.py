"""Fixtures of the reliability tests; helpers that child processes need live in ``reliability_lib``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The test modules, and the forkserver's children, import reliability_lib from this directory.
sys.path.insert(0, str(Path(__file__).parent))

from reliability_lib import mp_context


@pytest.fixture(autouse=True)
def _no_default_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point the default obs cache at an empty directory and fail the test if anything lands there."""
    stray = tmp_path_factory.mktemp("default-cache")
    monkeypatch.setenv("DELTACELLS_CACHE", str(stray))
    yield
    assert not any(stray.iterdir()), "a test read obs without cache_dir= (it used the default cache)"


@pytest.fixture(scope="session")
def ctx() -> Any:
    """The forkserver multiprocessing context (children start in milliseconds, deltacells imported)."""
    return mp_context()
