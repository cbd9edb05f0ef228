"""Fixtures of the reliability tests; helpers that child processes need live in ``reliability_lib``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# The test modules, and the forkserver's children, import reliability_lib from this directory.
sys.path.insert(0, str(Path(__file__).parent))

from reliability_lib import mp_context


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every test here must pass ``cache_dir=`` (see ``tests/conftest.py``)."""


@pytest.fixture(scope="session")
def ctx() -> Any:
    """The forkserver multiprocessing context (children start in milliseconds, deltacells imported)."""
    return mp_context()
