"""Appending to obs: the new cells' rows encoded to the stored schema, the last shard rewritten, new shards added.

The schema stays what it is (docs/format.md, decision 17): columns are matched by name, and each becomes what
:func:`anndata.concat` of the dataset's cells and the new ones makes it (:mod:`deltacells.obs._concat`), or the
append is refused when that would change its kind (a categorical made ``object`` by strings, or by ordered
categories that differ; numbers made ``object`` by text). A categorical's categories become concat's: the same
when the new cells have the same ones, else the union in natural order (``GW16_2`` before ``GW16_10``); numbers
widen as concat widens them (int32 to int64, int to float64), bools with missing values become ``boolean``.

Only the shard that holds the dataset's last tiles is rewritten (with its rows as they are, plus the new ones)
while every stored value keeps its encoding: new categories that sort after the stored ones, a dtype that
changes only its pandas hint. When the stored values change encoding, every shard is rewritten: categories
reordered (each stored code renumbered), codes outgrowing their type (int8 to int16), numbers widened; these
are the cases where an append's cost grows with the dataset.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.format import INDEX_COLUMN, OBS_SCHEMA_NAME, ObsColumn, ObsSchema, obs_fingerprint, obs_shard_path
from deltacells.obs._concat import as_joined, joined_dtype, renumbered
from deltacells.obs._decode import to_pandas_values
from deltacells.obs._dtypes import string_hint
from deltacells.obs._encode import encode_column, encode_index
from deltacells.obs._shards import read_shard_bytes
from deltacells.obs._write import _shard_bytes

if TYPE_CHECKING:
    from deltacells.format import Manifest
    from deltacells.storage import BaseStore

__all__ = ["append_obs", "stored_obs_names"]


class _Shards:
    """The dataset's shards, each read (and checked against the manifest) once however often it is asked for."""

    def __init__(self, store: BaseStore, manifest: Manifest) -> None:
        self.store, self.manifest = store, manifest
        self._blobs: dict[int, bytes] = {}

    def __call__(self, shard: int) -> bytes:
        if shard not in self._blobs:
            self._blobs[shard] = read_shard_bytes(self.store, self.manifest, shard)
        return self._blobs[shard]


def stored_obs_names(store: BaseStore, manifest: Manifest, *, shards: _Shards | None = None) -> pd.Index:
    """The dataset's obs names (its ``_index`` column, read from every shard, each checked against the manifest)."""
    shards = shards or _Shards(store, manifest)
    names: list[pa.ChunkedArray] = []
    for shard in range(manifest.n_obs_shards):
        blob = shards(shard)
        names.append(pq.read_table(pa.BufferReader(blob), columns=[INDEX_COLUMN]).column(0))
    if not names:
        return pd.Index([], dtype=object)
    index: pd.Index = pd.Index(pa.chunked_array([c for column in names for c in column.chunks]).to_pandas())
    return index


def append_obs(
    store: BaseStore,
    target: BaseStore,
    manifest: Manifest,
    obs: pd.DataFrame,
    tile_cells: np.ndarray,
) -> tuple[dict[str, Any], list[str]]:
    """Write the obs of a dataset grown by ``obs``'s rows into ``target``: the shards that change and the schema.

    Parameters
    ----------
    store
        The dataset as it is (read: its schema, the last shard).
    target
        Where the changed objects go (the append's staging prefix), at their paths in the dataset.
    manifest
        The dataset's manifest, before the append.
    obs
        The new cells' obs, one row per new cell; its index holds their names.
    tile_cells
        Cells per tile of the grown dataset.

    Returns
    -------
    dict, list of str
        The manifest's obs fields for the grown dataset, and the paths written.

    Raises
    ------
    ValueError, TypeError
        For columns that differ from the stored ones (naming them), names already in the dataset, values that
        the stored column type cannot hold, or new categories of an ordered categorical.
    """
    schema = ObsSchema.from_json(store.read(OBS_SCHEMA_NAME))
    stored_columns = [c for c in schema.columns if c.name != INDEX_COLUMN]
    _check_names(obs, [c.name for c in stored_columns])
    shards = _Shards(store, manifest)
    _check_new_names(shards, obs.index)
    grown: list[ObsColumn] = []
    arrays: list[pa.Array] = []
    recodes: dict[str, np.ndarray] = {}  # the new code of each stored one, where categories were reordered
    for column in schema.columns:
        if column.name == INDEX_COLUMN:
            new_column, array = encode_index(obs.index)
            grown.append(column)
            arrays.append(array)
        else:
            new_column, array, recode = _encode_like(column, obs[column.name])
            grown.append(new_column)
            arrays.append(array)
            if recode is not None:
                recodes[column.name] = recode
    new_schema = ObsSchema(tuple(grown))
    schema_text = new_schema.to_json()
    new_schema = ObsSchema.from_json(schema_text)
    new_rows = pa.Table.from_arrays(arrays, schema=new_schema.arrow_schema())

    per_file = int(manifest.obs_tiles_per_file or 1)
    n_old_tiles = manifest.n_tiles
    widened = any(a.arrow_type != b.arrow_type for a, b in zip(schema.columns, new_schema.columns, strict=True))
    rewritten = widened or bool(recodes)  # every stored row changes: every shard is written again
    first_shard = 0 if rewritten else (n_old_tiles - 1) // per_file if n_old_tiles else 0
    if not rewritten and n_old_tiles and n_old_tiles % per_file == 0 and manifest.tile_cells[-1] == manifest.tile_size:
        first_shard = n_old_tiles // per_file  # the last shard is full and its tiles too: nothing of it changes
    old = [
        _recoded(pq.read_table(pa.BufferReader(shards(shard))), recodes).cast(new_schema.arrow_schema())
        for shard in range(first_shard, manifest.n_obs_shards)
    ]
    rows = pa.concat_tables([*old, new_rows])

    cells = np.asarray(tile_cells, dtype=np.int64)
    limits = np.cumsum(cells)
    starts = limits - cells
    offset = int(starts[first_shard * per_file]) if first_shard * per_file < len(cells) else int(limits[-1])
    shard_bytes = list(manifest.obs_shard_bytes[:first_shard])
    shard_sha256 = list(manifest.obs_shard_sha256[:first_shard])
    written: list[str] = []
    for shard, first in enumerate(range(first_shard * per_file, len(cells), per_file), start=first_shard):
        tiles = range(first, min(first + per_file, len(cells)))
        blob = _shard_bytes(rows, new_schema, [(int(starts[t]) - offset, int(cells[t])) for t in tiles])
        target.write(obs_shard_path(shard), blob)
        written.append(obs_shard_path(shard))
        shard_bytes.append(len(blob))
        shard_sha256.append(hashlib.sha256(blob).hexdigest())
    target.write(OBS_SCHEMA_NAME, schema_text.encode("utf-8"))
    written.append(OBS_SCHEMA_NAME)
    fields = {
        "has_obs": True,
        "obs_tiles_per_file": per_file,
        "obs_shard_bytes": tuple(shard_bytes),
        "obs_shard_sha256": tuple(shard_sha256),
        "obs_fingerprint": obs_fingerprint(schema_text, cells.tolist(), shard_sha256),
    }
    return fields, written


def _recoded(table: pa.Table, recodes: dict[str, np.ndarray]) -> pa.Table:
    """``table`` (stored rows) with each category column of ``recodes`` renumbered (code -1 stays missing)."""
    for name, positions in recodes.items():
        i = table.schema.get_field_index(name)
        codes = table.column(i).fill_null(-1).to_numpy().astype(np.int64)
        table = table.set_column(i, name, pa.array(renumbered(codes, positions), type=pa.int64()))
    return table


def _check_names(obs: pd.DataFrame, stored: list[str]) -> None:
    given = [str(c) for c in obs.columns]
    missing = [c for c in stored if c not in given]
    extra = [c for c in given if c not in stored]
    if missing or extra:
        msg = (
            f"the new cells' obs columns differ from the dataset's: missing {missing}, not in the dataset {extra}; "
            "an append stores the dataset's columns (add the missing ones, drop the others, or pass obs_columns=)"
        )
        raise InvalidValueError(msg)


def _check_new_names(shards: _Shards, names: pd.Index) -> None:
    """The new cells' names must be unique and not name a cell of the dataset already."""
    named = names[~np.asarray(names.isna())]  # missing names are no names: they cannot repeat one
    new = pd.Index([str(n) for n in named])
    duplicated = new[new.duplicated()].unique().tolist()
    if not duplicated:
        present = stored_obs_names(shards.store, shards.manifest, shards=shards)
        duplicated = new[new.isin(present)].unique().tolist()
    if duplicated:
        msg = (
            f"{len(duplicated)} obs name(s) of the new cells are not unique in the grown dataset (e.g. "
            f"{duplicated[:3]}); make them unique first, e.g. with a suffix per batch: "
            "adata.obs_names = adata.obs_names + '-batch2'"
        )
        raise InvalidValueError(msg)


def _encode_like(column: ObsColumn, series: pd.Series) -> tuple[ObsColumn, pa.Array, np.ndarray | None]:
    """``series`` encoded as the stored ``column`` becomes when it is joined with it as :func:`anndata.concat` joins.

    Returns the grown column, the new cells' values, and for a categorical whose codes change meaning (its
    categories reordered) the new code of each stored one (None when stored codes keep theirs).

    Raises
    ------
    InvalidTypeError, InvalidValueError
        When the join would change the column's kind (naming the dtype concat gives), or the values cannot be
        stored in the column's type.
    """
    name = column.name
    stored = to_pandas_values(column, pa.array([], type=column.pa_type)).dtype
    if column.kind == "string" and isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)  # a categorical stored as text (more categories than max_categories)
    joined = joined_dtype([stored, series.dtype], name=name)
    if column.kind == "category":
        return _encode_category_like(column, series, stored, joined)
    if column.kind == "string":
        new_column, array = encode_column(name, series)
        hint = string_hint(joined) if new_column.kind == "string" and _is_text(joined) else column.pandas_dtype
        column = replace(column, pandas_dtype=hint)
    else:
        if isinstance(joined, pd.CategoricalDtype) or not _same_family(joined, column.kind):
            raise InvalidTypeError(_kind_changes(column, series, joined))
        new_column, _ = encode_column(name, pd.Series([], dtype=joined), max_categories=0)
        column = replace(column, arrow_type=new_column.arrow_type, pandas_dtype=new_column.pandas_dtype)
        new_column, array = encode_column(name, pd.Series(as_joined(series.array, joined)), max_categories=0)
    if new_column.kind != column.kind:
        raise InvalidTypeError(_kind_changes(column, series, joined))
    try:
        array = array.cast(column.pa_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        msg = (
            f"obs column {name!r} is stored as {column.arrow_type}; the new cells' values ({series.dtype}) cannot "
            f"be stored as that without loss ({exc}): convert them first"
        )
        raise InvalidTypeError(msg) from exc
    return column, array, None


def _encode_category_like(
    column: ObsColumn, series: pd.Series, stored: pd.CategoricalDtype, joined: Any
) -> tuple[ObsColumn, pa.Array, np.ndarray | None]:
    """A categorical's new values, in the categories concat gives (and the stored codes' new numbers)."""
    name = column.name
    if not isinstance(joined, pd.CategoricalDtype):
        why = (
            "ordered categoricals join only when their categories are the same, in the same order, and ordered in both"
            if column.ordered or getattr(series.dtype, "ordered", False)
            else "only categoricals join as a categorical"
        )
        msg = f"{_kind_changes(column, series, joined)} ({why})"
        raise InvalidValueError(msg)
    new_column, array = encode_column(name, pd.Series(as_joined(series.array, joined)), max_categories=2**31 - 1)
    if column.arrow_type != new_column.arrow_type and _code_width(column) > _code_width(new_column):
        new_column = replace(new_column, arrow_type=column.arrow_type)  # codes never narrower than stored
        array = array.cast(new_column.pa_type)
    positions = joined.categories.get_indexer(stored.categories).astype(np.int64)
    recode = None if np.array_equal(positions, np.arange(positions.shape[0])) else positions
    return new_column, array, recode


def _kind_changes(column: ObsColumn, series: pd.Series, joined: Any) -> str:
    """Why an append refuses a column whose join changes its kind (what concat would make it, and the fix)."""
    stored = (
        f"{'an ordered ' if column.ordered else 'a '}categorical of {len(column.categories or ())} categories"
        if column.kind == "category"
        else f"{column.kind} ({column.arrow_type})"
    )
    return (
        f"obs column {column.name!r} is stored as {stored}; anndata.concat of the dataset's cells and the new "
        f"ones would make it {joined} (the new cells' column is {series.dtype}), which the dataset's column cannot "
        "hold: convert the new cells' column to the stored kind first"
    )


def _same_family(dtype: Any, kind: str) -> bool:
    """Whether a pandas dtype is stored as obs kind ``kind`` (``"bool"`` or ``"numeric"``)."""
    is_bool = pd.api.types.is_bool_dtype(dtype)
    if kind == "bool":
        return bool(is_bool)
    return bool(pd.api.types.is_numeric_dtype(dtype)) and not is_bool


def _is_text(dtype: Any) -> bool:
    return isinstance(dtype, pd.StringDtype) or dtype == np.dtype(object)


def _code_width(column: ObsColumn) -> int:
    return int(np.dtype(column.arrow_type).itemsize)
