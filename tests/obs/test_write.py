"""write_obs: the shard layout of FORMAT.md, the fingerprint (DECISIONS.md 1), clear errors for what obs cannot hold."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from obs_testlib import sample_frame

from deltacells.format import ObsSchema
from deltacells.obs import write_obs
from deltacells.storage import FsspecStore


def _shard(root: Path, i: int) -> pq.ParquetFile:
    return pq.ParquetFile(root / "obs" / f"obs_{i:04d}.parquet")


@pytest.mark.parametrize(
    ("tile_cells", "per_file"),
    [([4, 4, 4, 1], 2), ([4, 4, 4, 1], 1), ([5, 5, 5], 3), ([3, 1, 2, 7, 1], 1000), ([1], 1), ([2, 2, 2, 2, 2], 3)],
)
def test_shard_layout(tmp_path: Path, tile_cells: list[int], per_file: int) -> None:
    frame = sample_frame(sum(tile_cells), seed=len(tile_cells))
    result = write_obs(FsspecStore(tmp_path), frame, np.asarray(tile_cells), obs_tiles_per_file=per_file)
    n_shards = -(-len(tile_cells) // per_file)
    assert result.obs_tiles_per_file == per_file
    assert len(result.shard_bytes) == len(result.shard_sha256) == n_shards
    assert sorted(p.name for p in (tmp_path / "obs").iterdir()) == sorted(
        ["schema.json", *(f"obs_{i:04d}.parquet" for i in range(n_shards))]
    )
    schema = ObsSchema.from_json((tmp_path / "obs" / "schema.json").read_text())
    assert schema == result.schema
    assert schema.names == ["_index", "cell_type", "n_counts", "pct", "flag", "note"]
    rows = []
    for s in range(n_shards):
        blob = (tmp_path / "obs" / f"obs_{s:04d}.parquet").read_bytes()
        assert len(blob) == result.shard_bytes[s]
        assert hashlib.sha256(blob).hexdigest() == result.shard_sha256[s]
        shard = _shard(tmp_path, s)
        assert shard.schema_arrow == schema.arrow_schema()
        tiles = tile_cells[s * per_file : (s + 1) * per_file]
        assert shard.metadata.num_row_groups == len(tiles)  # exactly one row group per tile
        for g, cells in enumerate(tiles):
            group = shard.metadata.row_group(g)
            assert group.num_rows == cells
            for c in range(group.num_columns):
                assert group.column(c).compression == "ZSTD"
                assert not group.column(c).is_stats_set
        rows.append(shard.read())
    table = pa.concat_tables(rows)
    assert table.column("_index").to_pylist() == list(frame.index)
    assert table.column("n_counts").to_pylist() == frame["n_counts"].tolist()
    # DECISIONS.md 1, computed independently
    doc = {
        "schema": (tmp_path / "obs" / "schema.json").read_text(encoding="utf-8"),
        "tile_cells": tile_cells,
        "shards": list(result.shard_sha256),
    }
    assert result.fingerprint == hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def test_missing_values_are_nulls_except_float_nan(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "f": [1.0, np.nan],
            "F": pd.array([1.0, None], dtype="Float64"),
            "I": pd.array([None, 1], dtype="Int16"),
            "B": pd.array([None, True], dtype="boolean"),
            "s": np.array(["a", None], dtype=object),
            "c": pd.Categorical(["a", None]),
        },
        index=["x", "y"],
    )
    write_obs(FsspecStore(tmp_path), frame, np.array([2]))
    table = _shard(tmp_path, 0).read()
    assert table.column("f").null_count == 0 and np.isnan(table.column("f").to_pylist()[1])
    assert table.column("F").to_pylist() == [1.0, None]
    assert table.column("I").to_pylist() == [None, 1]
    assert table.column("B").to_pylist() == [None, True]
    assert table.column("s").to_pylist() == ["a", None]
    assert table.column("c").to_pylist() == [0, -1]
    assert [str(f.type) for f in table.schema] == ["string", "double", "double", "int16", "bool", "string", "int8"]


@pytest.mark.parametrize(("n_categories", "code_type"), [(1, "int8"), (127, "int8"), (128, "int16"), (32767, "int16"),
                                                         (32768, "int32")])  # fmt: skip
def test_code_type_by_vocabulary_size(tmp_path: Path, n_categories: int, code_type: str) -> None:
    categories = [f"c{i}" for i in range(n_categories)]
    values = pd.Categorical.from_codes(np.arange(n_categories) % n_categories, categories=categories)
    result = write_obs(
        FsspecStore(tmp_path), pd.DataFrame({"c": values}), np.array([n_categories]), max_categories=10**6
    )
    column = result.schema.column("c")
    assert column.kind == "category" and column.arrow_type == code_type and len(column.categories) == n_categories
    assert str(_shard(tmp_path, 0).schema_arrow.field("c").type) == code_type


def test_more_than_max_categories_become_strings(tmp_path: Path) -> None:
    values = pd.Categorical(["b2", None, "b0", "b1"], categories=["b0", "b1", "b2"])
    ints = pd.Categorical([3, 1, None, 2])
    result = write_obs(
        FsspecStore(tmp_path), pd.DataFrame({"barcode": values, "k": ints}), np.array([4]), max_categories=2
    )
    for name in ("barcode", "k"):
        column = result.schema.column(name)
        assert (column.kind, column.arrow_type, column.categories) == ("string", "string", None)
    table = _shard(tmp_path, 0).read()
    assert table.column("barcode").to_pylist() == ["b2", None, "b0", "b1"]
    assert table.column("k").to_pylist() == ["3", "1", None, "2"]
    kept = write_obs(FsspecStore(tmp_path / "b"), pd.DataFrame({"barcode": values}), np.array([4]), max_categories=3)
    assert kept.schema.column("barcode").kind == "category"


def test_category_values_keep_their_type(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "s": pd.Categorical(["x", "y"]),
            "i": pd.Categorical([5, 3]),
            "i8": pd.Categorical(np.array([5, 3], dtype=np.int8)),
            "f": pd.Categorical([0.5, 1.25]),
            "b": pd.Categorical([True, False]),
            "o": pd.Categorical(["lo", "hi"], categories=["lo", "hi"], ordered=True),
            "e": pd.Categorical([None, None], categories=[]),
        }
    )
    write_obs(FsspecStore(tmp_path), frame, np.array([2]))
    columns = {c["name"]: c for c in json.loads((tmp_path / "obs" / "schema.json").read_text())["columns"]}
    assert columns["s"]["categories"] == ["x", "y"]
    assert columns["i"]["categories"] == [3, 5] and columns["i8"]["categories"] == [3, 5]
    assert columns["i8"]["pandas_dtype"] == "int8" and "pandas_dtype" not in columns["i"]
    assert columns["f"]["categories"] == [0.5, 1.25]
    assert columns["b"]["categories"] == [False, True]
    assert columns["o"]["ordered"] is True and columns["o"]["categories"] == ["lo", "hi"]
    assert "ordered" not in columns["s"]
    assert columns["e"]["categories"] == [] and columns["e"]["arrow_type"] == "int8"


def test_index_becomes_strings(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [1, 2, 3]}, index=pd.Index([10, 20, 30]))
    result = write_obs(FsspecStore(tmp_path), frame, np.array([3]))
    column = result.schema.columns[0]
    assert (column.name, column.kind, column.arrow_type) == ("_index", "string", "string")
    assert _shard(tmp_path, 0).read().column("_index").to_pylist() == ["10", "20", "30"]


def test_empty_obs(tmp_path: Path) -> None:
    result = write_obs(
        FsspecStore(tmp_path), pd.DataFrame(index=pd.Index([], dtype=object)), np.array([], dtype=np.int64)
    )
    assert result.shard_bytes == () and result.schema.names == ["_index"]
    assert (tmp_path / "obs" / "schema.json").exists()


def test_a_large_tile_is_still_one_row_group(tmp_path: Path) -> None:
    n = 1_100_000  # above pyarrow's default row group size of 1 Mi rows
    frame = pd.DataFrame({"x": np.zeros(n, dtype=np.int8)}, index=pd.Index(np.arange(n).astype(str)))
    write_obs(FsspecStore(tmp_path), frame, np.array([n]))
    assert _shard(tmp_path, 0).metadata.num_row_groups == 1


# ---------------------------------------------------------------------- errors


def _unsupported_columns() -> dict[str, Any]:
    n = 3
    return {
        "when": pd.Series(pd.date_range("2020-01-01", periods=n)),
        "when_tz": pd.Series(pd.date_range("2020-01-01", periods=n, tz="UTC")),
        "delta": pd.Series(pd.to_timedelta([1, 2, 3], unit="s")),
        "period": pd.Series(pd.period_range("2020-01", periods=n, freq="M")),
        "interval": pd.Series(pd.interval_range(0, n)),
        "complex": pd.Series(np.ones(n, dtype=np.complex128)),
        "mixed": pd.Series(["a", 1, None], dtype=object),
        "ints_as_objects": pd.Series([1, 2, 3], dtype=object),
        "bytes": pd.Series([b"a", b"b", b"c"], dtype=object),
        "sparse": pd.Series(pd.arrays.SparseArray([0.0, 1.0, 0.0])),
        "arrow_int": pd.Series([1, 2, 3], dtype="int64[pyarrow]"),
        "cat_of_dates": pd.Series(pd.Categorical(pd.date_range("2020-01-01", periods=n))),
        "cat_mixed": pd.Series(pd.Categorical(["a", 1, "a"])),
        "cat_tuples": pd.Series(
            pd.Categorical.from_codes([0, 1, 0], categories=pd.Index([(1, 2), (3, 4)], tupleize_cols=False))
        ),
        "cat_inf": pd.Series(pd.Categorical([1.0, np.inf, 1.0])),
    }


@pytest.mark.parametrize("name", list(_unsupported_columns()))
def test_unsupported_column_names_column_dtype_and_fix(tmp_path: Path, name: str) -> None:
    column = _unsupported_columns()[name]
    frame = pd.DataFrame({"fine": [1, 2, 3], name: column.to_numpy() if name == "interval" else column})
    with pytest.raises((ValueError, TypeError)) as info:
        write_obs(FsspecStore(tmp_path / "ds"), frame, np.array([3]))
    message = str(info.value)
    assert repr(name) in message
    if name != "cat_inf":
        assert f"df[{name!r}] = df[{name!r}].astype(str)" in message and "obs_columns=" in message
    if not name.startswith("cat_"):
        assert str(frame[name].dtype) in message
    assert not (tmp_path / "ds").exists(), "nothing is written when a column is refused"


def test_bad_strings_name_the_column(tmp_path: Path) -> None:
    frame = pd.DataFrame({"text": pd.Series(["ok", "\ud800"], dtype=object)})
    with pytest.raises(ValueError, match="'text'"):
        write_obs(FsspecStore(tmp_path), frame, np.array([2]))


@pytest.mark.parametrize(
    ("frame", "error", "match"),
    [
        (pd.DataFrame({0: [1, 2]}), TypeError, "column names must be strings, but column 0"),
        (pd.DataFrame([[1, 2], [3, 4]], columns=["a", "a"]), ValueError, r"Found repeated column names: \['a'\]"),
        (pd.DataFrame({"_index": [1, 2]}), ValueError, "named '_index'"),
        (pd.DataFrame({"a": [1, 2, 3]}), ValueError, "3 rows but the tiles hold 2 cells"),
    ],
)
def test_bad_frames(tmp_path: Path, frame: pd.DataFrame, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        write_obs(FsspecStore(tmp_path), frame, np.array([2]))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tile_cells": np.array([2, 0])}, "tile_cells must all be >= 1"),
        ({"tile_cells": np.array([[2]])}, "1-D array of integers"),
        ({"tile_cells": np.array([2.0])}, "1-D array of integers"),
        ({"obs_tiles_per_file": 0}, "obs_tiles_per_file must be an integer >= 1"),
        ({"obs_tiles_per_file": True}, "obs_tiles_per_file must be an integer >= 1, got True"),
        ({"max_categories": -1}, "max_categories must be an integer >= 0"),
    ],
)
def test_bad_arguments(tmp_path: Path, options: dict[str, Any], match: str) -> None:
    options = {"tile_cells": np.array([2]), **options}
    with pytest.raises((ValueError, TypeError), match=match):  # a bool where an integer goes: a TypeError
        write_obs(FsspecStore(tmp_path), pd.DataFrame({"a": [1, 2]}), **options)


def test_obs_must_be_a_dataframe(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="must be a pandas DataFrame"):
        write_obs(FsspecStore(tmp_path), pd.Series([1, 2]), np.array([2]))  # type: ignore[arg-type]
