"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def no_default_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point the default obs cache at an empty directory and fail the test if anything lands there."""
    stray = tmp_path_factory.mktemp("default-cache")
    monkeypatch.setenv("DELTACELLS_CACHE", str(stray))
    yield
    assert not any(stray.iterdir()), "a test read obs without cache_dir= (it used the default cache)"
