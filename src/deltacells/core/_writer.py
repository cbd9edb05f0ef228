"""Writing a dataset: tiles, the optional files, obs, and ``manifest.json`` last."""

from __future__ import annotations

import contextlib
import io
import json
import os
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._checks import check_integer
from deltacells.codec import Level, resolve_level
from deltacells.core._dtypes import promoted_dtype
from deltacells.core._output import (
    check_output,
    clear_unfinished,
    holds_dataset,
    new_staging_prefix,
    remove_stale_staging,
    swap_in,
)
from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.format import (
    COUNTS_DTYPE_KINDS,
    DATASET_ENTRIES,
    GENE_ORDER_DTYPE,
    GENE_ORDER_NAME,
    MANIFEST_NAME,
    VAR_NAMES_NAME,
    VAR_TABLE_NAME,
    Manifest,
    counts_dtype_entry,
    with_obs_names_unique,
)
from deltacells.storage import BaseStore, PrefixStore, open_store
from deltacells.tiles import (
    DEFAULT_LEVEL,
    DEFAULT_N_CHUNKS,
    DEFAULT_TILE_SIZE,
    TileList,
    TileWriter,
    check_tile_settings,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pandas as pd
    from numpy.typing import DTypeLike

__all__ = ["DatasetWriter", "var_table_bytes"]


class DatasetWriter:
    """Write a dataset from consecutive row blocks of a count matrix, with its genes, obs and manifest.

    Rows arrive in blocks of any size (:meth:`write`) and become tiles as they fill (a
    :class:`~deltacells.tiles.TileWriter` encodes them in parallel and uploads them while it encodes the
    next ones; memory is bounded by a few tiles plus the uploads pending, by default 256 MiB at most).
    :meth:`close` writes the gene order, gene names and gene table (uploaded with the last tiles), waits for
    every tile, writes the obs sidecar (each shard uploaded while the next is built) and, once all of these
    are stored, writes ``manifest.json``, last of all. A failed upload fails the write (at the next tile, or
    at :meth:`close`). Used as a context manager, an exception aborts the write: no manifest is written and
    what was written is removed.

    With ``overwrite=True`` an existing dataset stays whole and readable until the new one is complete: the
    new one is written under a staging prefix inside the root and swapped in by :meth:`close` (see
    ``deltacells.core._output``). A failed or killed overwrite leaves the old dataset as it was.

    Parameters
    ----------
    path
        Output directory, fsspec URL or :class:`~deltacells.storage.BaseStore`.
    n_genes
        Columns of the matrix.
    tile_size
        Cells per tile.
    n_chunks
        Chunks per tile (decoded in parallel by readers).
    level
        zstd level ``1 .. 22``, or ``"default"`` (fast: as fast as writing a gzip h5ad) or ``"archive"`` (the
        smallest tiles, slowest to write; reading is as fast). The manifest records the integer level used
        (``level``).
    gene_order
        ``gene_order[j]`` is the source column written as output column ``j``; blocks passed to
        :meth:`write` are in *source* column order and reordered here. ``None`` keeps the columns as they
        are (and writes no ``gene_order.npy``).
    var_names
        Gene names in *source* order, written to ``var_names.txt`` in output order.
    obs
        Per-cell table (one row per cell, in order), written as the obs sidecar at :meth:`close` (see
        :func:`deltacells.obs.write_obs`).
    var
        Gene table in *source* order, written to ``var.parquet`` in output order.
    obs_tiles_per_file
        Tiles (parquet row groups) per obs shard.
    max_categories
        Categorical obs columns with more categories are stored as strings.
    metadata
        Free-form JSON object stored in the manifest.
    overwrite
        Replace an existing dataset (or the leftovers of an unfinished one) at ``path``.
    storage_options
        fsspec options for ``path``.
    threads
        Tiles encoded at once (default: the usable CPUs).
    counts_dtype
        The dtype of the counts, recorded in the manifest's ``metadata["deltacells"]["dtype"]`` for readers to
        give them back in (docs/format.md, decision 9). ``None`` (default): the dtype of the blocks passed to
        :meth:`write` (promoted as numpy does if they differ); tiles added with :meth:`add_tiles` record none
        unless it is given. float16 is recorded as float32, the narrowest float of scipy's sparse matrices.

    Raises
    ------
    FileExistsError
        If ``path`` holds a dataset (or other files) and ``overwrite`` is false.
    ValueError, TypeError
        For arguments that do not fit each other (a gene order that is no permutation, names or tables
        of the wrong length, metadata that is not a JSON object) or an unknown ``level``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | BaseStore,
        n_genes: int,
        *,
        tile_size: int = DEFAULT_TILE_SIZE,
        n_chunks: int = DEFAULT_N_CHUNKS,
        level: Level = DEFAULT_LEVEL,
        gene_order: np.ndarray | None = None,
        var_names: Iterable[str] | None = None,
        obs: pd.DataFrame | None = None,
        var: pd.DataFrame | None = None,
        obs_tiles_per_file: int = 1000,
        max_categories: int = 20_000,
        metadata: dict[str, Any] | None = None,
        overwrite: bool = False,
        storage_options: dict[str, Any] | None = None,
        threads: int | None = None,
        counts_dtype: DTypeLike | None = None,
    ) -> None:
        check_tile_settings(n_genes, tile_size=tile_size, n_chunks=n_chunks)
        self.counts_dtype = None if counts_dtype is None else _check_counts_dtype(counts_dtype)
        self._dtype_given = counts_dtype is not None
        level = resolve_level(level)  # before anything is written
        self.store = open_store(path, storage_options)
        self.n_genes = int(n_genes)
        self.metadata = _json_object(metadata)
        self.gene_order = _check_gene_order(gene_order, self.n_genes)
        self.var_names = _check_var_names(var_names, self.n_genes)
        if var is not None and var.shape[0] != self.n_genes:
            msg = f"var has {var.shape[0]} rows for {self.n_genes} genes"
            raise InvalidValueError(msg)
        check_integer("obs_tiles_per_file", obs_tiles_per_file, minimum=1)
        self.obs = obs
        self.var = var
        self.obs_tiles_per_file = int(obs_tiles_per_file)
        self.max_categories = int(max_categories)

        columns = None
        if self.gene_order is not None:
            columns = np.empty(self.n_genes, dtype=np.int32)
            columns[self.gene_order] = np.arange(self.n_genes, dtype=np.int32)
        check_output(self.store, overwrite=overwrite)
        self._staging: str | None = None
        if holds_dataset(self.store):  # keep it whole and readable until the new one is complete
            remove_stale_staging(self.store)
            self._staging = new_staging_prefix()
            self._target: BaseStore = PrefixStore(self.store, self._staging)
        else:
            clear_unfinished(self.store)
            self._target = self.store
        self._tiles = TileWriter(
            self._target, self.n_genes, tile_size=tile_size, n_chunks=n_chunks, level=level, columns=columns,
            threads=threads,
        )  # fmt: skip
        self._uploads = self._tiles.uploads  # the sidecars too: one bound on the bytes pending
        root = self.store.local_path("") if self.store.is_local else None
        # The root exists once the writer is open, whether or not a tile gets stored; if this writer made it,
        # an abort removes it again (a failed or interrupted conversion leaves nothing it created).
        self._made_root = root if root is not None and not os.path.exists(root) else None
        if root is not None:
            os.makedirs(root, exist_ok=True)
        self.tile_size = self._tiles.tile_size
        self.n_chunks = self._tiles.n_chunks
        self.level = self._tiles.level
        self._closed = False
        self._aborted = False
        self._stored_elsewhere: TileList | None = None
        self.manifest: Manifest | None = None

    # ------------------------------------------------------------------ context

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def n_cells(self) -> int:
        """Rows received so far (written, being encoded, or waiting for their tile to fill)."""
        return self._tiles.n_cells

    @property
    def tile_store(self) -> BaseStore:
        """The store the tiles go to (the dataset's, or its staging prefix while an overwrite is under way).

        For tiles encoded and stored by others (the tasks of a dask cluster), which :meth:`add_tiles` then
        records; the store pickles to its URL and options.
        """
        return self._target

    # ------------------------------------------------------------------ writing

    def write(self, block: Any) -> None:
        """Append rows: a scipy sparse matrix (any format) or a dense 2-D array of counts, in source columns.

        Raises
        ------
        InvalidValueError, InvalidTypeError
            For values that are not counts (see :func:`~deltacells.tiles.to_count_csr`); the block is not
            written and the writer stays usable.
        """
        self._check_open()
        rows = self._tiles.prepare(block)
        if not self._dtype_given:
            seen = block.dtype if hasattr(block, "dtype") else np.asarray(block).dtype
            seen = _sparse_dtype(np.dtype(seen))
            self.counts_dtype = promoted_dtype([seen] if self.counts_dtype is None else [self.counts_dtype, seen])
        try:
            self._tiles.append(rows)
        except BaseException:
            self.abort()  # a block or a tile failed: the dataset cannot be completed
            raise

    def add_tiles(self, tiles: TileList) -> None:
        """Record tiles that others encoded and stored in :attr:`tile_store`, instead of rows passed to ``write()``.

        Tile ``i`` is ``tile_path(i)``; the tiles have this writer's ``tile_size`` cells each (the last one may
        have fewer), ``n_chunks`` and ``level``. :meth:`close` writes the manifest for them.

        Raises
        ------
        InvalidValueError
            If rows were passed to :meth:`write` too, or tiles were added already, or a tile other than the
            last does not have ``tile_size`` cells.
        """
        self._check_open()
        if self.n_cells or self._stored_elsewhere is not None:
            msg = "add_tiles records all the tiles of a dataset, once, and no rows may be passed to write()"
            raise InvalidValueError(msg)
        cells = np.asarray(tiles.tile_cells, dtype=np.int64)
        if cells.size and (np.any(cells[:-1] != self.tile_size) or not 0 < cells[-1] <= self.tile_size):
            msg = f"every tile but the last must have tile_size ({self.tile_size}) cells; got {cells.tolist()[:8]}..."
            raise InvalidValueError(msg)
        self._stored_elsewhere = tiles

    def close(self) -> Manifest:
        """Finish: the last tile, the optional files and obs, all stored, then ``manifest.json``.

        Returns
        -------
        Manifest
            What ``manifest.json`` holds.

        Raises
        ------
        Exception
            The first write that failed (naming the object); the write is aborted and no manifest is written.
        """
        if self._aborted:
            self._check_open()
        if self._closed:
            assert self.manifest is not None
            return self.manifest
        try:
            self._write_sidecars()  # uploaded with the last tiles
            tiles = self._tiles.finish()  # returns once every tile and sidecar is stored
            if self._stored_elsewhere is not None:
                tiles = self._stored_elsewhere
            obs_fields = self._write_obs(tiles.tile_cells)  # returns once obs is stored
            self.manifest = Manifest(
                n_cells=tiles.n_cells,
                n_genes=self.n_genes,
                tile_size=self.tile_size,
                tile_cells=tiles.tile_cells,
                tile_nnz=tiles.tile_nnz,
                tile_bytes=tiles.tile_bytes,
                n_chunks=self.n_chunks,
                zstd_level=self.level,
                has_gene_order=self.gene_order is not None,
                has_var_names=self.var_names is not None,
                has_var_table=self.var is not None,
                metadata=self._metadata_with_dtype(),
                **obs_fields,
            )
            self._target.sync()  # on a local disk, all of it on the device before the manifest names it
            self._target.write(MANIFEST_NAME, self.manifest.to_json().encode())
            self._target.sync(MANIFEST_NAME)
            if self._staging is not None:
                swap_in(self.store, self._staging)
                self.store.sync(MANIFEST_NAME)  # the folder's entries: the moved ones and the manifest
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self.manifest

    def abort(self) -> None:
        """Stop without a manifest and remove what was written so far (an old dataset stays as it was)."""
        if self._closed:
            return
        self._closed = True
        self._aborted = True
        self._tiles.abort()
        with contextlib.suppress(OSError):  # best effort on the way out
            if self._staging is not None:
                if MANIFEST_NAME in self.store.list():  # the swap had not begun: the old dataset is whole
                    self.store.delete(self._staging)
            else:
                for entry in DATASET_ENTRIES:
                    self.store.delete(entry)
        if self._made_root is not None:
            with contextlib.suppress(OSError):  # only if empty: never what someone else put there meanwhile
                os.rmdir(self._made_root)

    # ------------------------------------------------------------------ internals

    def _metadata_with_dtype(self) -> dict[str, Any]:
        """The manifest's metadata, with the counts' dtype in ``metadata["deltacells"]["dtype"]`` when it is known."""
        if self.counts_dtype is None:
            return self.metadata
        ours = self.metadata.get("deltacells")
        entry = {**(ours if isinstance(ours, dict) else {}), "dtype": counts_dtype_entry(self.counts_dtype)}
        return {**self.metadata, "deltacells": entry}

    def _check_open(self) -> None:
        if self._aborted:
            msg = "this writer is closed: it was aborted (after an error, or by abort()); start again with a new one"
            raise InvalidValueError(msg)
        if self._closed:
            msg = "this writer is closed"
            raise InvalidValueError(msg)

    def _write_obs(self, tile_cells: np.ndarray) -> dict[str, Any]:
        if self.obs is None:
            return {}
        from deltacells.obs import write_obs

        n_cells = int(tile_cells.sum())
        if self.obs.shape[0] != n_cells:
            msg = f"obs has {self.obs.shape[0]} rows but {n_cells} cells were written"
            raise InvalidValueError(msg)
        result = write_obs(
            self._target,
            self.obs,
            tile_cells,
            obs_tiles_per_file=self.obs_tiles_per_file,
            max_categories=self.max_categories,
        )
        self.metadata = with_obs_names_unique(self.metadata, result.names_unique)  # readers need not check again
        return result.manifest_fields()

    def _write_sidecars(self) -> None:
        """Submit the gene order, gene names and gene table (waited for with the tiles)."""
        if self.gene_order is not None:
            buffer = io.BytesIO()
            np.save(buffer, self.gene_order.astype(GENE_ORDER_DTYPE), allow_pickle=False)
            self._uploads.submit(GENE_ORDER_NAME, buffer.getvalue())
        if self.var_names is not None:
            names = self.var_names if self.gene_order is None else [self.var_names[i] for i in self.gene_order]
            self._uploads.submit(VAR_NAMES_NAME, "".join(f"{name}\n" for name in names).encode("utf-8"))
        if self.var is not None:
            var = self.var if self.gene_order is None else self.var.iloc[self.gene_order]
            self._uploads.submit(VAR_TABLE_NAME, var_table_bytes(var))


def var_table_bytes(var: pd.DataFrame) -> bytes:
    """``var.parquet``: the gene table with its pandas index, zstd-compressed (:func:`parquet_write_options`).

    Raises
    ------
    ValueError
        If a column cannot be stored as parquet (naming the problem).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltacells._parquet import parquet_write_options

    try:
        table = pa.Table.from_pandas(var, preserve_index=True)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        msg = f"var cannot be stored as parquet ({exc}); convert or drop the offending columns"
        raise InvalidValueError(msg) from exc
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **parquet_write_options(table.schema))
    blob: bytes = sink.getvalue().to_pybytes()
    return blob


def _check_counts_dtype(dtype: DTypeLike) -> np.dtype:
    try:
        checked = np.dtype(dtype)
    except TypeError as exc:
        msg = f"counts_dtype must be an integer or floating dtype, got {dtype!r}"
        raise InvalidTypeError(msg) from exc
    if checked.kind not in COUNTS_DTYPE_KINDS:
        msg = f"counts_dtype must be an integer or floating dtype, got {checked}"
        raise InvalidTypeError(msg)
    return _sparse_dtype(checked)


def _sparse_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype readers can give counts of ``dtype`` in: itself, but float32 for float16 (scipy's sparse have none)."""
    return np.dtype(np.float32) if dtype.kind == "f" and dtype.itemsize < 4 else dtype


def _check_gene_order(gene_order: np.ndarray | None, n_genes: int) -> np.ndarray | None:
    if gene_order is None:
        return None
    order = np.asarray(gene_order)
    if (
        order.shape != (n_genes,)
        or order.dtype.kind not in "iu"
        or not np.array_equal(np.sort(order), np.arange(n_genes))
    ):
        msg = f"gene_order must be a permutation of 0 .. {n_genes - 1}"
        raise InvalidValueError(msg)
    return order.astype(np.int32)


def _check_var_names(var_names: Iterable[str] | None, n_genes: int) -> list[str] | None:
    if var_names is None:
        return None
    names = [str(name) for name in var_names]
    if len(names) != n_genes:
        msg = f"var_names has {len(names)} names for {n_genes} genes"
        raise InvalidValueError(msg)
    bad = [name for name in names if "\n" in name or "\r" in name]
    if bad:
        msg = f"gene name {bad[0]!r} contains a line break, which var_names.txt cannot hold"
        raise InvalidValueError(msg)
    return names


def _json_object(metadata: dict[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        msg = f"metadata must be a dict (a JSON object), got {type(metadata).__name__}"
        raise InvalidTypeError(msg)
    try:
        copied: dict[str, Any] = json.loads(json.dumps(metadata))  # a JSON object in, a JSON object out
        return copied
    except (TypeError, ValueError) as exc:
        msg = f"metadata must be JSON-serialisable: {exc}"
        raise InvalidTypeError(msg) from exc
