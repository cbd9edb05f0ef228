"""write_obs then ObsStore gives back the same DataFrame: values, missing values and dtypes, on pandas 2 and 3."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from obs_testlib import ObsDataset, manifest_for, refresh_manifest, tile_cells_for, write_obs_dataset

from deltacells.obs import ObsStore, default_string_dtype, write_obs
from deltacells.storage import FsspecStore


def _index(n: int) -> pd.Index:
    return pd.Index([f"cell-{i}" for i in range(n)])


def _frame(columns: dict[str, Any], n: int) -> pd.DataFrame:
    frame = pd.DataFrame({name: _values(value) for name, value in columns.items()})
    if not columns:
        frame = pd.DataFrame(index=range(n))
    frame.index = _index(n)
    return frame


def _values(value: Any) -> Any:
    return value.array if isinstance(value, pd.Series) else value


N = 11
MISSING = np.arange(N) % 4 == 1


def _explicit_frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(42)
    frames: dict[str, dict[str, Any]] = {
        "categoricals_with_missing": {
            "cell_type": pd.Categorical(np.where(MISSING, None, rng.choice(["T", "B", "NK"], N))),
            "all_missing": pd.Categorical([None] * N, categories=["x", "y"]),
            "unused_categories": pd.Categorical(["a"] * N, categories=["z", "a", "q"]),
        },
        "ordered_categoricals": {
            "grade": pd.Categorical(rng.choice(["lo", "mid", "hi"], N), categories=["lo", "mid", "hi"], ordered=True),
            "ordered_ints": pd.Categorical(np.where(MISSING, None, 3), categories=[3, 1], ordered=True),
        },
        "typed_categories": {
            "ints": pd.Categorical(rng.choice([10, -3, 7], N)),
            "int8": pd.Categorical(rng.choice(np.array([1, 2], dtype=np.int8), N)),
            "uint16": pd.Categorical(rng.choice(np.array([1, 65000], dtype=np.uint16), N)),
            "floats": pd.Categorical(np.where(MISSING, np.nan, rng.choice([0.1, 2.5, -1e300], N))),
            "float32": pd.Categorical(rng.choice(np.array([0.1, 3.5], dtype=np.float32), N)),
            "bools": pd.Categorical(np.where(MISSING, None, rng.random(N) < 0.5).tolist()),
            "empty_vocabulary": pd.Categorical([None] * N, categories=pd.Index([], dtype=object)),
            "nullable_int_categories": pd.Categorical([1] * N, categories=pd.Index([1, 2], dtype="Int64")),
            "object_categories": pd.Categorical(["a"] * N, categories=pd.Index(["a", "b"], dtype=object)),
            "string_categories": pd.Categorical(["a"] * N, categories=pd.Index(["a", "b"], dtype="string")),
        },
        "numpy_numbers": {
            **{
                str(dtype): np.array(
                    [np.iinfo(dtype).min, np.iinfo(dtype).max, 0, *rng.integers(0, 100, N - 3)], dtype=dtype
                )
                for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
            },
            "float16": np.array([np.nan, np.inf, -0.0, 65504.0, *rng.random(N - 4)], dtype=np.float16),
            "float32": np.array([np.nan, -np.inf, 1e-45, 3.4e38, *rng.random(N - 4)], dtype=np.float32),
            "float64": np.array([np.nan, np.inf, -0.0, 5e-324, *rng.random(N - 4)]),
            "all_nan": np.full(N, np.nan),
        },
        "nullable": {
            **{
                name: pd.array(np.where(MISSING, None, rng.integers(0, 100, N)).tolist(), dtype=name)
                for name in ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64")
            },
            "Int64_extremes": pd.array([2**63 - 1, -(2**63), None, *[1] * (N - 3)], dtype="Int64"),
            "Float32": pd.array(np.where(MISSING, None, 0.25).tolist(), dtype="Float32"),
            "Float64": pd.array(np.where(MISSING, None, 1e300).tolist(), dtype="Float64"),
            "boolean": pd.array(np.where(MISSING, None, rng.random(N) < 0.5).tolist(), dtype="boolean"),
            "boolean_no_missing": pd.array([True] * N, dtype="boolean"),
            "Int32_no_missing": pd.array(list(range(N)), dtype="Int32"),
        },
        "booleans": {"flag": rng.random(N) < 0.5},
        "strings": {
            "default": np.where(MISSING, None, "x").tolist(),
            "object": pd.Series(np.where(MISSING, None, "ÿ€𝄞").tolist(), dtype=object),
            "string_python": pd.array(np.where(MISSING, None, "a").tolist(), dtype=pd.StringDtype("python")),
            "string_pyarrow": pd.array(np.where(MISSING, None, "b").tolist(), dtype=pd.StringDtype("pyarrow")),
            "empty_and_nul": pd.Series(["", "\x00", *["z"] * (N - 2)], dtype=object),
            "all_missing": pd.Series([None] * N, dtype=object),
        },
        "odd_names": {
            name: np.arange(N)
            for name in (
                "a/b",
                "x y",
                "%",
                "%2F",
                "/",
                "ü",
                "",
                ".",
                "..",
                "a.b",
                ".lock",
                "verified.json",
                "schema.json",
                "x.arrow",
                "日本語",
                "n" * 300,
                "ü" * 100,
            )
        },
    }
    if hasattr(pd, "StringDtype"):
        try:
            nan_str = pd.StringDtype("python", na_value=np.nan)
        except TypeError:  # pandas without the NaN-variant string dtype
            nan_str = None
        if nan_str is not None:
            frames["strings"]["str_python"] = pd.array(np.where(MISSING, None, "q").tolist(), dtype=nan_str)
            frames["strings"]["str_pyarrow"] = pd.array(
                np.where(MISSING, None, "r").tolist(), dtype=pd.StringDtype("pyarrow", na_value=np.nan)
            )
    out = {name: _frame(columns, N) for name, columns in frames.items()}
    out["index_only"] = _frame({}, N)
    out["everything"] = pd.concat([out[k].add_prefix(f"{k}:") for k in frames if k != "odd_names"], axis=1)
    return out


FRAMES = _explicit_frames()
LAYOUTS = [(1, 1), (3, 2), (4, 3), (7, 1000), (1000, 1000), (2, 3)]  # (tile_size, obs_tiles_per_file)


@pytest.mark.parametrize("layout", LAYOUTS, ids=[f"tile{t}-per{p}" for t, p in LAYOUTS])
@pytest.mark.parametrize("name", list(FRAMES))
def test_round_trip(
    tmp_path: Path, write_obs_dataset: Callable[..., ObsDataset], name: str, layout: tuple[int, int]
) -> None:
    frame = FRAMES[name]
    tile_size, per_file = layout
    dataset = write_obs_dataset(frame, tile_size, obs_tiles_per_file=per_file)
    back = dataset.open(tmp_path / "cache").to_dataframe()
    pd.testing.assert_frame_equal(back, frame, check_exact=True)
    for column in frame.columns:
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            assert back[column].cat.categories.dtype == frame[column].cat.categories.dtype, column


def test_columns_one_by_one_and_in_any_order(tmp_path: Path, write_obs_dataset: Callable[..., ObsDataset]) -> None:
    frame = FRAMES["everything"]
    dataset = write_obs_dataset(frame, 3, obs_tiles_per_file=2)
    obs = dataset.open(tmp_path / "cache")
    assert obs.columns == list(frame.columns)
    for column in reversed(frame.columns):
        pd.testing.assert_series_equal(obs.read_column(column), frame[column], check_exact=True)
    subset = list(frame.columns[::-3])
    pd.testing.assert_frame_equal(obs.to_dataframe(subset), frame[subset], check_exact=True)
    pd.testing.assert_index_equal(obs.index, frame.index)
    empty = obs.to_dataframe([])
    assert empty.shape == (N, 0)
    pd.testing.assert_index_equal(empty.index, frame.index)


def test_more_than_max_categories_read_back_as_strings(
    tmp_path: Path, write_obs_dataset: Callable[..., ObsDataset]
) -> None:
    values = pd.Categorical(["c2", None, "c0", "c1", "c1"])
    numbers = pd.Categorical([0.5, 1.5, np.nan, 2.5, 0.5])
    frame = _frame({"barcode": values, "x": numbers}, 5)
    dataset = write_obs_dataset(frame, 2, max_categories=2)
    back = dataset.open(tmp_path / "cache").to_dataframe()
    expected = _frame(
        {
            "barcode": pd.Series(["c2", None, "c0", "c1", "c1"], dtype=default_string_dtype()),
            "x": pd.Series(["0.5", "1.5", None, "2.5", "0.5"], dtype=default_string_dtype()),
        },
        5,
    )
    pd.testing.assert_frame_equal(back, expected)


def test_zero_cells(tmp_path: Path, write_obs_dataset: Callable[..., ObsDataset]) -> None:
    frame = FRAMES["everything"].iloc[:0]
    dataset = write_obs_dataset(frame, 4)
    assert dataset.manifest.n_tiles == 0 and dataset.manifest.n_obs_shards == 0
    back = dataset.open(tmp_path / "cache").to_dataframe()
    assert back.shape == (0, frame.shape[1])
    pd.testing.assert_series_equal(back.dtypes, frame.dtypes)


def test_index_without_index_column(tmp_path: Path, write_obs_dataset: Callable[..., ObsDataset]) -> None:
    # DECISIONS.md 2: without _index the obs names are "0" .. "n-1"; make obs as another writer might, without it
    frame = _frame({"a": np.arange(5)}, 5)
    dataset = write_obs_dataset(frame, 2)
    schema_path = dataset.root / "obs" / "schema.json"
    schema = json.loads(schema_path.read_text())
    schema["columns"] = schema["columns"][1:]
    schema_path.write_text(json.dumps(schema))
    for s in range(dataset.manifest.n_obs_shards):
        path = dataset.root / "obs" / f"obs_{s:04d}.parquet"
        parquet = pq.ParquetFile(path)
        tables = [parquet.read_row_group(g).drop_columns(["_index"]) for g in range(parquet.num_row_groups)]
        with pq.ParquetWriter(path, tables[0].schema, compression="zstd") as writer:
            for table in tables:
                writer.write_table(table, row_group_size=len(table))
    refresh_manifest(dataset)
    obs = dataset.open(tmp_path / "cache")
    assert not obs.schema.has_index
    expected = frame.set_axis(pd.Index([str(i) for i in range(5)]))
    pd.testing.assert_frame_equal(obs.to_dataframe(), expected)
    pd.testing.assert_index_equal(obs.to_dataframe([]).index, expected.index)


# ---------------------------------------------------------------------- hypothesis

_NUMPY_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                 "float64", "bool"]  # fmt: skip
_NULLABLE = ["Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32", "Float64", "boolean"]
_TEXT = st.text(max_size=8)


@st.composite
def _numpy_column(draw: st.DrawFn, n: int) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(_NUMPY_DTYPES)))
    return draw(hnp.arrays(dtype, n))


@st.composite
def _nullable_column(draw: st.DrawFn, n: int) -> Any:
    name = draw(st.sampled_from(_NULLABLE))
    if name == "boolean":
        values = st.booleans()
    elif name.startswith("Float"):
        width = 32 if name == "Float32" else 64
        values = st.floats(width=width, allow_nan=False)
    else:
        info = np.iinfo(name.lower())
        values = st.integers(int(info.min), int(info.max))
    return pd.array(draw(st.lists(st.none() | values, min_size=n, max_size=n)), dtype=name)


@st.composite
def _string_column(draw: st.DrawFn, n: int) -> Any:
    values = draw(st.lists(st.none() | _TEXT, min_size=n, max_size=n))
    kind = draw(st.sampled_from(["default", "object", "string[python]", "string[pyarrow]", "str"]))
    if kind == "default":
        return pd.Series(values).array if n else pd.array([], dtype=default_string_dtype())
    if kind == "object":
        return np.array(values, dtype=object)
    if kind == "str":
        if not isinstance(default_string_dtype(), pd.StringDtype):  # pandas 2: text in object columns, no str
            return np.array(values, dtype=object)
        return pd.array(values, dtype=default_string_dtype())
    return pd.array(values, dtype=kind)


_CATEGORY_VALUES = {
    "str": _TEXT,
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False, allow_infinity=False),
    "bool": st.booleans(),
}


@st.composite
def _categorical_column(draw: st.DrawFn, n: int) -> pd.Categorical:
    kind = draw(st.sampled_from(sorted(_CATEGORY_VALUES)))
    categories = draw(st.lists(_CATEGORY_VALUES[kind], unique=True, max_size=2 if kind == "bool" else 6))
    codes = draw(st.lists(st.integers(-1, len(categories) - 1), min_size=n, max_size=n))
    index = pd.Index(categories, dtype={"str": None, "int": "int64", "float": "float64", "bool": "bool"}[kind])
    if kind == "str" and not categories:
        index = pd.Index([], dtype=object)
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(index, ordered=draw(st.booleans())))


@st.composite
def _frames(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(0, 25))
    names = draw(st.lists(st.text(max_size=6).filter(lambda s: s != "_index"), unique=True, max_size=5))
    makers = [_numpy_column, _nullable_column, _string_column, _categorical_column]
    columns = {name: draw(st.sampled_from(makers).flatmap(lambda make: make(n))) for name in names}
    frame = pd.DataFrame(columns) if columns else pd.DataFrame(index=range(n))
    frame.index = pd.Index(draw(st.lists(_TEXT, min_size=n, max_size=n)), dtype=default_string_dtype())
    return frame


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=_frames(), tile_size=st.integers(1, 9), per_file=st.sampled_from([1, 2, 3, 1000]), verify=st.booleans())
def test_round_trip_hypothesis(
    tmp_path: Path, frame: pd.DataFrame, tile_size: int, per_file: int, verify: bool
) -> None:
    root = tmp_path / uuid.uuid4().hex
    dataset = write_obs_dataset(root / "ds", frame, tile_size, obs_tiles_per_file=per_file)
    obs = dataset.open(root / "cache", verify=verify)
    pd.testing.assert_frame_equal(obs.to_dataframe(), frame, check_exact=True)
    if len(frame.columns):  # a second reader, column by column, from the cache
        again = dataset.open(root / "cache", verify=verify)
        column = frame.columns[0]
        pd.testing.assert_series_equal(again.read_column(column), frame[column], check_exact=True)
        assert again.store.shard_reads() == 0 and not again.store.ranged


@pytest.mark.parametrize("verify", [True, False])
def test_round_trip_through_an_fsspec_memory_store(tmp_path: Path, verify: bool) -> None:
    name = f"deltacells-obs-test-{uuid.uuid4().hex}"
    store = FsspecStore(f"memory://{name}/ds")
    try:
        frame = FRAMES["everything"]
        cells = tile_cells_for(len(frame), 3)
        result = write_obs(store, frame, cells, obs_tiles_per_file=2)
        obs = ObsStore(FsspecStore(store.url), manifest_for(cells, result), cache_dir=tmp_path / "cache", verify=verify)
        pd.testing.assert_frame_equal(obs.to_dataframe(), frame, check_exact=True)
    finally:
        fsspec.filesystem("memory").rm(f"/{name}", recursive=True)
