"""``var_frame``: the gene table as ``pyarrow.Table.to_pandas`` gives it, without its slow paths for strings."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltacells.io._var_frame import string_values, var_frame

N = 40


def _genes() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "gene_ids": [f"ENSG{i:011d}" for i in range(N)],
            "feature_types": pd.Categorical(["Gene Expression", "Antibody Capture"] * (N // 2)),
            "highly_variable": np.arange(N) % 3 == 0,
            "means": np.linspace(0.0, 1.0, N),
            "n_cells": pd.array([1, None] * (N // 2), dtype="Int64"),
            "with_nulls": [None if i % 7 == 0 else f"s{i}" for i in range(N)],
            "string_dtype": pd.array([None if i % 5 == 0 else f"q{i}" for i in range(N)], dtype="string"),
        },
        index=[f"gene{i}" for i in range(N)],
    )


CASES = {
    "all columns": _genes(),
    "named index": _genes().rename_axis("gene_symbol"),
    "range index": _genes().reset_index(drop=True),
    "named range index": _genes().reset_index(drop=True).rename_axis("position"),
    "index only": pd.DataFrame(index=pd.Index([f"gene{i}" for i in range(N)])),
    "string columns only": _genes()[["gene_ids", "with_nulls"]],
    "integer index": _genes().set_axis(np.arange(N) * 2),
    "string dtype index": _genes().set_axis(pd.Index([f"g{i}" for i in range(N)], dtype="string")),
    "no string column": _genes()[["means", "highly_variable"]],
}


def _parquet_table(frame: pd.DataFrame, **kwargs: object) -> pa.Table:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, **kwargs)
    return pq.read_table(io.BytesIO(buffer.getvalue()))


@pytest.mark.parametrize("index", [None, False], ids=["index kept", "index dropped"])
@pytest.mark.parametrize("case", list(CASES))
def test_same_frame_as_to_pandas(case: str, index: bool | None) -> None:
    table = _parquet_table(CASES[case], index=index)
    expected = table.to_pandas()
    got = var_frame(table)
    pd.testing.assert_frame_equal(got, expected, check_index_type=True, check_column_type=True)
    assert type(got.index) is type(expected.index)
    assert got.index.name == expected.index.name


@pytest.mark.parametrize(
    "table",
    [
        pa.table({"name": ["a", "b"], "count": [1, 2]}),
        pa.table({"name": pa.array(["a", None], pa.large_string())}),
        pa.table({"a": ["x", "y"], "b": ["z", "w"]}),
    ],
    ids=["no pandas metadata", "large strings", "strings only, no metadata"],
)
def test_tables_without_pandas_metadata(table: pa.Table) -> None:
    pd.testing.assert_frame_equal(var_frame(table), table.to_pandas())


def test_object_strings_are_python_str() -> None:
    frame = var_frame(_parquet_table(_genes()))
    assert list(frame.index[:2]) == ["gene0", "gene1"]
    assert frame["gene_ids"].iloc[3] == "ENSG00000000003"
    assert pd.isna(frame["with_nulls"].iloc[0])


@pytest.mark.parametrize("index", [None, False], ids=["index kept", "index dropped"])
@pytest.mark.parametrize("case", list(CASES))
def test_string_values_are_the_frames_own(case: str, index: bool | None) -> None:
    """A column (or the index) read alone is the frame's, or None where only the frame can say."""
    table = _parquet_table(CASES[case], index=index)
    frame = table.to_pandas()
    for name in [None, *frame.columns, "absent"]:
        values = string_values(table, name)
        if values is None:
            continue  # read through the frame instead
        expected = frame.index if name is None else frame[name]
        assert values.dtype == object
        assert not pd.isna(expected).any()
        assert pd.api.types.is_string_dtype(expected)
        assert list(values) == [str(value) for value in expected]
    stored_strings = not isinstance(frame.index, pd.RangeIndex) and pd.api.types.is_string_dtype(frame.index)
    assert (string_values(table, None) is not None) == stored_strings
    assert string_values(table, "with_nulls") is None
    assert string_values(table, "absent") is None
