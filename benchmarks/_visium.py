"""The real data the benchmarks use: the Visium CytAssist matrix of the project's ``../shared/data``.

Its folder is ``../shared/data/visium-cytassist`` beside the repository, or ``$DELTACELLS_VISIUM``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: The 10x mtx folder (2,898 spots x 19,465 genes).
VISIUM = Path(
    os.environ.get("DELTACELLS_VISIUM")
    or Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "visium-cytassist"
)


def resampled_rows(n_rows: int, n_cells: int, seed: int = 0) -> np.ndarray:
    """``n_cells`` row numbers of a matrix of ``n_rows`` drawn with replacement (how the larger matrices are made)."""
    return np.random.default_rng(seed).integers(0, n_rows, size=n_cells)
