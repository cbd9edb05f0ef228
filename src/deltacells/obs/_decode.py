"""Arrow values of an obs column to pandas, following the schema (and its ``pandas_dtype`` hints).

Without a hint (files of other writers): categories become a :class:`pandas.Categorical`; integers
without nulls a numpy array, with nulls the nullable ``Int*``/``UInt*`` dtype of the same width; floats
numpy with NaN for nulls; booleans numpy ``bool``, or ``boolean`` with nulls; strings the default string
dtype of the running pandas (``object`` with ``None`` in pandas 2, ``str`` with NaN in pandas 3), as
:func:`pandas.read_parquet` gives them. A ``pandas_dtype`` hint (written by this implementation) restores
the exact dtype instead, where it can hold the values (an integer hint cannot hold nulls, for instance, and
is then ignored).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from deltacells.format import ObsColumn, check_codes, first_problem_raises
from deltacells.obs._dtypes import default_string_dtype, dtype_from_hint

__all__ = ["categories_index", "to_pandas_values"]


def to_pandas_values(column: ObsColumn, array: pa.Array) -> Any:
    """The values of ``column`` (one Arrow array of the stored type) as a numpy or pandas array.

    Raises
    ------
    FormatError
        For category codes outside ``-1 .. len(categories) - 1``.
    """
    if column.kind == "category":
        return _categorical(column, array)
    if column.kind == "string":
        return _strings(column, array)
    if column.kind == "bool":
        return _booleans(column, array)
    return _numbers(column, array)


def categories_index(column: ObsColumn) -> pd.Index:
    """The categories of a category column as a pandas Index of the type they were written with."""
    values = list(column.categories or ())
    dtype = dtype_from_hint(column.pandas_dtype, family="any")
    if dtype is not None:
        try:
            index: pd.Index | None = pd.Index(values, dtype=dtype)
        except (TypeError, ValueError, OverflowError):
            index = None
        if index is not None and index.tolist() == values:
            return index
    value_type = column.category_type
    if value_type is str or value_type is None:  # no categories: strings, as pandas makes them by default
        strings: pd.Index = pd.Index(values, dtype=default_string_dtype())
        return strings
    others: pd.Index = pd.Index(values, dtype={int: None, float: np.float64, bool: np.bool_}[value_type])
    return others


def _categorical(column: ObsColumn, array: pa.Array) -> pd.Categorical:
    first_problem_raises(check_codes(column, array, f"obs column {column.name!r}", ""))
    if array.null_count:
        array = array.fill_null(-1)
    codes = array.to_numpy(zero_copy_only=False)
    dtype = pd.CategoricalDtype(categories_index(column), ordered=column.ordered)
    return pd.Categorical.from_codes(codes, dtype=dtype)


def _strings(column: ObsColumn, array: pa.Array) -> Any:
    dtype = dtype_from_hint(column.pandas_dtype, family="string")
    if dtype is None:
        dtype = default_string_dtype()
    if dtype == np.dtype(object):
        return _writable(array.to_numpy(zero_copy_only=False))  # None for nulls, as read_parquet gives
    return _from_arrow(dtype, array)


def _booleans(column: ObsColumn, array: pa.Array) -> Any:
    dtype = dtype_from_hint(column.pandas_dtype, family="bool")
    if not array.null_count and (dtype is None or isinstance(dtype, np.dtype)):
        return _writable(array.to_numpy(zero_copy_only=False))
    return _from_arrow(pd.BooleanDtype(), array)  # "boolean" asked for, or nulls that numpy bool cannot hold


def _numbers(column: ObsColumn, array: pa.Array) -> Any:
    dtype = dtype_from_hint(column.pandas_dtype, family="numeric")
    is_float = pa.types.is_floating(array.type)
    if isinstance(dtype, np.dtype):
        if not array.null_count:
            return _writable(array.to_numpy(zero_copy_only=False).astype(dtype, copy=False))
        if dtype.kind == "f":
            return array.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
        dtype = None  # an integer dtype cannot hold the nulls: use the nullable one below
    if dtype is not None and hasattr(dtype, "__from_arrow__"):
        return _from_arrow(dtype, array)
    if is_float or not array.null_count:
        return _writable(array.to_numpy(zero_copy_only=False))
    bits = array.type.bit_width
    nullable = pd.api.types.pandas_dtype(f"{'UInt' if pa.types.is_unsigned_integer(array.type) else 'Int'}{bits}")
    return _from_arrow(nullable, array)


def _from_arrow(dtype: Any, array: pa.Array) -> Any:
    """``dtype.__from_arrow__(array)``: a pandas extension dtype's array of Arrow values (pandas-stubs omit it)."""
    return dtype.__from_arrow__(array)


def _writable(values: np.ndarray) -> np.ndarray:
    """Arrow may hand out read-only views of its buffers; pandas columns should be writable."""
    return values if values.flags.writeable else values.copy()
