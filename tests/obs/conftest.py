"""Fixtures of the obs tests; the helpers live in ``obs_testlib`` (importable by spawned worker processes)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

# The test modules and the multiprocessing workers import obs_testlib from this directory.
sys.path.insert(0, str(Path(__file__).parent))

from obs_testlib import ObsDataset, write_obs_dataset


@pytest.fixture(name="write_obs_dataset")
def write_obs_dataset_fixture(tmp_path: Path) -> Callable[..., ObsDataset]:
    """Factory ``write_obs_dataset(frame, tile_size=4, **write_obs options) -> ObsDataset`` under tmp_path."""
    counter = itertools.count()

    def write(frame: pd.DataFrame, tile_size: int = 4, **options: Any) -> ObsDataset:
        return write_obs_dataset(tmp_path / f"ds{next(counter)}", frame, tile_size, **options)

    return write
