"""Appending to obs: the new cells' rows encoded to the stored schema, the last shard rewritten, new shards added.

The schema stays what it is (docs/format.md, decision 17): columns are matched by name and kind; a categorical's
vocabulary grows by the new categories at its end, so that every stored code keeps its meaning and only the
shard that holds the dataset's last tiles is rewritten (with its rows as they are, plus the new ones). When
the vocabulary outgrows its code type (int8 to int16, say) every shard is rewritten with wider codes, the
one case where an append's cost grows with the dataset.
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
    for column in schema.columns:
        if column.name == INDEX_COLUMN:
            new_column, array = encode_index(obs.index)
            grown.append(column)
            arrays.append(array)
        else:
            new_column, array = _encode_like(column, obs[column.name])
            grown.append(new_column)
            arrays.append(array)
    new_schema = ObsSchema(tuple(grown))
    schema_text = new_schema.to_json()
    new_schema = ObsSchema.from_json(schema_text)
    new_rows = pa.Table.from_arrays(arrays, schema=new_schema.arrow_schema())

    per_file = int(manifest.obs_tiles_per_file or 1)
    n_old_tiles = manifest.n_tiles
    widened = any(a.arrow_type != b.arrow_type for a, b in zip(schema.columns, new_schema.columns, strict=True))
    first_shard = 0 if widened else (n_old_tiles - 1) // per_file if n_old_tiles else 0
    if not widened and n_old_tiles and n_old_tiles % per_file == 0 and manifest.tile_cells[-1] == manifest.tile_size:
        first_shard = n_old_tiles // per_file  # the last shard is full and its tiles too: nothing of it changes
    old = [
        pq.read_table(pa.BufferReader(shards(shard))).cast(new_schema.arrow_schema())
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
    new = pd.Index([str(n) for n in names])
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


def _encode_like(column: ObsColumn, series: pd.Series) -> tuple[ObsColumn, pa.Array]:
    """``series`` encoded as the stored ``column`` is; for a categorical, its vocabulary grown as needed."""
    name = column.name
    if column.kind == "category":
        return _encode_category_like(column, series)
    if column.kind == "string":
        if isinstance(series.dtype, pd.CategoricalDtype):
            series = series.astype(object)
        new_column, array = encode_column(name, series)
    else:
        new_column, array = encode_column(name, series, max_categories=0)
    if new_column.kind != column.kind:
        msg = (
            f"obs column {name!r} is stored as {column.kind} ({column.arrow_type}); the new cells' column is "
            f"{new_column.kind} ({series.dtype}): convert it to the stored kind first"
        )
        raise InvalidTypeError(msg)
    try:
        array = array.cast(column.pa_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        msg = (
            f"obs column {name!r} is stored as {column.arrow_type}; the new cells' values ({series.dtype}) cannot "
            f"be stored as that without loss ({exc}): convert them first"
        )
        raise InvalidTypeError(msg) from exc
    return column, array


def _encode_category_like(column: ObsColumn, series: pd.Series) -> tuple[ObsColumn, pa.Array]:
    name = column.name
    stored = list(column.categories or ())
    if isinstance(series.dtype, pd.CategoricalDtype):
        given = series.cat.categories.tolist()
        values = series.astype(object)
    else:
        values = series.astype(object)
        given = pd.unique(values.dropna()).tolist()
    kind = column.category_type
    for value in given:
        if kind is not None and not _same_kind(value, kind):
            msg = (
                f"obs column {name!r} has categories of type {kind.__name__}; the new cells' include {value!r} "
                f"({type(value).__name__}): convert the column to the stored category type first"
            )
            raise InvalidTypeError(msg)
    known = set(stored)
    added = [_plain(v) for v in given if _plain(v) not in known]
    if added and column.ordered:
        msg = (
            f"obs column {name!r} is an ordered categorical; the new cells bring categories it does not have "
            f"({added[:5]}), whose place in the order an append cannot choose: add them to the dataset first"
        )
        raise InvalidValueError(msg)
    vocabulary = stored + added
    codes = pd.Categorical(values.map(lambda v: v if pd.isna(v) else _plain(v)), categories=vocabulary).codes
    n = len(vocabulary)
    code_type = column.arrow_type
    wanted = "int8" if n <= 127 else ("int16" if n <= 32767 else "int32")
    if np.dtype(wanted).itemsize > np.dtype(code_type).itemsize:
        code_type = wanted
    grown = replace(column, categories=tuple(vocabulary), arrow_type=code_type)
    return grown, pa.array(np.asarray(codes).astype(code_type))


def _plain(value: Any) -> Any:
    """A category as the schema holds it (numpy scalars as Python ones)."""
    return value.item() if isinstance(value, np.generic) else value


def _same_kind(value: Any, kind: type) -> bool:
    value = _plain(value)
    if kind is bool or isinstance(value, bool):
        return isinstance(value, bool) and kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)
