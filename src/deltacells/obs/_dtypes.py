"""Names for pandas dtypes in ``pandas_dtype`` hints, and the dtypes they name, on pandas 2 and 3 alike.

The string dtypes are the delicate part: pandas 2 keeps text in ``object`` columns, pandas 3 in its
``str`` dtype (a :class:`pandas.StringDtype` whose missing value is NaN), and both also have the
``string`` dtype (missing value ``pd.NA``) in two storages. A column that has the default string dtype
of the pandas that wrote it gets no hint and is read back with the default of the pandas that reads
it, so that files move between pandas versions the way parquet files do; a column with any other
string dtype gets a hint naming it exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from deltacells.errors import InvalidValueError

__all__ = ["default_string_dtype", "dtype_from_hint", "is_nan_string_dtype", "string_hint"]


def default_string_dtype() -> Any:
    """The dtype pandas gives a column of Python strings (``object`` in pandas 2, ``str`` in pandas 3)."""
    return pd.Series(["a"]).dtype


def is_nan_string_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a :class:`pandas.StringDtype` whose missing value is NaN (pandas 3's ``str``)."""
    return isinstance(dtype, pd.StringDtype) and _is_nan(getattr(dtype, "na_value", pd.NA))


def string_hint(dtype: Any) -> str | None:
    """The hint for a string column of ``dtype``: ``None`` for the default string dtype, else its name."""
    if dtype == default_string_dtype() and type(dtype) is type(default_string_dtype()):
        return None
    if isinstance(dtype, pd.StringDtype):
        storage = "pyarrow" if str(dtype.storage).startswith("pyarrow") else "python"
        return f"{'str' if is_nan_string_dtype(dtype) else 'string'}[{storage}]"
    return "object"


def _string_dtype_from_hint(hint: str) -> Any:
    if hint == "object":
        return np.dtype(object)
    family, _, rest = hint.partition("[")
    storage = rest.rstrip("]") or None
    if family == "string":
        return pd.StringDtype(storage)
    if family == "str":
        try:
            return pd.StringDtype(storage, na_value=np.nan)
        except (TypeError, ValueError, ImportError):  # a pandas without it: its own default
            return default_string_dtype()
    msg = f"not a string dtype hint: {hint!r}"
    raise InvalidValueError(msg)


def dtype_from_hint(hint: str | None, *, family: str) -> Any:
    """The pandas dtype a hint names, or ``None`` if there is no hint or it is not understood here.

    Parameters
    ----------
    hint
        The ``pandas_dtype`` of a schema column.
    family
        ``"string"``, ``"numeric"``, ``"bool"`` or ``"any"``: the kind of values the dtype must hold
        (a hint naming a dtype of another kind is ignored).
    """
    if hint is None:
        return None
    try:
        if family == "string" or (family == "any" and (hint == "object" or hint.startswith(("str[", "string[")))):
            return _string_dtype_from_hint(hint)
        dtype = pd.api.types.pandas_dtype(hint)
    except (TypeError, ValueError, ImportError):
        return None
    if family == "numeric" and not (
        pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype) and dtype != np.dtype(object)
    ):
        return None
    if family == "bool" and not pd.api.types.is_bool_dtype(dtype):
        return None
    return dtype


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and value != value
