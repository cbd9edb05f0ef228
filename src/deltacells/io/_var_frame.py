"""The gene table of ``var.parquet`` as a pandas DataFrame, built without pyarrow's slow paths for strings.

``pyarrow.Table.to_pandas`` turns a string column into Python objects and then, under pandas 2, deduplicates
them through a hash table and rebuilds a string index through pandas' type inference: on the 19,465 genes of
a 10x matrix, 3.5 to 6.5 ms for a table with an index and two string columns, against 0.5 ms a column for the
conversion itself (``benchmarks/bench_decode.py`` opens such a dataset). Here string columns (and a string
index) are converted with ``to_numpy`` alone, into the same object arrays; every other column goes through
``to_pandas`` with the table's pandas metadata, so that categoricals, nullable and extension dtypes come back
as they were written. Under pandas 3, whose strings are Arrow-backed, the table's own conversion is already
fast and is used as it is.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["string_values", "var_frame"]

#: pandas 3 converts Arrow strings to its Arrow-backed ``str`` dtype (no Python objects): nothing to gain.
_OBJECT_STRINGS = int(pd.__version__.split(".")[0]) < 3


def var_frame(table: pa.Table) -> pd.DataFrame:
    """``table`` (a parquet table written from a pandas DataFrame, or any table) as a DataFrame.

    The same frame as ``table.to_pandas()``: the same columns in the same order with the same dtypes, and the
    index the pandas metadata names (a stored index column, a RangeIndex, or none).
    """
    if not _OBJECT_STRINGS:
        return _pyarrow_frame(table)
    metadata = _pandas_metadata(table.schema)
    index_columns = metadata.get("index_columns", []) if metadata else []
    stored_index = [c for c in index_columns if isinstance(c, str)]
    as_objects = _object_columns(metadata)
    strings = [
        name
        for name, kind in zip(table.column_names, table.schema.types, strict=True)
        if _is_string(kind) and name not in stored_index and (metadata is None or name in as_objects)
    ]
    if len(stored_index) > 1 or len(set(table.column_names)) != len(table.column_names):
        return _pyarrow_frame(table)  # a MultiIndex or repeated names: rare, left to pyarrow
    index_name: Any = None
    index_values: np.ndarray | None = None
    if stored_index:
        (index_column,) = stored_index
        if not _is_string(table.schema.field(index_column).type) or index_column not in as_objects:
            return _pyarrow_frame(table)  # a numeric, StringDtype or other stored index: pyarrow restores it exactly
        index_values = _strings(table.column(index_column))
        index_name = _index_name(metadata, index_column)
    if not strings and index_values is None:
        return _pyarrow_frame(table)
    others = table.drop_columns([*strings, *stored_index])
    if metadata is not None:
        others = others.replace_schema_metadata(_without(table.schema.metadata, metadata, [*strings, *stored_index]))
    rest = others.to_pandas()
    if index_values is None and len(rest) != table.num_rows:  # only string columns, no stored index: pyarrow's way
        return _pyarrow_frame(table)
    index = rest.index if index_values is None else pd.Index(index_values, dtype=object, name=index_name, copy=False)
    columns = {
        name: _strings(table.column(name)) if name in strings else rest[name].array
        for name in table.column_names
        if name not in stored_index
    }
    frame = pd.DataFrame(columns, index=index, copy=False)
    if not columns:
        frame.columns = rest.columns  # no column: the empty column index pyarrow makes
    frame.columns.name = rest.columns.name
    return frame


def string_values(table: pa.Table, name: str | None) -> np.ndarray | None:
    """The values of string column ``name`` (None: the stored index) as an object array of ``str``.

    What ``var_frame(table)`` gives for that column or index, without building the frame (a collection reads
    only the genes' names of each of its datasets); None unless it is one string column without nulls.
    """
    columns = string_column_of(table.schema, name)
    if columns is None or not _is_string(table.schema.field(columns[0]).type):
        return None
    column = table.column(columns[0])
    return None if column.null_count else _strings(column)


def string_column_of(schema: pa.Schema, name: str | None) -> list[str] | None:
    """The one column :func:`string_values` reads of a table of ``schema`` for ``name``, or None (read them all)."""
    metadata = _pandas_metadata(schema)
    stored_index = [c for c in (metadata or {}).get("index_columns", []) if isinstance(c, str)]
    if name is None:
        if len(stored_index) != 1:
            return None
        (name,) = stored_index
    elif name in stored_index:
        return None
    return [name] if schema.names.count(name) == 1 else None


def _pyarrow_frame(table: pa.Table) -> pd.DataFrame:
    """``table.to_pandas()``: pyarrow's own conversion."""
    frame: pd.DataFrame = table.to_pandas()
    return frame


def _is_string(kind: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _strings(column: pa.ChunkedArray) -> np.ndarray:
    """The strings of ``column`` as an object array of ``str`` (``None`` for nulls), what ``to_pandas`` gives."""
    strings: np.ndarray = column.to_numpy(zero_copy_only=False)
    return strings


def _pandas_metadata(schema: pa.Schema) -> dict[str, Any] | None:
    raw = (schema.metadata or {}).get(b"pandas")
    if raw is None:
        return None
    try:
        metadata = json.loads(raw)
    except ValueError:
        return None
    return metadata if isinstance(metadata, dict) else None


def _object_columns(metadata: dict[str, Any] | None) -> set[str]:
    """The columns (by field name) that the pandas metadata says were object arrays of strings."""
    return {
        entry["field_name"]
        for entry in (metadata or {}).get("columns", [])
        if isinstance(entry, dict)
        and entry.get("pandas_type") == "unicode"
        and entry.get("numpy_type") == "object"
        and isinstance(entry.get("field_name"), str)
    }


def _index_name(metadata: dict[str, Any] | None, column: str) -> Any:
    """The name the pandas metadata gives the index stored in ``column`` (``__index_level_0__``: unnamed)."""
    for entry in (metadata or {}).get("columns", []):
        if isinstance(entry, dict) and entry.get("field_name") == column:
            name = entry.get("name")
            return None if name == column and column.startswith("__index_level_") else name
    return None


def _without(schema_metadata: dict[bytes, bytes], metadata: dict[str, Any], dropped: list[str]) -> dict[bytes, bytes]:
    """The schema metadata with the pandas entries of ``dropped`` removed (and no stored index left)."""
    kept = dict(metadata)
    kept["columns"] = [
        entry
        for entry in metadata.get("columns", [])
        if not (isinstance(entry, dict) and entry.get("field_name") in dropped)
    ]
    kept["index_columns"] = [c for c in metadata.get("index_columns", []) if not isinstance(c, str) or c not in dropped]
    return {**schema_metadata, b"pandas": json.dumps(kept).encode()}
