"""The names anndata gives cells that have none: ``"0"``, ``"1"``..."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["default_names"]


def default_names(cells: np.ndarray) -> pd.Index:
    """The default names of ``cells`` (their numbers as text), built without a Python loop."""
    as_text = pa.array(np.asarray(cells, dtype=np.int64)).cast(pa.string())
    names: pd.Index = pd.Index(as_text.to_numpy(zero_copy_only=False))
    return names
