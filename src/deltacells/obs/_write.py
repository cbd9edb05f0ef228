"""Writing obs: ``obs/schema.json`` and the shards ``obs/obs_NNNN.parquet``, one row group per tile.

Each shard is uploaded (:meth:`~deltacells.storage.BaseStore.submit_write`) while the next one is built, one
upload at a time and in order (so a killed writer leaves the first shards, never a later one without an
earlier one, and memory holds two shards at most); :func:`write_obs` returns once all are stored.
"""

from __future__ import annotations

import contextlib
import hashlib
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltacells._checks import check_integer
from deltacells._parquet import parquet_write_options
from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.format import INDEX_COLUMN, OBS_SCHEMA_NAME, ObsSchema, obs_fingerprint, obs_shard_path
from deltacells.obs._encode import DEFAULT_MAX_CATEGORIES, encode_column, encode_index

if TYPE_CHECKING:
    from deltacells.storage import BaseStore

__all__ = ["DEFAULT_OBS_TILES_PER_FILE", "ObsWriteResult", "check_obs", "write_obs"]

#: Tiles (row groups) per obs shard unless the caller says otherwise.
DEFAULT_OBS_TILES_PER_FILE = 1000


@dataclass(frozen=True)
class ObsWriteResult:
    """What :func:`write_obs` wrote: the manifest's obs fields and the schema.

    Attributes
    ----------
    obs_tiles_per_file
        Tiles per shard.
    shard_bytes
        Size of each shard file.
    shard_sha256
        Hex SHA-256 of each shard file.
    fingerprint
        The obs fingerprint (24 hex characters).
    schema
        The schema written to ``obs/schema.json``.
    names_unique
        Whether the stored obs names (column ``_index``) are all different: what the manifest's metadata
        says for readers (``deltacells.format.with_obs_names_unique``), so that they need not check.
    """

    obs_tiles_per_file: int
    shard_bytes: tuple[int, ...]
    shard_sha256: tuple[str, ...]
    fingerprint: str
    schema: ObsSchema
    names_unique: bool = False

    def manifest_fields(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~deltacells.Manifest` that describe this obs."""
        return {
            "has_obs": True,
            "obs_tiles_per_file": self.obs_tiles_per_file,
            "obs_shard_bytes": self.shard_bytes,
            "obs_shard_sha256": self.shard_sha256,
            "obs_fingerprint": self.fingerprint,
        }


def write_obs(
    store: BaseStore,
    obs: pd.DataFrame,
    tile_cells: np.ndarray,
    *,
    obs_tiles_per_file: int = DEFAULT_OBS_TILES_PER_FILE,
    max_categories: int = DEFAULT_MAX_CATEGORIES,
) -> ObsWriteResult:
    """Write the obs table of a dataset: its shards, then ``obs/schema.json``, each uploaded as the next is built.

    Parameters
    ----------
    store
        The dataset root.
    obs
        One row per cell, in cell order; its index (the obs names) is stored as column ``_index``.
    tile_cells
        Cells per tile (each >= 1); shard row group ``t`` holds the ``tile_cells[t]`` rows of tile ``t``.
    obs_tiles_per_file
        Tiles (row groups) per shard.
    max_categories
        Categoricals with more categories are stored as strings.

    Returns
    -------
    ObsWriteResult
        The fields the manifest needs (shard sizes and hashes, fingerprint) and the schema; every file is
        stored when it returns.

    Raises
    ------
    ValueError, TypeError
        For columns obs cannot store (naming the column, its dtype and how to convert it), column names
        that are not unique strings or are ``_index``, or a row count that differs from ``tile_cells``.
    Exception
        The first upload that failed (naming the object); the one in flight, if any, is waited for.
    """
    if not isinstance(obs, pd.DataFrame):
        msg = f"obs must be a pandas DataFrame, not {type(obs).__name__}"
        raise InvalidTypeError(msg)
    cells = _check_tile_cells(tile_cells)
    per_file = check_integer("obs_tiles_per_file", obs_tiles_per_file, minimum=1)
    max_categories = check_integer("max_categories", max_categories, minimum=0)
    if len(obs) != int(cells.sum()):
        msg = f"obs has {len(obs)} rows but the tiles hold {int(cells.sum())} cells; obs needs one row per cell"
        raise InvalidValueError(msg)
    _check_column_names(obs)

    encoded = [encode_index(obs.index)]
    names = encoded[0][1]
    names_unique = len(pc.unique(names)) == len(names)  # the names as stored (every label made a string)
    encoded += [
        encode_column(name, obs.iloc[:, i], max_categories=max_categories) for i, name in enumerate(obs.columns)
    ]
    schema = ObsSchema(tuple(column for column, _ in encoded))
    schema_text = schema.to_json()
    schema = ObsSchema.from_json(schema_text)  # what readers will see; also checks what was made
    table = pa.Table.from_arrays([array for _, array in encoded], schema=schema.arrow_schema())

    limits = np.cumsum(cells, dtype=np.int64)
    starts = limits - cells
    shard_bytes: list[int] = []
    shard_sha256: list[str] = []
    uploads = _InOrder(store)
    try:
        for shard, first in enumerate(range(0, cells.shape[0], per_file)):
            tiles = range(first, min(first + per_file, cells.shape[0]))
            blob = _shard_bytes(table, schema, [(int(starts[t]), int(cells[t])) for t in tiles])
            shard_bytes.append(len(blob))
            shard_sha256.append(hashlib.sha256(blob).hexdigest())
            uploads.submit(obs_shard_path(shard), blob)
        uploads.submit(OBS_SCHEMA_NAME, schema_text.encode("utf-8"))
        uploads.wait()
    except BaseException:
        uploads.abort()
        raise
    return ObsWriteResult(
        obs_tiles_per_file=per_file,
        shard_bytes=tuple(shard_bytes),
        shard_sha256=tuple(shard_sha256),
        fingerprint=obs_fingerprint(schema_text, cells.tolist(), shard_sha256),
        schema=schema,
        names_unique=names_unique,
    )


class _InOrder:
    """Objects uploaded one at a time, in order, apart from the caller (who builds the next one meanwhile)."""

    def __init__(self, store: BaseStore) -> None:
        self.store = store
        self._pending: Future[None] | None = None

    def submit(self, path: str, data: bytes) -> None:
        """Wait for the previous upload (raising its failure), then start uploading ``data`` to ``path``.

        Raises
        ------
        Exception
            The failure of the previous upload (naming its object).
        """
        self.wait()
        self._pending = self.store.submit_write(path, data)

    def wait(self) -> None:
        """Wait for the upload in flight, if any.

        Raises
        ------
        Exception
            Its failure (naming the object).
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def abort(self) -> None:
        """Cancel the upload in flight if it has not started, else wait for it; its failure is dropped."""
        pending, self._pending = self._pending, None
        if pending is not None and not pending.cancel():
            with contextlib.suppress(Exception):
                pending.result()


def _shard_bytes(table: pa.Table, schema: ObsSchema, row_groups: list[tuple[int, int]]) -> bytes:
    """One shard in memory: exactly one row group per ``(start, rows)``, zstd, no statistics."""
    sink = pa.BufferOutputStream()
    arrow_schema = schema.arrow_schema()
    options = parquet_write_options(arrow_schema)
    with pq.ParquetWriter(sink, arrow_schema, write_statistics=False, **options) as writer:
        for start, rows in row_groups:
            writer.write_table(table.slice(start, rows), row_group_size=rows)
    blob: bytes = sink.getvalue().to_pybytes()
    return blob


def _check_tile_cells(tile_cells: Any) -> np.ndarray:
    cells = np.asarray(tile_cells)
    if cells.ndim != 1 or (cells.size and cells.dtype.kind not in "iu"):
        msg = f"tile_cells must be a 1-D array of integers, got {cells.dtype} of shape {cells.shape}"
        raise InvalidValueError(msg)
    cells = cells.astype(np.int64)
    if cells.size and int(cells.min()) < 1:
        msg = f"tile_cells must all be >= 1, got {int(cells.min())}"
        raise InvalidValueError(msg)
    return cells


def check_obs(obs: pd.DataFrame, *, max_categories: int = DEFAULT_MAX_CATEGORIES) -> ObsSchema:
    """Check that ``obs`` can be written (before anything is) and return the schema it would get.

    Raises
    ------
    ValueError, TypeError
        As :func:`write_obs` would, naming the column at fault and the fix.
    """
    if not isinstance(obs, pd.DataFrame):
        msg = f"obs must be a pandas DataFrame, not {type(obs).__name__}"
        raise InvalidTypeError(msg)
    _check_column_names(obs)
    columns = [encode_index(obs.index)[0]]
    columns += [
        encode_column(name, obs.iloc[:, i], max_categories=max_categories)[0] for i, name in enumerate(obs.columns)
    ]
    return ObsSchema(tuple(columns))


def _check_column_names(obs: pd.DataFrame) -> None:
    for name in obs.columns:
        if not isinstance(name, str):
            msg = (
                f"obs column names must be strings, but column {name!r} is a {type(name).__name__}; rename it, "
                "e.g. df.columns = df.columns.astype(str)"
            )
            raise InvalidTypeError(msg)
        if name == INDEX_COLUMN:
            msg = (
                f"obs has a column named {INDEX_COLUMN!r}, the name obs uses for the index (the obs names); "
                "rename that column"
            )
            raise InvalidValueError(msg)
    duplicated = list(obs.columns[obs.columns.duplicated()])
    if duplicated:  # anndata's writers' message, word for word (anndata._io.specs.methods)
        msg = f"Found repeated column names: {duplicated}. Column names must be unique."
        raise InvalidValueError(msg)
