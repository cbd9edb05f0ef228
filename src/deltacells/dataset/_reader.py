"""Opening a dataset and reading any set of its cells as CSR, decoding only the tiles needed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from deltacells._threads import default_threads, shared_pool
from deltacells.codec import DecodedTile, decode_tile
from deltacells.dataset._cache import TileCache
from deltacells.dataset._gather import gather_rows
from deltacells.dataset._indexing import normalize_rows
from deltacells.dataset._manifest import MANIFEST_NAME, SIDECAR_FLAGS, Manifest, tile_path
from deltacells.errors import DatasetNotFoundError, FormatError, MissingObjectError, warn
from deltacells.storage import Store

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

#: Default bound on the decoded tiles a dataset keeps in memory.
DEFAULT_TILE_CACHE_BYTES = 256 * 2**20

__all__ = ["DEFAULT_TILE_CACHE_BYTES", "Dataset", "open_dataset"]


def open_dataset(
    path: str | os.PathLike[str] | Store,
    *,
    storage_options: dict[str, Any] | None = None,
    tile_cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
    threads: int | None = None,
) -> Dataset:
    """Open a deltacells dataset: read and check its manifest, nothing else.

    Parameters
    ----------
    path
        Local directory, fsspec URL (``s3://bucket/prefix``...) or :class:`~deltacells.storage.Store`.
    storage_options
        fsspec options for ``path`` (ignored when ``path`` is a Store).
    tile_cache_bytes
        Bound on the memory held by recently decoded tiles (0 disables the cache).
    threads
        Threads decoding tiles; ``None`` means the usable CPUs.

    Returns
    -------
    Dataset

    Raises
    ------
    DatasetNotFoundError
        If ``path`` has no ``manifest.json`` (no dataset, or an incomplete one).
    FormatError
        If the manifest or the files beside it are inconsistent.
    """
    store = path if isinstance(path, Store) else Store(path, storage_options)
    try:
        text = store.read(MANIFEST_NAME)
    except MissingObjectError as exc:
        msg = (
            f"{store.url}: no {MANIFEST_NAME}; this is not a deltacells dataset, or one whose writing did not "
            "finish (the manifest is written last)"
        )
        raise DatasetNotFoundError(msg) from exc
    manifest = Manifest.from_json(text, where=f"{store.url}/{MANIFEST_NAME}")
    _check_optional_files(store, manifest)
    return Dataset(store, manifest, tile_cache_bytes=tile_cache_bytes, threads=threads)


def _check_optional_files(store: Store, manifest: Manifest) -> None:
    """The has_* flags must agree with the files that are there (one listing of the root)."""
    present = store.listdir()
    obs_present = store.listdir("obs") if "obs" in present else set()
    for name, flagged in manifest.expected_files().items():
        here = (name.split("/", 1)[1] in obs_present) if name.startswith("obs/") else (name in present)
        if flagged != here:
            flag = SIDECAR_FLAGS[name]
            state = "missing" if flagged else "present"
            msg = f"{store.url}/{MANIFEST_NAME}: field {flag} is {str(flagged).lower()} but {name} is {state}"
            raise FormatError(msg)


class Dataset:
    """An open dataset: its manifest, and cells read on demand, tile by tile.

    Cheap to pickle: it pickles to its store (URL and options) and manifest, never
    to decoded data. Use :func:`open_dataset` to create one.
    """

    def __init__(
        self,
        store: Store,
        manifest: Manifest,
        *,
        tile_cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
        threads: int | None = None,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.threads = threads
        self._cache = TileCache(tile_cache_bytes)
        self._limits = manifest.limits
        self._starts = manifest.starts
        self.tiles_decoded = 0
        self._warned_precision = False

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.store, self.manifest.to_dict(), self._cache.max_bytes, self.threads))

    def __repr__(self) -> str:
        m = self.manifest
        return f"Dataset({self.store.url!r}, n_cells={m.n_cells}, n_genes={m.n_genes}, n_tiles={m.n_tiles})"

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_cells, n_genes)``."""
        return (self.manifest.n_cells, self.manifest.n_genes)

    @property
    def n_cells(self) -> int:
        """Number of cells (rows)."""
        return self.manifest.n_cells

    @property
    def n_genes(self) -> int:
        """Number of genes (columns)."""
        return self.manifest.n_genes

    @property
    def n_tiles(self) -> int:
        """Number of tiles."""
        return self.manifest.n_tiles

    @property
    def cache(self) -> TileCache:
        """The cache of recently decoded tiles."""
        return self._cache

    def tile_of(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tile and local row of each global cell index (``searchsorted`` on the limits)."""
        cells = np.asarray(cells, dtype=np.int64)
        tiles = np.searchsorted(self._limits, cells, side="right")
        return tiles, cells - self._starts[tiles]

    def tile_range(self, tile: int) -> tuple[int, int]:
        """Global cell range ``[start, stop)`` of ``tile``."""
        return int(self._starts[tile]), int(self._limits[tile])

    # ------------------------------------------------------------------ tiles

    def read_tile(self, tile: int) -> DecodedTile:
        """Return tile ``tile`` decoded (from the cache when it is there)."""
        return self._get_tile(tile, threads=self.threads)

    def _get_tile(self, tile: int, *, threads: int | None) -> DecodedTile:
        if not 0 <= tile < self.n_tiles:
            msg = f"tile {tile} is out of range for {self.n_tiles} tiles"
            raise IndexError(msg)
        cached = self._cache.get(tile)
        if cached is not None:
            return cached
        decoded = self._fetch_and_decode(tile, threads=threads)
        self._cache.put(tile, decoded)
        return decoded

    def _fetch_and_decode(self, tile: int, *, threads: int | None) -> DecodedTile:
        name = tile_path(tile)
        where = f"{self.store.url}/{name}"
        try:
            blob = self.store.read(name)
        except MissingObjectError as exc:
            msg = f"{where}: tile {tile} of {self.n_tiles} is missing from the dataset"
            raise MissingObjectError(msg) from exc
        m = self.manifest
        if len(blob) != m.tile_bytes[tile]:
            msg = (
                f"{where}: the tile has {len(blob)} bytes but manifest field tile_bytes[{tile}] "
                f"says {m.tile_bytes[tile]}"
            )
            raise FormatError(msg)
        decoded = decode_tile(blob, name=where, threads=threads)
        for field, got, want in (
            ("tile_cells", decoded.n_cells, m.tile_cells[tile]),
            ("tile_nnz", decoded.nnz, m.tile_nnz[tile]),
            ("n_genes", decoded.n_genes, m.n_genes),
        ):
            if got != want:
                index = "" if field == "n_genes" else f"[{tile}]"
                msg = f"{where}: the tile holds {got} for {field} but manifest field {field}{index} says {want}"
                raise FormatError(msg)
        self.tiles_decoded += 1
        return decoded

    def iter_tiles(
        self, tiles: np.ndarray | list[int] | None = None, *, batch: int | None = None
    ) -> Iterator[tuple[int, DecodedTile]]:
        """Yield ``(index, tile)`` for ``tiles`` (default: all), decoding a few at once in parallel.

        At most ``batch`` decoded tiles (default: twice the threads) are held beyond
        the cache at any time, so a loop over a whole dataset runs in flat memory.
        """
        order = np.arange(self.n_tiles) if tiles is None else np.asarray(tiles, dtype=np.int64)
        n_threads = default_threads() if self.threads is None else self.threads
        batch = batch or self._batch_size()
        if n_threads <= 1 or order.shape[0] <= 1:
            for t in order:
                yield int(t), self._get_tile(int(t), threads=n_threads)
            return
        pool = shared_pool()
        for lo in range(0, order.shape[0], batch):
            ids = [int(t) for t in order[lo : lo + batch]]
            futures = [pool.submit(self._get_tile, t, threads=1) for t in ids]
            try:
                for t, future in zip(ids, futures, strict=True):
                    yield t, future.result()
            finally:
                for future in futures:
                    future.cancel()

    # ------------------------------------------------------------------ rows

    def read_rows(self, index: Any = slice(None), *, dtype: DTypeLike = np.float32) -> sparse.csr_matrix:
        """Read the cells selected by ``index`` as a CSR matrix, in the requested order.

        Parameters
        ----------
        index
            A slice (any step), an integer, an integer array in any order with repeats
            and negative values, or a boolean mask over all cells.
        dtype
            Dtype of the values (the counts are exact up to 2^24 in float32).

        Returns
        -------
        scipy.sparse.csr_matrix
            ``len(rows) x n_genes``.
        """
        rows = normalize_rows(index, self.n_cells)
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, dtype=np.int64)
        dtype = np.dtype(dtype)
        n_out = rows.shape[0]
        tiles, local = self.tile_of(rows)
        order = np.argsort(tiles, kind="stable")
        sorted_tiles = tiles[order]
        needed, first = np.unique(sorted_tiles, return_index=True)
        bounds = np.append(first, n_out)

        if needed.shape[0] <= self._batch_size():
            return self._gather_direct(needed, order, bounds, local, n_out, dtype)
        increasing = n_out < 2 or bool(np.all(rows[1:] > rows[:-1]))
        if increasing:
            # Rows in tile order, no repeats: the output holds at most what the needed tiles hold.
            # When the request covers most of them, allocate that and fill tile by tile (then trim).
            capacity = int(self.manifest.tile_nnz[needed].sum())
            expected = float(
                (self.manifest.tile_nnz[needed] * np.diff(bounds) / self.manifest.tile_cells[needed]).sum()
            )
            if capacity <= 2 * expected + 1024:
                return self._gather_ascending(needed, order, bounds, local, n_out, dtype, capacity)
        return self._gather_compact(needed, order, bounds, local, n_out, dtype)

    def _csr(self, out_data: np.ndarray, out_indices: np.ndarray, out_indptr: np.ndarray) -> sparse.csr_matrix:
        index_dtype = out_indices.dtype
        return sparse.csr_matrix(
            (out_data, out_indices, out_indptr.astype(index_dtype, copy=False)),
            shape=(out_indptr.shape[0] - 1, self.n_genes),
            copy=False,
        )

    def _gather_direct(self, needed, order, bounds, local, n_out, dtype) -> sparse.csr_matrix:
        """Few tiles: decode them all, then copy the rows straight into the output."""
        tiles = [tile for _, tile in self._tiles_for(needed)]
        for tile in tiles:
            self._check_precision(tile, dtype)
        lengths = np.zeros(n_out, dtype=np.int64)
        for k, tile in enumerate(tiles):
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            lengths[slots] = tile.indptr[loc + 1] - tile.indptr[loc]
        out_indptr = _indptr_from_lengths(lengths)
        out_indices, out_data = _empty_output(int(out_indptr[-1]), dtype)
        for k, tile in enumerate(tiles):
            slots = order[bounds[k] : bounds[k + 1]]
            gather_rows(tile.indptr, tile.indices, tile.data, local[slots], out_indptr, slots, out_indices, out_data)
        return self._csr(out_data, out_indices, out_indptr)

    def _gather_ascending(self, needed, order, bounds, local, n_out, dtype, capacity) -> sparse.csr_matrix:
        """Rows in ascending order: stream the tiles, appending each one's rows to the output."""
        out_indptr = np.zeros(n_out + 1, dtype=np.int64)
        out_indices, out_data = _empty_output(capacity, dtype)
        for k, (_, tile) in enumerate(self._tiles_for(needed)):
            self._check_precision(tile, dtype)
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            first = int(slots[0])
            np.cumsum(tile.indptr[loc + 1] - tile.indptr[loc], out=out_indptr[first + 1 : first + 1 + slots.shape[0]])
            out_indptr[first + 1 : first + 1 + slots.shape[0]] += out_indptr[first]
            gather_rows(tile.indptr, tile.indices, tile.data, loc, out_indptr, slots, out_indices, out_data)
        nnz = int(out_indptr[-1])
        out_indices.resize(nnz, refcheck=False)
        out_data.resize(nnz, refcheck=False)
        return self._csr(out_data, out_indices, out_indptr)

    def _gather_compact(self, needed, order, bounds, local, n_out, dtype) -> sparse.csr_matrix:
        """Many tiles, any order: keep only each tile's selected rows, then assemble."""
        lengths = np.zeros(n_out, dtype=np.int64)
        parts = []
        for k, (_, tile) in enumerate(self._tiles_for(needed)):
            self._check_precision(tile, dtype)
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            lengths[slots] = tile.indptr[loc + 1] - tile.indptr[loc]
            parts.append((slots, *_select_rows(tile, loc, dtype)))
        out_indptr = _indptr_from_lengths(lengths)
        out_indices, out_data = _empty_output(int(out_indptr[-1]), dtype)
        for slots, loc, src_indptr, src_indices, src_data in parts:
            gather_rows(src_indptr, src_indices, src_data, loc, out_indptr, slots, out_indices, out_data)
        return self._csr(out_data, out_indices, out_indptr)

    def _check_precision(self, tile: DecodedTile, dtype: np.dtype) -> None:
        """Warn once per dataset when float32 (or narrower) values cannot hold the counts exactly."""
        if tile.inexact_in_float32 and dtype.kind == "f" and dtype.itemsize <= 4 and not self._warned_precision:
            self._warned_precision = True
            warn(
                f"{self.store.url}: some counts are above 2^24 and are not exact as {dtype}; "
                "read with dtype='int32', 'int64' or 'float64' to keep them exact"
            )

    def _batch_size(self) -> int:
        n_threads = default_threads() if self.threads is None else self.threads
        return max(2, 2 * n_threads)

    def _tiles_for(self, needed: np.ndarray) -> Iterator[tuple[int, DecodedTile]]:
        if needed.shape[0] == 1:
            t = int(needed[0])
            yield t, self._get_tile(t, threads=self.threads)
            return
        yield from self.iter_tiles(needed)

    # ------------------------------------------------------------------ sidecars

    def gene_order(self) -> np.ndarray | None:
        """``int32[n_genes]``: output column ``j`` was source column ``gene_order[j]`` (None without one)."""
        if not self.manifest.has_gene_order:
            return None
        import io

        where = f"{self.store.url}/gene_order.npy"
        try:
            order = np.load(io.BytesIO(self.store.read("gene_order.npy")), allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:
            msg = f"{where}: not a readable .npy array ({exc})"
            raise FormatError(msg) from exc
        n = self.n_genes
        if order.shape != (n,) or order.dtype.kind not in "iu" or not np.array_equal(np.sort(order), np.arange(n)):
            msg = f"{where}: must be a permutation of 0 .. {n - 1} (int32[{n}]), got {order.dtype}{list(order.shape)}"
            raise FormatError(msg)
        return order.astype(np.int32, copy=False)

    def var_names(self) -> list[str] | None:
        """Gene names in output column order from ``var_names.txt`` (None without one)."""
        if not self.manifest.has_var_names:
            return None
        where = f"{self.store.url}/var_names.txt"
        try:
            text = self.store.read("var_names.txt").decode("utf-8")
        except UnicodeDecodeError as exc:
            msg = f"{where}: not UTF-8 text ({exc})"
            raise FormatError(msg) from exc
        names = text.split("\n")
        if names and names[-1] == "":
            names.pop()
        if len(names) != self.n_genes:
            msg = f"{where}: {len(names)} names for n_genes = {self.n_genes}"
            raise FormatError(msg)
        return names


def _indptr_from_lengths(lengths: np.ndarray) -> np.ndarray:
    indptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr


def _empty_output(nnz: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Output arrays: int32 indices unless the nonzeros need 64-bit offsets (scipy's rule)."""
    index_dtype = np.int32 if nnz < 2**31 else np.int64
    return np.empty(nnz, dtype=index_dtype), np.empty(nnz, dtype=dtype)


def _select_rows(tile: DecodedTile, rows: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """Rows ``rows`` of ``tile`` as compact CSR arrays ``(rows', indptr, indices, data)``."""
    lengths = tile.indptr[rows + 1] - tile.indptr[rows]
    indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    data = np.empty(int(indptr[-1]), dtype=dtype)
    positions = np.arange(rows.shape[0], dtype=np.int64)
    gather_rows(tile.indptr, tile.indices, tile.data, rows, indptr, positions, indices, data)
    return positions, indptr, indices, data


def _rebuild(store: Store, manifest: dict[str, Any], tile_cache_bytes: int, threads: int | None) -> Dataset:
    return Dataset(store, Manifest.from_dict(manifest), tile_cache_bytes=tile_cache_bytes, threads=threads)
