"""The local obs cache: columns localized once per node, then memory-mapped.

docs/format.md, "The local cache": the first time a column is asked for, only its column chunks are read from
the shards and written to ``<cache>/<fingerprint>/obs/<url-quoted name>.arrow``, an uncompressed Arrow
IPC file with one record batch per tile, through a temporary file and a rename, under a lock file, so
that concurrent processes on a node fetch each column once.

Integrity (``verify=True``): the first time a shard is used under a cache and fingerprint it is read
whole and its size and SHA-256 are checked against the manifest; it is then recorded in
``verified.json`` beside the columns, and later columns come from ranged reads of their chunks only.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from filelock import FileLock

from deltacells._checks import check_names
from deltacells.errors import FormatError, InvalidTypeError, InvalidValueError, ObsCacheError
from deltacells.format import (
    INDEX_COLUMN,
    OBS_SCHEMA_NAME,
    Manifest,
    ObsColumn,
    ObsSchema,
    check_fingerprint,
    first_problem_raises,
    obs_fingerprint,
)
from deltacells.obs._decode import to_pandas_values
from deltacells.obs._dtypes import default_string_dtype
from deltacells.obs._files import (
    ColumnFileWriter,
    atomic_write,
    column_file_name,
    read_column_file,
    remove_stale_temporaries,
)
from deltacells.obs._shards import fetch_shards, tile_columns
from deltacells.storage import BaseStore

__all__ = ["ObsCacheError", "ObsStore", "resolve_cache_dir"]

#: Name of the file, beside the cached columns, that lists the shards whose SHA-256 was checked.
VERIFIED_NAME = "verified.json"
LOCK_NAME = ".lock"
_VERIFIED_FORMAT = "deltacells-obs-verified"


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The root of the local cache.

    In order: ``cache_dir``, ``$DELTACELLS_CACHE``, ``$XDG_CACHE_HOME/deltacells``, ``~/.cache/deltacells``
    (empty variables, and a relative ``$XDG_CACHE_HOME``, which the XDG specification says to ignore,
    are skipped).

    Parameters
    ----------
    cache_dir
        An explicit directory.

    Returns
    -------
    pathlib.Path
        An absolute path (not necessarily existing yet).
    """
    if cache_dir is not None:
        path = Path(cache_dir).expanduser()
    elif os.environ.get("DELTACELLS_CACHE"):
        path = Path(os.environ["DELTACELLS_CACHE"]).expanduser()
    elif os.environ.get("XDG_CACHE_HOME") and os.path.isabs(os.environ["XDG_CACHE_HOME"]):
        path = Path(os.environ["XDG_CACHE_HOME"]) / "deltacells"
    else:
        path = Path.home() / ".cache" / "deltacells"
    return path.absolute()


class ObsStore:
    """The obs table of a dataset, localized column by column into a local cache and read from there.

    Cheap to pickle: it pickles to its store, manifest, ``cache_dir`` argument and ``verify`` flag (each
    process resolves the cache directory itself), never to open files or memory maps.

    Parameters
    ----------
    store
        The dataset root.
    manifest
        The dataset's manifest.
    cache_dir
        Root of the local cache (see :func:`resolve_cache_dir` for the default).
    verify
        Check each shard's size and SHA-256 against the manifest the first time it is used (reading it
        whole once), and the schema against the fingerprint. ``False`` only ever reads the column chunks
        needed and trusts them.
    """

    def __init__(
        self,
        store: BaseStore,
        manifest: Manifest,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        verify: bool = True,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.verify = bool(verify)
        self._cache_dir_arg = cache_dir
        self._cache_dir: Path | None = None
        self._schema: ObsSchema | None = None
        self._lock = threading.RLock()
        # column -> its cache file's per-tile arrays (memory-mapped) and which of them were checked in full
        self._mapped: dict[str, tuple[list[pa.Array], np.ndarray]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.store, self.manifest.to_dict(), self._cache_dir_arg, self.verify))

    def __repr__(self) -> str:
        return f"ObsStore({self.store.url!r}, fingerprint={self.manifest.obs_fingerprint!r})"

    # ------------------------------------------------------------------ properties

    @property
    def cache_dir(self) -> Path:
        """The root of the local cache (resolved on first use in each process)."""
        if self._cache_dir is None:
            self._cache_dir = resolve_cache_dir(self._cache_dir_arg)
        return self._cache_dir

    @property
    def directory(self) -> Path:
        """The directory of this obs's cached columns, ``<cache>/<fingerprint>/obs``."""
        self._require_obs()
        return self.cache_dir / str(self.manifest.obs_fingerprint) / "obs"

    @property
    def schema(self) -> ObsSchema:
        """The obs schema (read once; a checked copy is kept in the cache).

        Raises
        ------
        FormatError
            If the dataset has no obs, or ``obs/schema.json`` is malformed or (with ``verify``) does not
            match the manifest's fingerprint.
        """
        if self._schema is None:
            with self._lock:
                if self._schema is None:
                    self._schema = self._load_schema()
        return self._schema

    @property
    def columns(self) -> list[str]:
        """The obs column names, without ``_index``."""
        return [name for name in self.schema.names if name != INDEX_COLUMN]

    @property
    def n_obs(self) -> int:
        """Number of rows (cells)."""
        return self.manifest.n_cells

    # ------------------------------------------------------------------ public reading

    def localize(self, names: str | Iterable[str]) -> None:
        """Make sure the columns ``names`` are in the local cache, fetching those that are not.

        Parameters
        ----------
        names
            A column name or several. Columns fetched together cost one pass over the shards.

        Raises
        ------
        KeyError
            For a name that is not a column.
        FormatError
            If a shard does not match the manifest or schema.
        ObsCacheError
            If the cache directory cannot be written.
        """
        wanted = self._check_names([names] if isinstance(names, str) else list(names))
        self._localize(wanted)

    def read_column(self, name: str) -> pd.Series:
        """One obs column as a :class:`pandas.Series` indexed by the obs names (localizing it if needed).

        Parameters
        ----------
        name
            The column.

        Returns
        -------
        pandas.Series
            Named ``name``, with the pandas dtype it was written with (categoricals with their
            categories, nullable dtypes for numbers and booleans with missing values, strings).
        """
        self._check_names([name])
        arrays = self._arrays([name, *self._index_names()])
        return _series(self.schema.column(name), arrays[name], self._index(arrays))

    def to_dataframe(self, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """The obs table as a :class:`pandas.DataFrame`, localizing the columns that are not cached yet.

        Parameters
        ----------
        columns
            The columns, in this order; ``None`` means all of them and ``[]`` gives a frame with the index only.

        Returns
        -------
        pandas.DataFrame
            Indexed by the obs names (column ``_index``, or ``"0" .. "n-1"`` without it).

        Raises
        ------
        KeyError
            For a name that is not a column.
        ValueError
            For a column asked for twice.
        """
        if columns is not None:
            check_names("columns", columns, of="column names")
        names = self.columns if columns is None else list(columns)
        self._check_names(names)
        if len(set(names)) != len(names):
            duplicate = next(n for i, n in enumerate(names) if n in names[:i])
            msg = f"column {duplicate!r} is asked for more than once"
            raise InvalidValueError(msg)
        arrays = self._arrays([*names, *self._index_names()])
        index = self._index(arrays)
        frame = pd.DataFrame({name: _series(self.schema.column(name), arrays[name], None) for name in names})
        if not names:
            return pd.DataFrame(index=index)
        frame.index = index
        return frame

    @property
    def index(self) -> pd.Index:
        """The obs names (column ``_index``, or ``"0" .. "n-1"`` without one, as anndata does)."""
        return self._index(self._arrays(self._index_names()))

    def take(self, name: str, cells: np.ndarray | None = None) -> Any:
        """The values of column ``name`` for some cells, touching only the record batches of their tiles.

        The column is localized first if it is not cached yet; the cached file is memory-mapped, so only
        the tiles holding ``cells`` are read from it.

        Parameters
        ----------
        name
            The column (``"_index"`` for the stored cell names).
        cells
            Cell numbers (``int64``, any order, repeats allowed); ``None`` for every cell.

        Returns
        -------
        numpy.ndarray or pandas.api.extensions.ExtensionArray
            One value per cell asked for, in the pandas dtype the column was written with (a
            :class:`pandas.Categorical` for a categorical column: its codes, never a Python object per cell).
        """
        self._check_names([name])
        if cells is None:
            chunks = self._checked(name, None)
            array = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
        else:
            selection = TileSelection.of(np.asarray(cells, dtype=np.int64), self.manifest.tile_cells)
            array = selection.take(self._checked(name, selection.tiles))
        return to_pandas_values(self.schema.column(name), array)

    def dtype(self, name: str) -> Any:
        """The pandas dtype :meth:`take` gives for column ``name``, found from the schema without reading it."""
        self._check_names([name])
        column = self.schema.column(name)
        return to_pandas_values(column, pa.array([], type=column.pa_type)).dtype

    def arrow_column(self, name: str) -> pa.ChunkedArray:
        """Column ``name`` as Arrow, one chunk per tile, memory-mapped from the cache (localized first if needed).

        Nothing is converted to Python or pandas objects: this is how every stored name is searched without
        making a Python string per cell (the lazy obs's name lookups).

        Parameters
        ----------
        name
            The column (``"_index"`` for the stored cell names).
        """
        self._check_names([name])
        return pa.chunked_array(self._checked(name, None), type=self.schema.column(name).pa_type)

    def _chunks(self, name: str) -> tuple[list[pa.Array], np.ndarray]:
        """The per-tile arrays of column ``name``'s cache file, localizing it first, and which are checked.

        Kept for later calls; the second array says which tiles' arrays :meth:`_checked` checked in full.
        """
        mapped = self._mapped.get(name)
        if mapped is None:
            chunks = self._cached_chunks(name, validate=False)
            if chunks is None:
                self._localize([name])
                chunks = self._cached_chunks(name, validate=False)
            if chunks is None:
                msg = f"{self._path(name)}: the cached obs column {name!r} cannot be read back after fetching it"
                raise FormatError(msg)
            mapped = self._mapped[name] = (chunks, np.zeros(len(chunks), dtype=bool))
        return mapped

    def _checked(self, name: str, tiles: np.ndarray | None) -> list[pa.Array]:
        """The per-tile arrays of column ``name``, those of ``tiles`` (all for ``None``) checked in full.

        Checking a string column's arrays reads all their values, so it is done for the tiles used only.
        """
        chunks, checked = self._chunks(name)
        todo = np.flatnonzero(~checked) if tiles is None else tiles[~checked[tiles]]
        for t in todo.tolist():
            try:
                chunks[t].validate(full=True)
            except pa.ArrowException as exc:
                msg = f"{self._path(name)}: the cached obs column {name!r} is damaged in tile {t} ({exc}); delete it"
                raise FormatError(msg) from exc
            checked[t] = True
        return chunks

    # ------------------------------------------------------------------ internals: schema

    def _require_obs(self) -> None:
        if not self.manifest.has_obs:
            msg = f"{self.store.url}: this dataset has no obs (manifest.json field has_obs is false)"
            raise FormatError(msg)

    def _fingerprint_of(self, text: str) -> str:
        return obs_fingerprint(text, self.manifest.tile_cells.tolist(), self.manifest.obs_shard_sha256)

    def _load_schema(self) -> ObsSchema:
        self._require_obs()
        where = f"{self.store.url}/{OBS_SCHEMA_NAME}"
        copy = self.directory / "schema.json"
        text: str | None = None
        with contextlib.suppress(OSError, UnicodeDecodeError):
            cached = copy.read_text(encoding="utf-8")
            if self._fingerprint_of(cached) == self.manifest.obs_fingerprint:
                text = cached
        if text is None:
            try:
                text = self.store.read(OBS_SCHEMA_NAME).decode("utf-8")
            except UnicodeDecodeError as exc:
                msg = f"{where}: not UTF-8 text ({exc})"
                raise FormatError(msg) from exc
            matches = self._fingerprint_of(text) == self.manifest.obs_fingerprint
            if self.verify and not matches:
                first_problem_raises(check_fingerprint(text, self.manifest.to_fields()), self.store.url)
            if matches:
                with contextlib.suppress(OSError):  # only a shortcut: a read-only cache still reads
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    atomic_write(copy, text.encode("utf-8"))
        return ObsSchema.from_json(text, where=where)

    def _check_names(self, names: list[str]) -> list[str]:
        schema = self.schema
        for name in names:
            if not isinstance(name, str):
                msg = f"obs column names are strings, got {name!r}"
                raise InvalidTypeError(msg)
            schema.column(name)  # KeyError naming the column
        return names

    def _index_names(self) -> list[str]:
        return [INDEX_COLUMN] if self.schema.has_index else []

    def _index(self, arrays: dict[str, pa.Array]) -> pd.Index:
        if INDEX_COLUMN not in arrays:
            numbers: pd.Index = pd.Index([str(i) for i in range(self.manifest.n_cells)], dtype=default_string_dtype())
            return numbers
        column = self.schema.column(INDEX_COLUMN)
        values = to_pandas_values(column, arrays[INDEX_COLUMN])
        index: pd.Index = pd.Index(values, dtype=getattr(values, "dtype", None), name=column.index_name)
        return index

    # ------------------------------------------------------------------ internals: cached files

    def _path(self, name: str) -> Path:
        return self.directory / column_file_name(name)

    def _open_cached(self, name: str) -> pa.Array | None:
        """The cached values of column ``name``, or ``None`` if its file is missing or does not match."""
        chunks = self._cached_chunks(name)
        if chunks is None:
            return None
        if not chunks:
            return pa.array([], type=self.schema.column(name).pa_type)
        return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)

    def _cached_chunks(self, name: str, *, validate: bool = True) -> list[pa.Array] | None:
        """The record batches of column ``name``'s cache file (one per tile), or ``None`` if it does not match."""
        column = self.schema.column(name)
        fingerprint = str(self.manifest.obs_fingerprint)
        return read_column_file(
            self._path(name), name, column.pa_type, self.manifest.tile_cells, fingerprint, validate=validate
        )

    def _arrays(self, names: list[str]) -> dict[str, pa.Array]:
        """The values of columns ``names`` from the cache, localizing the ones that are not there."""
        found = {name: self._open_cached(name) for name in dict.fromkeys(names)}
        missing = [name for name, array in found.items() if array is None]
        if missing:
            self._localize(missing)
            for name in missing:
                found[name] = self._open_cached(name)
                if found[name] is None:
                    msg = f"{self._path(name)}: the cached obs column {name!r} cannot be read back after fetching it"
                    raise FormatError(msg)
        return {name: array for name, array in found.items() if array is not None}

    def _localize(self, names: list[str]) -> None:
        with self._lock:
            todo = [name for name in dict.fromkeys(names) if self._cached_chunks(name) is None]
            if not todo:
                return
            directory = self.directory
            with self._cache_io():
                directory.mkdir(parents=True, exist_ok=True)
                if not os.access(directory, os.W_OK | os.X_OK):
                    raise PermissionError(13, "not writable", str(directory))
                lock = FileLock(str(directory / LOCK_NAME))
                lock.acquire()
            try:
                with self._cache_io():
                    remove_stale_temporaries(directory)
                todo = [name for name in todo if not self._keep_or_remove(name)]
                if todo:
                    self._fetch(todo)
            finally:
                lock.release()

    def _keep_or_remove(self, name: str) -> bool:
        """Under the lock: whether a valid file is there; an invalid one is removed."""
        if self._cached_chunks(name) is not None:
            return True
        with self._cache_io(), contextlib.suppress(FileNotFoundError):
            self._path(name).unlink()
        return False

    def _fetch(self, names: list[str]) -> None:
        """Under the lock: read the columns ``names`` from every shard and write their cache files.

        The shards are fetched a batch at a time, the next batch while this one is decoded
        (:func:`~deltacells.obs._shards.fetch_shards`): a shard not verified yet is read whole, in concurrent
        blocks, checked and decoded from memory; any other costs a ranged read of its footer and the
        coalesced column chunks of ``names``.
        """
        schema = self.schema
        manifest = self.manifest
        verified = self._read_verified()
        newly: dict[str, str] = {}
        files: dict[str, ColumnFileWriter] = {}
        try:
            for name in names:
                column = schema.column(name)
                files[name] = ColumnFileWriter(
                    self._path(name),
                    name,
                    column.pa_type,
                    fingerprint=str(manifest.obs_fingerprint),
                    guard=self._cache_io,
                )
            shas = manifest.obs_shard_sha256
            plan = [
                (shard, self.verify and verified.get(str(shard)) != shas[shard])
                for shard in range(manifest.n_obs_shards)
            ]
            with contextlib.closing(fetch_shards(self.store, manifest, schema, plan, names)) as shards:
                for fetched in shards:
                    for _tile, arrays in tile_columns(self.store, manifest, schema, fetched, names):
                        for name, file in files.items():
                            file.write(arrays[name])
                    if fetched.verified:
                        newly[str(fetched.shard)] = shas[fetched.shard]
            for file in files.values():
                file.commit()
        except BaseException:
            for file in files.values():
                file.abort()
            if newly:
                with contextlib.suppress(ObsCacheError):  # do not hide the error that stopped the fetch
                    self._write_verified({**verified, **newly})
            raise
        if newly:
            self._write_verified({**verified, **newly})
        pa.default_memory_pool().release_unused()  # the shards' columns, freed: 20-30 MB a million cells kept else

    def _read_verified(self) -> dict[str, str]:
        try:
            doc = json.loads((self.directory / VERIFIED_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(doc, dict) or doc.get("format") != _VERIFIED_FORMAT:
            return {}
        if not isinstance(doc.get("shards"), dict):
            return {}
        return {str(k): v for k, v in doc["shards"].items() if isinstance(v, str)}

    def _write_verified(self, shards: dict[str, str]) -> None:
        doc = {"format": _VERIFIED_FORMAT, "fingerprint": self.manifest.obs_fingerprint, "shards": shards}
        with self._cache_io():
            atomic_write(self.directory / VERIFIED_NAME, json.dumps(doc, sort_keys=True).encode())

    @contextlib.contextmanager
    def _cache_io(self) -> Iterator[None]:
        """Turn errors of the local cache files into an :class:`ObsCacheError` that says what to do."""
        try:
            yield
        except ObsCacheError:
            raise
        except OSError as exc:
            msg = (
                f"cannot write the obs cache in {self.cache_dir} ({exc}); set cache_dir= or $DELTACELLS_CACHE to a "
                "writable directory with free space"
            )
            raise ObsCacheError(msg) from exc


@dataclass(frozen=True)
class TileSelection:
    """Cells of a dataset grouped by tile: which tiles hold them, and where each tile's cells lie.

    Built once per selection with vectorised numpy (a binary search per tile boundary when the cells are
    sorted, as masks and slices give them; one stable sort otherwise), never a Python step per cell.

    Attributes
    ----------
    cells
        Dataset cell numbers, in the order asked for.
    order
        ``cells`` sorted is ``cells[order]``; ``None`` when they are sorted already.
    tiles
        The tiles holding at least one cell, increasing.
    bounds
        Tile ``tiles[k]`` holds sorted cells ``bounds[k] .. bounds[k + 1] - 1``.
    tile_starts
        The first cell of each tile of the dataset.
    """

    cells: np.ndarray
    order: np.ndarray | None
    tiles: np.ndarray
    bounds: np.ndarray
    tile_starts: np.ndarray

    @classmethod
    def of(cls, cells: np.ndarray, tile_cells: np.ndarray) -> TileSelection:
        """Group ``cells`` (any order, repeats allowed) by tile.

        Raises
        ------
        InvalidValueError
            For a cell number outside the dataset.
        """
        starts = np.zeros(tile_cells.shape[0] + 1, dtype=np.int64)
        np.cumsum(tile_cells, out=starts[1:])
        if cells.size and (cells.min() < 0 or cells.max() >= starts[-1]):
            msg = f"cell numbers must lie in 0 .. {starts[-1] - 1}"
            raise InvalidValueError(msg)
        ordered = cells.shape[0] < 2 or bool(np.all(cells[1:] >= cells[:-1]))
        order = None if ordered else np.argsort(cells, kind="stable")
        in_order = cells if order is None else cells[order]
        edges = np.searchsorted(in_order, starts)  # where each tile's cells begin among the sorted cells
        tiles = np.flatnonzero(edges[1:] > edges[:-1])
        bounds = np.append(edges[tiles], in_order.shape[0])
        return cls(cells, order, tiles, bounds, starts)

    def take(self, chunks: list[pa.Array]) -> pa.Array:
        """The selected cells' values of a column held as one array per tile, in the order asked for.

        Values of a fixed width (numbers, a categorical's codes) are taken in one Arrow call for all the tiles
        (their arrays chained, the cells' positions in the chain), not one per tile: a mask over an atlas's
        category touches thousands of them. Strings (the cells' names) are taken tile by tile, since Arrow's
        take of a chained array first copies the whole chain.
        """
        in_order = self.cells if self.order is None else self.cells[self.order]
        if not self.tiles.shape[0]:
            return chunks[0].slice(0, 0) if chunks else pa.array([])
        picked = [chunks[t] for t in self.tiles.tolist()]
        if pa.types.is_primitive(picked[0].type):
            lengths = np.fromiter((len(chunk) for chunk in picked), dtype=np.int64, count=len(picked))
            chain_starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))  # where each tile begins in the chain
            per_cell = np.repeat(np.arange(self.tiles.shape[0]), np.diff(self.bounds))
            positions = in_order - self.tile_starts[self.tiles][per_cell] + chain_starts[per_cell]
            gathered = pa.chunked_array(picked, type=picked[0].type).take(pa.array(positions)).combine_chunks()
        else:
            gathered = pa.concat_arrays(
                [
                    chunk.take(pa.array(in_order[self.bounds[k] : self.bounds[k + 1]] - self.tile_starts[t]))
                    for k, (t, chunk) in enumerate(zip(self.tiles.tolist(), picked, strict=True))
                ]
            )
        if self.order is not None:  # back to the order asked for
            inverse = np.empty_like(self.order)
            inverse[self.order] = np.arange(self.order.shape[0])
            gathered = gathered.take(pa.array(inverse))
        return gathered


def _series(column: ObsColumn, array: pa.Array, index: pd.Index | None) -> pd.Series:
    values = to_pandas_values(column, array)
    return pd.Series(values, index=index, name=column.name, dtype=getattr(values, "dtype", None), copy=False)


def _rebuild(store: BaseStore, manifest: dict[str, Any], cache_dir: Any, verify: bool) -> ObsStore:
    return ObsStore(store, Manifest.from_dict(manifest), cache_dir=cache_dir, verify=verify)
