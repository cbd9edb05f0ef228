"""Without torch, ``import deltacells.loader`` works and ``CellLoader.to_torch()`` says what is missing.

Runs in both suites: torch is hidden (``sys.modules["torch"] = None``) where it is installed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import deltacells
from deltacells import CellLoader
from deltacells.datasets import synthetic_counts


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every test here must pass ``cache_dir=``."""


def test_importing_the_loader_imports_no_torch() -> None:
    code = "import deltacells.loader, sys; d = deltacells.loader.CellLoader; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_to_torch_without_torch(tmp_path, monkeypatch) -> None:
    deltacells.write_deltacells(synthetic_counts(200, 10), tmp_path / "cells", tile_size=64, progress=False)
    load = CellLoader(tmp_path / "cells", batch_size=50, cache_dir=tmp_path / "cache")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails, as when it is not installed
    monkeypatch.delitem(sys.modules, "deltacells.loader._torch", raising=False)
    with pytest.raises(ImportError, match="need torch, which is not installed"):
        load.to_torch()
    with pytest.raises(ImportError, match="need torch, which is not installed"):
        load.dataloader(num_workers=2)
    assert len(list(load)) == 4  # the loader itself needs no torch
