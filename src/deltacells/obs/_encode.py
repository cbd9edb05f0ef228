"""pandas columns to obs columns: the schema entry and the Arrow values of each column.

=========================================  ========================  =======================  ====================
pandas dtype                               kind                      arrow_type               pandas_dtype hint
=========================================  ========================  =======================  ====================
categorical (<= max_categories)            category (codes, -1 NA)   int8 / int16 / int32     categories' dtype*
categorical (> max_categories)             string (str of values)    string                   --
int8 .. int64, uint8 .. uint64             numeric                   same                     same
float16 / float32 / float64 (NaN kept)     numeric                   float / float / double   same
Int8 .. UInt64, Float32, Float64           numeric (nulls)           same                     same
bool / boolean                             bool (nulls)              bool                     same
object of str / string / str               string (nulls)            string                   dtype*
anything else                              ValueError / TypeError naming the column and the fix
=========================================  ========================  =======================  ====================

(*) only when it is not the default (see :mod:`deltacells.format._obs_schema`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from deltacells._checks import is_bool
from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.format import INDEX_COLUMN, ObsColumn
from deltacells.obs._dtypes import string_hint

__all__ = ["DEFAULT_MAX_CATEGORIES", "encode_column", "encode_index"]

#: Categoricals with more categories than this are stored as strings (e.g. cell barcodes).
DEFAULT_MAX_CATEGORIES = 20_000

_NUMPY_ARROW_NAMES = {
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float",  # Arrow's halffloat is not allowed; float32 holds every float16 exactly
    "float32": "float",
    "float64": "double",
}

_MASKED_ARROW_NAMES = {
    "Int8": "int8",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "UInt8": "uint8",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Float32": "float",
    "Float64": "double",
}


def _unsupported(name: str, dtype: Any, why: str = "") -> str:
    reason = f" ({why})" if why else ""
    return (
        f"obs column {name!r} has dtype {dtype}{reason}, which obs cannot store: obs columns must be categorical, "
        f"numeric, boolean or string. Convert it, e.g. df[{name!r}] = df[{name!r}].astype(str), or leave it out "
        "with obs_columns="
    )


def encode_index(index: pd.Index) -> tuple[ObsColumn, pa.Array]:
    """The obs names as column ``_index`` (kind string; docs/format.md, decision 2), every label made a string.

    A missing name (``None``, NaN, ``pd.NA``) is stored as a null, and read back missing, as
    :func:`anndata.concat` keeps it (not as the text ``"<NA>"``).
    """
    if pd.api.types.is_string_dtype(index.dtype) and not index.hasnans:
        values = index.to_numpy(dtype=object)
        if not all(isinstance(v, str) for v in values):
            values = np.array([str(v) for v in values], dtype=object)
    else:
        missing = np.asarray(index.isna())
        values = np.array([None if m else str(v) for v, m in zip(index, missing, strict=True)], dtype=object)
    name = index.name if isinstance(index.name, str) else None
    return ObsColumn(INDEX_COLUMN, "string", "string", index_name=name), _string_array(INDEX_COLUMN, values)


def encode_column(
    name: str, series: pd.Series, *, max_categories: int = DEFAULT_MAX_CATEGORIES
) -> tuple[ObsColumn, pa.Array]:
    """The schema entry and Arrow values of one obs column.

    Parameters
    ----------
    name
        The column name.
    series
        Its values.
    max_categories
        A categorical with more categories is stored as strings.

    Raises
    ------
    ValueError, TypeError
        For a dtype obs cannot store, naming the column, its dtype and how to convert it.
    """
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return _encode_categorical(name, series, max_categories)
    if isinstance(dtype, np.dtype):
        if dtype.name in _NUMPY_ARROW_NAMES:
            values = series.to_numpy()
            if dtype == np.float16:
                values = values.astype(np.float32)
            return ObsColumn(name, "numeric", _NUMPY_ARROW_NAMES[dtype.name], pandas_dtype=dtype.name), pa.array(values)
        if dtype == np.bool_:
            return ObsColumn(name, "bool", "bool", pandas_dtype="bool"), pa.array(series.to_numpy())
        if dtype == np.dtype(object):
            return _encode_object(name, series)
        raise InvalidTypeError(_unsupported(name, dtype))
    if isinstance(dtype, pd.api.extensions.ExtensionDtype):
        if dtype.name in _MASKED_ARROW_NAMES and not isinstance(dtype, pd.ArrowDtype):
            arrow_name = _MASKED_ARROW_NAMES[dtype.name]
            column = ObsColumn(name, "numeric", arrow_name, pandas_dtype=dtype.name)
            return column, pa.array(series.array, type=column.pa_type)
        if isinstance(dtype, pd.BooleanDtype):
            return ObsColumn(name, "bool", "bool", pandas_dtype="boolean"), pa.array(series.array, type=pa.bool_())
        if isinstance(dtype, pd.StringDtype):
            column = ObsColumn(name, "string", "string", pandas_dtype=string_hint(dtype))
            return column, _string_array(name, series.array)
    raise InvalidTypeError(_unsupported(name, dtype))


def _encode_object(name: str, series: pd.Series) -> tuple[ObsColumn, pa.Array]:
    values = series.to_numpy()
    inferred = pd.api.types.infer_dtype(values, skipna=True)
    if inferred not in ("string", "empty"):
        raise InvalidTypeError(_unsupported(name, series.dtype, f"holding {inferred} values, not only strings"))
    column = ObsColumn(name, "string", "string", pandas_dtype=string_hint(series.dtype))
    return column, _string_array(name, values)


def _string_array(name: str, values: Any) -> pa.Array:
    try:
        array = pa.array(values, type=pa.string(), from_pandas=True)
    except (pa.ArrowException, UnicodeError) as exc:
        msg = f"obs column {name!r}: its strings cannot be stored as UTF-8 text ({exc})"
        raise InvalidValueError(msg) from exc
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    return array


def _encode_categorical(name: str, series: pd.Series, max_categories: int) -> tuple[ObsColumn, pa.Array]:
    dtype = series.dtype
    assert isinstance(dtype, pd.CategoricalDtype)  # a categorical column
    categories = dtype.categories
    values, value_type = _category_values(name, categories)
    codes = series.cat.codes.to_numpy()
    if len(values) > max_categories:
        # Too many categories to be worth a vocabulary (e.g. barcodes): store the values themselves.
        as_text = np.array([str(v) for v in values] + [None], dtype=object)
        column = ObsColumn(name, "string", "string")
        return column, _string_array(name, as_text[codes])  # code -1 picks the trailing None
    n = len(values)
    code_type = "int8" if n <= 127 else ("int16" if n <= 32767 else "int32")
    hint = None if categories.dtype == _default_categories_dtype(value_type) else _dtype_name(categories.dtype)
    column = ObsColumn(
        name, "category", code_type, categories=tuple(values), ordered=bool(dtype.ordered), pandas_dtype=hint
    )
    return column, pa.array(codes.astype(code_type, copy=False))


def _category_values(name: str, categories: pd.Index) -> tuple[list[Any], type | None]:
    """The categories as JSON values of one type (docs/format.md, decision 12), or an error naming the column."""
    values = categories.tolist()
    if not values:
        return [], None
    kinds: set[type] = set()
    converted: list[Any] = []
    for value in values:
        if is_bool(value):
            kinds.add(bool)
            converted.append(bool(value))
        elif isinstance(value, (int, np.integer)):
            kinds.add(int)
            converted.append(int(value))
        elif isinstance(value, (float, np.floating)):
            if not math.isfinite(value):
                msg = f"obs column {name!r}: category {value!r} is not a finite number, which obs cannot store"
                raise InvalidValueError(msg)
            kinds.add(float)
            converted.append(float(value))
        elif isinstance(value, str):
            kinds.add(str)
            converted.append(str(value))
        else:
            kinds.add(type(value))
            converted.append(value)
    if len(kinds) != 1 or not kinds <= {str, int, float, bool}:
        what = ", ".join(sorted(k.__name__ for k in kinds))
        msg = (
            f"obs column {name!r} is a categorical whose categories are of type(s) {what} (dtype "
            f"{categories.dtype}); obs stores categories of one type: strings, integers, floats or booleans. "
            f"Convert it, e.g. df[{name!r}] = df[{name!r}].astype(str), or leave it out with obs_columns="
        )
        raise InvalidValueError(msg)
    return converted, next(iter(kinds))


def _default_categories_dtype(value_type: type | None) -> Any:
    if value_type is str or value_type is None:  # no categories: nothing tells their type; strings by default
        return pd.Index(["a"]).dtype
    return {int: np.dtype(np.int64), float: np.dtype(np.float64), bool: np.dtype(np.bool_)}.get(
        value_type, np.dtype(object)
    )


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, pd.StringDtype) or dtype == np.dtype(object):
        return string_hint(dtype) or "object"
    return str(dtype)
