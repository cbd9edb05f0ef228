"""Equality of what was read back and what was written: matrices by value, frames by column."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    pass

__all__ = ["same_frame", "same_matrix"]


def same_matrix(a: Any, b: Any) -> bool:
    """Whether two sparse matrices have the same shape and values."""
    return bool(a.shape == b.shape and (a != b).nnz == 0)


def same_frame(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Same index, columns and values (categoricals by category; dtypes of strings may differ)."""
    if list(map(str, a.index)) != list(map(str, b.index)) or list(a.columns) != list(b.columns):
        return False
    return all(_same_column(a[name], b[name]) for name in a.columns)


def _same_column(x: pd.Series, y: pd.Series) -> bool:
    x_categorical = isinstance(x.dtype, pd.CategoricalDtype)
    y_categorical = isinstance(y.dtype, pd.CategoricalDtype)
    if x_categorical or y_categorical:
        return (
            x_categorical
            and y_categorical
            and list(x.cat.categories) == list(y.cat.categories)
            and np.array_equal(x.cat.codes, y.cat.codes)
        )
    return np.array_equal(x.to_numpy(), y.to_numpy(), equal_nan=x.dtype.kind == "f")
