"""The streaming tile writer: row blocks of a count matrix in, a complete dataset out, manifest last."""

from __future__ import annotations

import contextlib
import io
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

from deltacells._threads import default_threads
from deltacells.codec import encode_tile
from deltacells.codec._encode import DEFAULT_LEVEL, DEFAULT_N_CHUNKS
from deltacells.dataset._counts import to_count_csr
from deltacells.dataset._manifest import MANIFEST_NAME, Manifest, tile_path
from deltacells.storage import Store

#: Cells per tile unless the caller says otherwise.
DEFAULT_TILE_SIZE = 2048

#: Entries of a dataset root that the writer owns (and removes on overwrite).
DATASET_ENTRIES = (MANIFEST_NAME, "tiles", "obs", "gene_order.npy", "var_names.txt", "var.parquet")

__all__ = ["DEFAULT_TILE_SIZE", "TileWriter"]


class TileWriter:
    """Write a dataset from consecutive row blocks of a count matrix.

    Rows arrive in blocks of any size (:meth:`write`); full tiles are encoded on a
    thread pool while more rows arrive, with a bounded number in flight, so memory
    stays at a few tiles whatever the size of the matrix. :meth:`close` writes the
    last tile, the sidecar files and, last of all, ``manifest.json``. Used as a
    context manager, an exception aborts the write: no manifest is written and the
    tiles written so far are removed.

    Parameters
    ----------
    path
        Output directory or fsspec URL.
    n_genes
        Columns of the matrix.
    tile_size
        Cells per tile.
    n_chunks
        Chunks per tile (decoded in parallel by readers).
    level
        zstd level.
    gene_order
        ``gene_order[j]`` is the source column written as output column ``j``; blocks
        passed to :meth:`write` are in *source* column order and reordered here.
        ``None`` keeps the columns as they are (and writes no ``gene_order.npy``).
    var_names
        Gene names in *source* order, written to ``var_names.txt`` in output order.
    obs
        Per-cell table (one row per cell, in order), written as the obs sidecar at
        :meth:`close` (see :func:`deltacells.obs.write_obs`).
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
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Store,
        n_genes: int,
        *,
        tile_size: int = DEFAULT_TILE_SIZE,
        n_chunks: int = DEFAULT_N_CHUNKS,
        level: int = DEFAULT_LEVEL,
        gene_order: np.ndarray | None = None,
        var_names: list[str] | np.ndarray | None = None,
        obs: pd.DataFrame | None = None,
        var: pd.DataFrame | None = None,
        obs_tiles_per_file: int = 1000,
        max_categories: int = 20_000,
        metadata: dict[str, Any] | None = None,
        overwrite: bool = False,
        storage_options: dict[str, Any] | None = None,
        threads: int | None = None,
    ) -> None:
        if not 1 <= int(n_genes) <= 2**31:
            msg = f"n_genes must be 1 .. 2^31, got {n_genes} (a dataset needs at least one gene)"
            raise ValueError(msg)
        if int(tile_size) < 1:
            msg = f"tile_size must be a positive number of cells, got {tile_size}"
            raise ValueError(msg)
        if int(n_chunks) < 1:
            msg = f"n_chunks must be at least 1, got {n_chunks}"
            raise ValueError(msg)
        self.store = path if isinstance(path, Store) else Store(path, storage_options)
        self.n_genes = int(n_genes)
        self.tile_size = int(tile_size)
        self.n_chunks = int(n_chunks)
        self.level = int(level)
        self.metadata = _json_object(metadata)
        self.gene_order = _check_gene_order(gene_order, self.n_genes)
        self._inverse = None
        if self.gene_order is not None:
            self._inverse = np.empty(self.n_genes, dtype=np.int32)
            self._inverse[self.gene_order] = np.arange(self.n_genes, dtype=np.int32)
        self.var_names = _check_var_names(var_names, self.n_genes)
        if var is not None and var.shape[0] != self.n_genes:
            msg = f"var has {var.shape[0]} rows for {self.n_genes} genes"
            raise ValueError(msg)
        self.obs = obs
        self.var = var
        if int(obs_tiles_per_file) < 1:
            msg = f"obs_tiles_per_file must be at least 1, got {obs_tiles_per_file}"
            raise ValueError(msg)
        self.obs_tiles_per_file = int(obs_tiles_per_file)
        self.max_categories = int(max_categories)

        check_output(self.store, overwrite=overwrite)
        clear_output(self.store)
        n_threads = default_threads() if threads is None else max(1, int(threads))
        self._pool = ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="deltacells-write")
        self._max_in_flight = 2 * n_threads
        self._in_flight: deque[Future[tuple[int, int, int]]] = deque()
        self._pending: list[sparse.csr_matrix] = []
        self._pending_rows = 0
        self._rows_written = 0
        self._rows_received = 0
        self._tile_cells: list[int] = []
        self._tile_nnz: list[int] = []
        self._tile_bytes: list[int] = []
        self._closed = False
        self._aborted = False
        self.manifest: Manifest | None = None

    # ------------------------------------------------------------------ context

    def __enter__(self) -> TileWriter:
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
        return self._rows_received

    # ------------------------------------------------------------------ writing

    def write(self, block: Any) -> None:
        """Append rows: a scipy sparse matrix (any format) or a dense 2-D array of counts.

        Raises
        ------
        ValueError, TypeError
            For values that are not counts (see :func:`~deltacells.dataset.to_count_csr`).
        """
        self._check_open()
        csr = to_count_csr(block, first_row=self.n_cells, n_genes=self.n_genes)
        if self._inverse is not None and csr.nnz:
            csr = sparse.csr_matrix((csr.data, self._inverse[csr.indices], csr.indptr), shape=csr.shape)
            csr.has_sorted_indices = False
            csr.sort_indices()
        self._pending.append(csr)
        self._pending_rows += csr.shape[0]
        self._rows_received += csr.shape[0]
        try:
            while self._pending_rows >= self.tile_size:
                self._emit_tile(self.tile_size)
        except BaseException:
            # A tile failed to encode or store: the dataset cannot be completed.
            self.abort()
            raise

    def close(self) -> Manifest:
        """Finish: the last tile, the sidecar files, then ``manifest.json``. Returns the manifest."""
        if self._aborted:
            self._check_open()
        if self._closed:
            assert self.manifest is not None
            return self.manifest
        try:
            if self._pending_rows:
                self._emit_tile(self._pending_rows)
            while self._in_flight:
                self._collect_one()
            self._write_sidecars()
            obs_fields = self._write_obs()
            self.manifest = Manifest(
                n_cells=self._rows_written,
                n_genes=self.n_genes,
                tile_size=self.tile_size,
                tile_cells=np.asarray(self._tile_cells, dtype=np.int64),
                tile_nnz=np.asarray(self._tile_nnz, dtype=np.int64),
                tile_bytes=np.asarray(self._tile_bytes, dtype=np.int64),
                n_chunks=self.n_chunks,
                zstd_level=self.level,
                has_gene_order=self.gene_order is not None,
                has_var_names=self.var_names is not None,
                has_var_table=self.var is not None,
                metadata=self.metadata,
                **obs_fields,
            )
            self.store.write(MANIFEST_NAME, self.manifest.to_json().encode())
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self._pool.shutdown()
        return self.manifest

    def abort(self) -> None:
        """Stop without a manifest and remove what was written so far."""
        if self._closed:
            return
        self._closed = True
        self._aborted = True
        for future in self._in_flight:
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._in_flight.clear()
        for entry in DATASET_ENTRIES:
            with contextlib.suppress(OSError):  # best effort on the way out
                self.store.remove(entry)

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._aborted:
            msg = (
                "this TileWriter is closed: it was aborted (after an error, or by abort()); start again with a new one"
            )
            raise ValueError(msg)
        if self._closed:
            msg = "this TileWriter is closed"
            raise ValueError(msg)

    def _emit_tile(self, n_rows: int) -> None:
        block = self._take_rows(n_rows)
        index = len(self._tile_cells) + len(self._in_flight)
        while len(self._in_flight) >= self._max_in_flight:
            self._collect_one()
        self._in_flight.append(self._pool.submit(self._encode_and_store, index, block))

    def _take_rows(self, n_rows: int) -> sparse.csr_matrix:
        taken: list[sparse.csr_matrix] = []
        need = n_rows
        while need:
            head = self._pending[0]
            if head.shape[0] <= need:
                taken.append(self._pending.pop(0))
                need -= head.shape[0]
            else:
                taken.append(head[:need])
                self._pending[0] = head[need:]
                need = 0
        self._pending_rows -= n_rows
        return taken[0] if len(taken) == 1 else sparse.vstack(taken, format="csr")

    def _encode_and_store(self, index: int, block: sparse.csr_matrix) -> tuple[int, int, int]:
        name = tile_path(index)
        blob = encode_tile(
            block.indptr, block.indices, block.data, self.n_genes, n_chunks=self.n_chunks, level=self.level,
            threads=1, name=f"{self.store.url}/{name}",
        )  # fmt: skip
        self.store.write(name, blob)
        return block.shape[0], block.nnz, len(blob)

    def _collect_one(self) -> None:
        cells, nnz, size = self._in_flight.popleft().result()
        self._tile_cells.append(cells)
        self._tile_nnz.append(nnz)
        self._tile_bytes.append(size)
        self._rows_written += cells

    def _write_obs(self) -> dict[str, Any]:
        if self.obs is None:
            return {}
        from deltacells.obs import write_obs

        if self.obs.shape[0] != self._rows_written:
            msg = f"obs has {self.obs.shape[0]} rows but {self._rows_written} cells were written"
            raise ValueError(msg)
        result = write_obs(
            self.store,
            self.obs,
            np.asarray(self._tile_cells, dtype=np.int64),
            obs_tiles_per_file=self.obs_tiles_per_file,
            max_categories=self.max_categories,
        )
        return result.manifest_fields()

    def _write_sidecars(self) -> None:
        if self.gene_order is not None:
            buffer = io.BytesIO()
            np.save(buffer, self.gene_order.astype("<i4"), allow_pickle=False)
            self.store.write("gene_order.npy", buffer.getvalue())
        if self.var_names is not None:
            names = self.var_names if self.gene_order is None else [self.var_names[i] for i in self.gene_order]
            self.store.write("var_names.txt", "".join(f"{name}\n" for name in names).encode("utf-8"))
        if self.var is not None:
            var = self.var if self.gene_order is None else self.var.iloc[self.gene_order]
            self.store.write("var.parquet", var_table_bytes(var))


def var_table_bytes(var: pd.DataFrame) -> bytes:
    """``var.parquet``: the gene table with its pandas index, zstd-compressed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.Table.from_pandas(var, preserve_index=True)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        msg = f"var cannot be stored as parquet ({exc}); convert or drop the offending columns"
        raise ValueError(msg) from exc
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def check_output(store: Store, *, overwrite: bool) -> None:
    """Refuse to clobber an existing dataset (or unrelated files) unless asked to."""
    present = store.listdir()
    if store.exists("") and not store.fs.isdir(store.root):
        msg = f"{store.url} exists and is not a directory; choose another output path"
        raise FileExistsError(msg)
    if present:
        ours = all(_is_ours(entry) for entry in present)
        if not overwrite:
            what = (
                "a deltacells dataset"
                if MANIFEST_NAME in present
                else ("an unfinished deltacells dataset" if ours else "other files")
            )
            msg = f"{store.url} already holds {what}; pass overwrite=True to replace it, or choose another path"
            raise FileExistsError(msg)
        if not ours and "tiles" not in present and MANIFEST_NAME not in present:
            msg = f"{store.url} holds files that are not a deltacells dataset; refusing to overwrite them"
            raise FileExistsError(msg)


def _is_ours(entry: str) -> bool:
    """A dataset entry, or the temporary file of one that a killed writer left (``<entry>.<hex>.tmp``)."""
    if entry in DATASET_ENTRIES:
        return True
    stem, _, suffix = entry.rpartition(".")
    return suffix == "tmp" and stem.rpartition(".")[0] in DATASET_ENTRIES


def clear_output(store: Store) -> None:
    """Remove what a previous dataset left at ``store`` (manifest first) and create the root."""
    # The manifest goes first, so that a half-removed dataset never looks complete.
    for entry in DATASET_ENTRIES:
        store.remove(entry)
    for entry in store.listdir():
        if _is_ours(entry):  # temporary files of a writer that was killed
            store.remove(entry)
    store.makedirs()


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
        raise ValueError(msg)
    return order.astype(np.int32)


def _check_var_names(var_names: list[str] | np.ndarray | None, n_genes: int) -> list[str] | None:
    if var_names is None:
        return None
    names = [str(name) for name in var_names]
    if len(names) != n_genes:
        msg = f"var_names has {len(names)} names for {n_genes} genes"
        raise ValueError(msg)
    bad = [name for name in names if "\n" in name or "\r" in name]
    if bad:
        msg = f"gene name {bad[0]!r} contains a line break, which var_names.txt cannot hold"
        raise ValueError(msg)
    return names


def _json_object(metadata: dict[str, Any] | None) -> dict[str, Any]:
    import json

    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        msg = f"metadata must be a dict (a JSON object), got {type(metadata).__name__}"
        raise TypeError(msg)
    try:
        return json.loads(json.dumps(metadata))
    except (TypeError, ValueError) as exc:
        msg = f"metadata must be JSON-serialisable: {exc}"
        raise TypeError(msg) from exc
