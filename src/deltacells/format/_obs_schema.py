"""``obs/schema.json``: the obs columns, their kinds, Arrow types and category vocabularies.

docs/format.md, "Obs: the cell table": ``{"format": "deltacells-obs", "version": 1, "columns": [...]}``, each column
``{"name", "kind", "arrow_type", "categories"}``. Decision 11 of docs/format.md adds ``"ordered": true`` for ordered
categoricals (11) and categories of one JSON type each: strings, integers, floats or booleans (12).

This implementation also writes an optional ``"pandas_dtype"`` per column, which other readers ignore
and ours uses to give back exactly the pandas dtype that was written:

* ``numeric``: the dtype's name (``"int32"``, ``"float16"``, ``"Int64"``, ``"Float32"``...);
* ``bool``: ``"bool"`` or ``"boolean"``;
* ``string``: absent when the column had the default string dtype of the writing pandas (``object``
  in pandas 2, ``str`` in pandas 3); otherwise ``"object"``, ``"string[python]"``, ``"string[pyarrow]"``,
  ``"str[python]"`` or ``"str[pyarrow]"``;
* ``category``: the dtype of the *categories*, when it is not the default for their JSON type
  (``int64``, ``float64``, ``bool``, and the default string dtype), e.g. ``"int8"`` or ``"float32"``.

Unknown keys are ignored; anything malformed raises :class:`~deltacells.errors.FormatError` naming
``obs/schema.json`` and the column and field at fault.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltacells._json import parse_json
from deltacells.errors import FormatError, UnknownKeyError
from deltacells.format._names import INDEX_COLUMN, OBS_SCHEMA_NAME

__all__ = [
    "CATEGORY_ARROW_TYPES",
    "INDEX_COLUMN",
    "KINDS",
    "NUMERIC_ARROW_TYPES",
    "OBS_FORMAT_NAME",
    "OBS_FORMAT_VERSION",
    "SCHEMA_NAME",
    "ObsColumn",
    "ObsSchema",
    "arrow_type",
]

OBS_FORMAT_NAME = "deltacells-obs"
OBS_FORMAT_VERSION = 1
SCHEMA_NAME = OBS_SCHEMA_NAME


KINDS = ("category", "numeric", "bool", "string")

#: Arrow types of category codes, by the largest code they hold.
CATEGORY_ARROW_TYPES = {"int8": 2**7 - 1, "int16": 2**15 - 1, "int32": 2**31 - 1}

#: Arrow types a numeric column may have (``float`` is float32; ``halffloat`` is not allowed).
NUMERIC_ARROW_TYPES = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float": pa.float32(),
    "double": pa.float64(),
}

_ARROW_TYPES = {**NUMERIC_ARROW_TYPES, "bool": pa.bool_(), "string": pa.string()}

#: The JSON types a vocabulary may have, by the name used in messages.
_CATEGORY_VALUE_TYPES = {str: "string", int: "integer", float: "float", bool: "boolean"}


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type named ``name`` in a schema (``"int8"``, ``"float"``, ``"string"``...)."""
    return _ARROW_TYPES[name]


@dataclass(frozen=True)
class ObsColumn:
    """One column of the obs schema.

    Parameters
    ----------
    name
        The column name (``_index`` holds the obs names).
    kind
        ``"category"``, ``"numeric"``, ``"bool"`` or ``"string"``.
    arrow_type
        The Arrow type of the stored values (for categories, of the codes).
    categories
        The global vocabulary of a category column (``None`` for the other kinds).
    ordered
        Whether a category column is an ordered categorical.
    pandas_dtype
        Optional hint that restores the exact pandas dtype (see the module docstring).
    index_name
        For ``_index`` only: the name of the pandas index (key ``"index_name"``; other readers ignore it).
    """

    name: str
    kind: str
    arrow_type: str
    categories: tuple[Any, ...] | None = None
    ordered: bool = False
    pandas_dtype: str | None = None
    index_name: str | None = None

    @property
    def pa_type(self) -> pa.DataType:
        """The Arrow type of the stored values."""
        return arrow_type(self.arrow_type)

    @property
    def category_type(self) -> type | None:
        """The Python type of the categories (``str``, ``int``, ``float``, ``bool``); ``None`` if there are none."""
        if not self.categories:
            return None
        return type(self.categories[0])

    def to_dict(self) -> dict[str, Any]:
        """The column as written in ``obs/schema.json``."""
        doc: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "arrow_type": self.arrow_type,
            "categories": None if self.categories is None else list(self.categories),
        }
        if self.ordered:
            doc["ordered"] = True
        if self.pandas_dtype is not None:
            doc["pandas_dtype"] = self.pandas_dtype
        if self.index_name is not None:
            doc["index_name"] = self.index_name
        return doc

    @classmethod
    def from_dict(cls, doc: Any, *, position: int, where: str = SCHEMA_NAME) -> ObsColumn:
        """Check one decoded entry of ``columns`` and build an :class:`ObsColumn`.

        Raises
        ------
        FormatError
            Naming the column and the field at fault.
        """
        if not isinstance(doc, dict):
            msg = f"{where}: columns[{position}] must be a JSON object, not {type(doc).__name__}"
            raise FormatError(msg)
        name = doc.get("name")
        if not isinstance(name, str) or not _is_utf8(name):
            msg = f"{where}: columns[{position}] field name must be a string (valid UTF-8), not {name!r}"
            raise FormatError(msg)
        at = f"{where}: column {name!r}"
        kind = doc.get("kind")
        if kind not in KINDS:
            msg = f"{at}: field kind is {kind!r}, must be one of {', '.join(KINDS)}"
            raise FormatError(msg)
        type_name = doc.get("arrow_type")
        if not isinstance(type_name, str):
            msg = f"{at}: field arrow_type must be a string, not {type_name!r}"
            raise FormatError(msg)
        categories = _check_categories(doc, kind, at)
        _check_arrow_type(type_name, kind, categories, at)
        ordered = doc.get("ordered", False)
        if not isinstance(ordered, bool):
            msg = f"{at}: field ordered must be true or false, not {ordered!r}"
            raise FormatError(msg)
        if ordered and kind != "category":
            msg = f"{at}: field ordered is true but the column is of kind {kind!r}, not 'category'"
            raise FormatError(msg)
        hint = doc.get("pandas_dtype")
        if hint is not None and not isinstance(hint, str):
            msg = f"{at}: field pandas_dtype must be a string, not {hint!r}"
            raise FormatError(msg)
        index_name = doc.get("index_name")
        if not isinstance(index_name, str):
            index_name = None  # an extension of ours: ignore what we do not understand
        return cls(
            name=name,
            kind=kind,
            arrow_type=type_name,
            categories=categories,
            ordered=ordered,
            pandas_dtype=hint,
            index_name=index_name,
        )


def _check_categories(doc: dict[str, Any], kind: str, at: str) -> tuple[Any, ...] | None:
    categories = doc.get("categories")
    if kind != "category":
        if categories is not None:
            msg = f"{at}: field categories must be null for a column of kind {kind!r}"
            raise FormatError(msg)
        return None
    if not isinstance(categories, list):
        msg = f"{at}: field categories must be a list for a category column, not {type(categories).__name__}"
        raise FormatError(msg)
    if categories:
        first = type(categories[0])
        if first not in _CATEGORY_VALUE_TYPES:
            msg = (
                f"{at}: field categories holds {categories[0]!r} ({first.__name__}); categories must be strings, "
                "integers, floats or booleans"
            )
            raise FormatError(msg)
        for value in categories:
            if type(value) is not first:
                msg = (
                    f"{at}: field categories mixes {_CATEGORY_VALUE_TYPES[first]} and {type(value).__name__} values "
                    f"(e.g. {value!r}); all categories must be of one type"
                )
                raise FormatError(msg)
        if first is float and not all(math.isfinite(v) for v in categories):
            msg = f"{at}: field categories holds a value that is not a finite number"
            raise FormatError(msg)
        if len(set(categories)) != len(categories):
            seen: set[Any] = set()
            duplicate = next(v for v in categories if v in seen or _add(seen, v))
            msg = f"{at}: field categories holds {duplicate!r} twice; categories must be unique"
            raise FormatError(msg)
    return tuple(categories)


def _add(seen: set[Any], value: Any) -> bool:
    """Add ``value`` to ``seen``; False (a value seen for the first time is no duplicate)."""
    seen.add(value)
    return False


def _is_utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (JSON allows lone surrogates, which cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_arrow_type(type_name: Any, kind: str, categories: tuple[Any, ...] | None, at: str) -> None:
    if kind == "category":
        if type_name not in CATEGORY_ARROW_TYPES:
            msg = f"{at}: field arrow_type is {type_name!r}; category codes must be int8, int16 or int32"
            raise FormatError(msg)
        assert categories is not None
        if len(categories) - 1 > CATEGORY_ARROW_TYPES[type_name]:
            msg = f"{at}: field arrow_type is {type_name}, too small for the codes of {len(categories)} categories"
            raise FormatError(msg)
    elif kind == "numeric":
        if type_name not in NUMERIC_ARROW_TYPES:
            msg = (
                f"{at}: field arrow_type is {type_name!r}; a numeric column must be one of "
                f"{', '.join(NUMERIC_ARROW_TYPES)}"
            )
            raise FormatError(msg)
    elif type_name != kind:
        msg = f"{at}: field arrow_type is {type_name!r}; a {kind} column must have arrow_type {kind!r}"
        raise FormatError(msg)


@dataclass(frozen=True)
class ObsSchema:
    """The parsed contents of ``obs/schema.json``: the columns, in the order of the shards."""

    columns: tuple[ObsColumn, ...]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for column in self.columns:
            if column.name in seen:
                msg = f"{SCHEMA_NAME}: column {column.name!r} appears twice; column names must be unique"
                raise FormatError(msg)
            seen.add(column.name)

    @property
    def names(self) -> list[str]:
        """All column names, ``_index`` included, in stored order."""
        return [c.name for c in self.columns]

    @functools.cached_property
    def _by_name(self) -> dict[str, ObsColumn]:
        return {c.name: c for c in self.columns}

    @property
    def has_index(self) -> bool:
        """Whether the obs names are stored (as column ``_index``)."""
        return INDEX_COLUMN in self._by_name

    def column(self, name: str) -> ObsColumn:
        """The column called ``name``.

        Raises
        ------
        KeyError
            If there is no such column.
        """
        column = self._by_name.get(name)
        if column is not None:
            return column
        shown = [n for n in self.names if n != INDEX_COLUMN]
        msg = f"obs has no column {name!r}; its columns are {shown}"
        raise UnknownKeyError(msg)

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the shards."""
        return pa.schema([pa.field(c.name, c.pa_type) for c in self.columns])

    def to_dict(self) -> dict[str, Any]:
        """The schema as a JSON-ready dict."""
        return {
            "format": OBS_FORMAT_NAME,
            "version": OBS_FORMAT_VERSION,
            "columns": [c.to_dict() for c in self.columns],
        }

    def to_json(self) -> str:
        """The text of ``obs/schema.json`` (ASCII; the fingerprint hashes exactly this text)."""
        return json.dumps(self.to_dict(), indent=1, ensure_ascii=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str = SCHEMA_NAME) -> ObsSchema:
        """Parse and check the text of ``obs/schema.json``.

        Raises
        ------
        FormatError
            If the text is not valid JSON or does not describe a valid schema.
        """
        return cls.from_dict(parse_json(text, where=where), where=where)

    @classmethod
    def from_dict(cls, doc: Any, *, where: str = SCHEMA_NAME) -> ObsSchema:
        """Check a decoded schema and build an :class:`ObsSchema`.

        Raises
        ------
        FormatError
            Naming the column and field at fault.
        """
        if not isinstance(doc, dict):
            msg = f"{where}: must hold a JSON object, not {type(doc).__name__}"
            raise FormatError(msg)
        if doc.get("format") != OBS_FORMAT_NAME:
            msg = f"{where}: field format is {doc.get('format')!r}, expected {OBS_FORMAT_NAME!r}"
            raise FormatError(msg)
        version = doc.get("version")
        if version != OBS_FORMAT_VERSION or isinstance(version, bool):
            msg = f"{where}: field version is {version!r}; this reader understands version {OBS_FORMAT_VERSION} only"
            raise FormatError(msg)
        entries = doc.get("columns")
        if not isinstance(entries, list):
            msg = f"{where}: field columns must be a list, not {type(entries).__name__}"
            raise FormatError(msg)
        columns = tuple(ObsColumn.from_dict(entry, position=i, where=where) for i, entry in enumerate(entries))
        seen: set[str] = set()
        for column in columns:
            if column.name in seen:
                msg = f"{where}: column {column.name!r} appears twice; column names must be unique"
                raise FormatError(msg)
            seen.add(column.name)
        return cls(columns)
