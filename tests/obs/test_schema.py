"""obs/schema.json: parsing, every malformed field rejected with a message naming it, and serialization."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from deltacells import FormatError
from deltacells.format import ObsColumn, ObsSchema

GOOD: dict[str, Any] = {
    "format": "deltacells-obs",
    "version": 1,
    "columns": [
        {"name": "_index", "kind": "string", "arrow_type": "string", "categories": None},
        {"name": "ct", "kind": "category", "arrow_type": "int8", "categories": ["a", "b"], "ordered": True},
        {"name": "n", "kind": "numeric", "arrow_type": "int64", "categories": None, "pandas_dtype": "Int64"},
        {"name": "f", "kind": "numeric", "arrow_type": "float", "categories": None},
        {"name": "ok", "kind": "bool", "arrow_type": "bool", "categories": None, "future_key": [1, 2]},
        {"name": "k", "kind": "category", "arrow_type": "int16", "categories": [1, 5, 3]},
        {"name": "x", "kind": "category", "arrow_type": "int32", "categories": [0.5, 1.5]},
        {"name": "y", "kind": "category", "arrow_type": "int8", "categories": [True, False]},
        {"name": "z", "kind": "category", "arrow_type": "int8", "categories": []},
    ],
    "unknown_top_level": {"ignored": True},
}


def _with(column: int, **changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is _DROP:
            del doc["columns"][column][key]
        else:
            doc["columns"][column][key] = value
    return doc


_DROP = object()


def test_parse_good_schema() -> None:
    schema = ObsSchema.from_json(json.dumps(GOOD))
    assert schema.names == ["_index", "ct", "n", "f", "ok", "k", "x", "y", "z"]
    assert schema.has_index
    ct = schema.column("ct")
    assert ct.kind == "category" and ct.ordered and ct.categories == ("a", "b") and ct.category_type is str
    assert schema.column("n").pandas_dtype == "Int64"
    assert schema.column("k").categories == (1, 5, 3) and schema.column("k").category_type is int
    assert schema.column("x").category_type is float
    assert schema.column("y").categories == (True, False) and schema.column("y").category_type is bool
    assert schema.column("z").categories == () and schema.column("z").category_type is None
    assert [str(f.type) for f in schema.arrow_schema()] == [
        "string", "int8", "int64", "float", "bool", "int16", "int32", "int8", "int8"
    ]  # fmt: skip
    with pytest.raises(KeyError, match="no column 'nope'"):
        schema.column("nope")


def test_serialization_round_trip_and_ascii() -> None:
    schema = ObsSchema.from_json(json.dumps(GOOD))
    text = schema.to_json()
    assert ObsSchema.from_json(text) == schema
    assert "future_key" not in text and "unknown_top_level" not in text  # unknown keys are not kept
    unicode = ObsSchema((ObsColumn("ü/%", "category", "int8", categories=("日本", "ß")),))
    text = unicode.to_json()
    assert text.isascii()
    assert ObsSchema.from_json(text) == unicode
    assert json.loads(text)["columns"][0] == {
        "name": "ü/%", "kind": "category", "arrow_type": "int8", "categories": ["日本", "ß"]
    }  # fmt: skip


def test_schema_without_columns_is_valid() -> None:
    schema = ObsSchema.from_json('{"format": "deltacells-obs", "version": 1, "columns": []}')
    assert schema.names == [] and not schema.has_index


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ("not json", "not valid JSON"),
        ("[]", "must hold a JSON object"),
        ({**GOOD, "format": "other"}, "field format"),
        ({**GOOD, "version": 2}, "field version"),
        ({**GOOD, "version": True}, "field version"),
        ({**GOOD, "columns": {}}, "field columns must be a list"),
        ({**GOOD, "columns": [3]}, r"columns\[0\] must be a JSON object"),
        (_with(1, name=7), r"columns\[1\] field name must be a string"),
        (_with(1, name=_DROP), r"columns\[1\] field name"),
        (_with(1, kind="date"), "column 'ct': field kind is 'date'"),
        (_with(2, arrow_type="halffloat"), "column 'n': field arrow_type is 'halffloat'"),
        (_with(2, arrow_type="decimal"), "column 'n': field arrow_type"),
        (_with(2, arrow_type=_DROP), "column 'n': field arrow_type"),
        (_with(2, categories=["a"]), "column 'n': field categories must be null"),
        (_with(0, arrow_type="large_string"), "column '_index': field arrow_type"),
        (_with(4, arrow_type="int8"), "column 'ok': field arrow_type"),
        (_with(1, arrow_type="int64"), "column 'ct': field arrow_type is 'int64'"),
        (_with(1, arrow_type="uint8"), "column 'ct': field arrow_type"),
        (_with(1, categories=[str(i) for i in range(129)]), "column 'ct': field arrow_type is int8, too small"),
        (_with(5, categories=list(range(40_000))), "column 'k': field arrow_type is int16, too small"),
        (_with(1, categories=None), "column 'ct': field categories must be a list"),
        (_with(1, categories="ab"), "column 'ct': field categories must be a list"),
        (_with(1, categories=["a", 1]), "column 'ct': field categories mixes string and int"),
        (_with(5, categories=[1, 2.5]), "column 'k': field categories mixes integer and float"),
        (_with(5, categories=[1, True]), "column 'k': field categories mixes integer and bool"),
        (_with(1, categories=[["a"]]), "column 'ct': field categories holds"),
        (_with(1, categories=[None]), "column 'ct': field categories holds"),
        (_with(1, categories=["a", "a"]), "column 'ct': field categories holds 'a' twice"),
        (
            _with(6, categories=[1.5, float("inf")]),
            "column 'x': field categories holds a value that is not a finite number",
        ),
        (_with(1, ordered="yes"), "column 'ct': field ordered must be true or false"),
        (_with(2, ordered=True), "column 'n': field ordered is true"),
        (_with(2, pandas_dtype=5), "column 'n': field pandas_dtype must be a string"),
        ({**GOOD, "columns": [*GOOD["columns"], GOOD["columns"][2]]}, "column 'n' appears twice"),
    ],
)
def test_malformed_schema_is_rejected(doc: Any, match: str) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(FormatError, match=match) as info:
        ObsSchema.from_json(text, where="root/obs/schema.json")
    assert str(info.value).startswith("root/obs/schema.json: ")


def test_default_where_names_the_file() -> None:
    with pytest.raises(FormatError, match=r"^obs/schema\.json: column 'ct'"):
        ObsSchema.from_dict(_with(1, kind="x"))


def test_codes_that_fill_the_type_are_accepted() -> None:
    # 128 categories: codes 0 .. 127 still fit int8 (the writer, more cautious, would pick int16)
    schema = ObsSchema.from_dict(_with(1, categories=[str(i) for i in range(128)]))
    assert schema.column("ct").arrow_type == "int8"
