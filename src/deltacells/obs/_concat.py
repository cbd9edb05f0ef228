"""The dtypes of obs columns joined as :func:`anndata.concat` joins them, found from the frames' dtypes alone.

anndata.concat joins obs frames in two steps. First its own rule (``anndata._core.merge.try_unifying_dtype``):
categoricals of different categories get their union, natural-sorted (``GW16_2`` before ``GW16_10``), or
``object`` when ordered ones disagree; bool columns that some frame lacks become pandas' nullable
``boolean``. Each frame's column is cast to that dtype (a cast pandas skips when the dtypes compare equal: an
unordered categorical holding every category, in another order, keeps its order). Then :func:`pandas.concat`
of the frames, whose rules decide the rest: int64 beside float32 is float64, bool beside int64 is int64, a
column some frame lacks gets missing values (ints become float64), categories beside strings are ``object``
(pandas 3: ``str``), and the categories of the first frame, when every frame holds the same ones.

Here the first step is anndata's own function, and the second :func:`pandas.concat` of one-row stand-ins: a
frame for each distinct dtype the frames hold (and one without the column where a frame lacks it), in the
order they first appear, so that a thousand datasets cost a handful of rows. The values themselves are read
dataset by dataset and cast to the joined dtype (:func:`as_joined`), never concatenated here.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from deltacells import _internals
from deltacells.errors import InvalidValueError

__all__ = [
    "as_joined",
    "empty_values",
    "joined_column_names",
    "joined_dtype",
    "joined_dtypes",
    "missing_values",
    "renumbered",
]

#: The marker of a frame without the column.
_MISSING = ("missing",)


def joined_column_names(frames: Sequence[Sequence[str]], join: str) -> list[str]:
    """The columns of frames joined by :func:`pandas.concat`.

    Those of every frame (``"inner"``), in the first frame's order, or of any (``"outer"``), in the order they
    first appear.
    """
    seen: dict[str, int] = {}
    for names in frames:
        for name in names:
            seen[name] = seen.get(name, 0) + 1
    if join == "inner":
        return [name for name in (frames[0] if frames else []) if seen[name] == len(frames)]
    return list(seen)


def joined_dtypes(frames: Sequence[Mapping[str, Any]], join: str) -> dict[str, Any]:
    """The joined columns and the dtype :func:`anndata.concat` gives each.

    Parameters
    ----------
    frames
        Each frame's columns and their dtypes, in its column order.
    join
        ``"inner"`` or ``"outer"``.

    Raises
    ------
    InvalidValueError
        For a column whose dtypes pandas cannot concatenate, naming it and the dtypes.
    """
    names = joined_column_names([list(frame) for frame in frames], join)
    return {name: joined_dtype([frame.get(name) for frame in frames], name=name) for name in names}


def joined_dtype(dtypes: Sequence[Any], *, name: str = "") -> Any:
    """The dtype :func:`anndata.concat` gives a column whose frames hold ``dtypes`` (``None``: a frame lacks it)."""
    present = _distinct([dtype for dtype in dtypes if dtype is not None])
    has_missing = any(dtype is None for dtype in dtypes)
    unified = _internals.anndata_unified_dtype(present, has_missing=has_missing)
    stand_ins: list[pd.DataFrame] = []
    seen: set[Hashable] = set()
    unified_key = None if unified is None or unified is object else _key(unified)  # once: the union may be long
    for dtype in dtypes:
        cast = None if dtype is None else _cast_dtype(dtype, unified)
        key = _MISSING if cast is None else unified_key if cast is unified else _key(cast)
        if key in seen:
            continue
        seen.add(key)
        if dtype is None:
            stand_ins.append(pd.DataFrame(index=pd.RangeIndex(1)))
        else:
            stand_ins.append(pd.DataFrame({name: _stand_in(dtype, unified)}))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # pandas on all-missing frames, as concat would warn
            joined = pd.concat(stand_ins, join="outer", ignore_index=True)
    except (TypeError, ValueError) as exc:
        shown = ", ".join(str(dtype) for dtype in present)
        msg = f"obs column {name!r} cannot be joined: pandas cannot concatenate its dtypes ({shown}): {exc}"
        raise InvalidValueError(msg) from exc
    return joined[name].dtype


def as_joined(values: Any, dtype: Any) -> Any:
    """``values`` (one frame's column: a numpy or pandas array) as :func:`pandas.concat` casts them to ``dtype``.

    A categorical ``dtype`` recodes the values to its categories (in its order, whatever the values' own).
    """
    if isinstance(dtype, pd.CategoricalDtype):
        if isinstance(values, pd.Categorical):
            return _recoded(values, dtype)
        return pd.Categorical(values, dtype=dtype)
    series = pd.Series(values, copy=False)
    if series.dtype != dtype or type(series.dtype) is not type(dtype):
        series = series.astype(dtype)
    return series.to_numpy() if isinstance(dtype, np.dtype) else series.array


def missing_values(dtype: Any, n: int) -> Any:
    """``n`` missing values of ``dtype`` (what :func:`pandas.concat` puts where a frame lacks the column)."""
    if isinstance(dtype, np.dtype):
        values = np.empty(n, dtype=dtype)
        if dtype.kind in "fcO":
            values[:] = np.nan
        elif n:
            msg = f"a {dtype} column cannot hold missing values"
            raise InvalidValueError(msg)
        return values
    return pd.array([], dtype=dtype).take(np.full(n, -1, dtype=np.intp), allow_fill=True)


def empty_values(dtype: Any, n: int) -> Any:
    """An array of ``n`` values of ``dtype`` to be filled (missing ones where the dtype holds them)."""
    return np.empty(n, dtype=dtype) if isinstance(dtype, np.dtype) else missing_values(dtype, n)


def _recoded(values: pd.Categorical, dtype: pd.CategoricalDtype) -> pd.Categorical:
    """``values`` with ``dtype``'s categories, in its order (``astype`` would keep theirs when the sets match)."""
    positions = dtype.categories.get_indexer(values.categories)
    codes = np.asarray(values.codes, dtype=np.int64)
    if (positions[codes[codes >= 0]] < 0).any():
        msg = f"values outside the joined categories {list(dtype.categories)[:5]}"
        raise InvalidValueError(msg)
    return pd.Categorical.from_codes(renumbered(codes, positions), dtype=dtype)


def renumbered(codes: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Category codes ``codes`` renumbered: code ``i`` becomes ``positions[i]``, and -1 (missing) stays -1."""
    lookup = np.append(np.asarray(positions, dtype=np.int64), -1)  # code -1 picks the trailing -1
    new: np.ndarray = lookup[codes]
    return new


def _distinct(dtypes: list[Any]) -> list[Any]:
    """``dtypes`` without repeats (categoricals compared by their categories, in order), first ones kept."""
    seen: set[Hashable] = set()
    kept = []
    for dtype in dtypes:
        key = _key(dtype)
        if key not in seen:
            seen.add(key)
            kept.append(dtype)
    return kept


def _key(dtype: Any) -> Hashable:
    """What tells ``dtype`` apart from another for a join: the categories in their order, for a categorical."""
    if isinstance(dtype, pd.CategoricalDtype):
        categories = dtype.categories
        return ("category", bool(dtype.ordered), str(categories.dtype), tuple(categories.tolist()))
    return (type(dtype).__name__, str(dtype), str(getattr(dtype, "na_value", "")))


def _cast_dtype(dtype: Any, unified: Any) -> Any:
    """The dtype of a frame's column of ``dtype`` after anndata's cast to ``unified`` (pandas skips an equal one)."""
    if unified is None:
        return dtype
    if unified is object:
        return np.dtype(object)
    return dtype if dtype == unified else unified


def _stand_in(dtype: Any, unified: Any) -> Any:
    """One value of a column of ``dtype`` (missing only where every value must be), cast as anndata casts it."""
    if isinstance(dtype, pd.CategoricalDtype):
        values: Any = pd.Categorical.from_codes([0 if len(dtype.categories) else -1], dtype=dtype)
    elif pd.api.types.is_bool_dtype(dtype):
        values = pd.array([True], dtype=dtype) if not isinstance(dtype, np.dtype) else np.array([True], dtype=dtype)
    elif pd.api.types.is_numeric_dtype(dtype):
        values = pd.Series([0]).astype(dtype).array
    else:
        values = pd.Series(["a"], dtype=dtype).array
    series = pd.Series(values)
    cast = _cast_dtype(dtype, unified)
    return series if cast is dtype else series.astype(cast)
