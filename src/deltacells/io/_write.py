"""``write_deltacells``: any AnnData to a deltacells dataset, streaming, genes by decreasing totals."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from deltacells._checks import check_names
from deltacells._kernel_loading import prepare_kernels
from deltacells.codec import Level, resolve_level
from deltacells.core import DatasetWriter, check_output, holds_dataset
from deltacells.errors import DiskFullError, InvalidValueError, UnknownKeyError, warn
from deltacells.io._dask_write import dask_gene_totals, dask_matrix, store_dask_tiles
from deltacells.io._extras import collect_extras, write_extras
from deltacells.io._sources import MatrixSource, is_dask, matrix_source, view_parts
from deltacells.storage import open_store
from deltacells.tiles import DEFAULT_LEVEL, DEFAULT_N_CHUNKS, DEFAULT_TILE_SIZE, column_totals

#: From this many cells, a write starts loading numba's kernels in the background (if they are not loaded):
#: once they are, each tile's genes are reordered by a radix sort (``deltacells.tiles.permute_columns``),
#: about 10 ms a tile of 2,048 Visium cells faster than without, which repays the loading (about 0.45 s of
#: CPU time in a fresh process) from about 45 tiles on.
KERNELS_MIN_CELLS = 50_000

if TYPE_CHECKING:
    import anndata as ad

__all__ = ["write_deltacells"]


def write_deltacells(
    adata: ad.AnnData,
    path: str | os.PathLike[str],
    *,
    layer: str | None = None,
    raw: bool = False,
    reorder_genes: bool = True,
    tile_size: int = DEFAULT_TILE_SIZE,
    n_chunks: int = DEFAULT_N_CHUNKS,
    level: Level = DEFAULT_LEVEL,
    obs_columns: Sequence[str] | None = None,
    max_categories: int = 20_000,
    obs_tiles_per_file: int = 1000,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
    threads: int | None = None,
    progress: bool = True,
    storage_options: dict[str, Any] | None = None,
    io_concurrency: int | None = None,
    extras: bool = True,
    append: bool = False,
    obsp: str = "refuse",
    commit_retries: int = 10,
    single_writer: bool = False,
) -> None:
    """Write an AnnData's raw counts as a deltacells dataset, with everything else the AnnData holds.

    Works for any AnnData: in memory (CSR, CSC, dense), backed h5ad (``backed="r"``),
    zarr, dask-backed, views, and datasets read with :func:`read_deltacells`. The matrix
    is streamed in blocks of rows, so memory stays at a few tiles; with gene
    reordering it is read twice (gene totals first, then the tiles).

    A dask matrix (anndata's ``read_lazy``, ``read_deltacells(..., chunks=...)``) is converted by dask tasks
    under the scheduler in effect (the workers of the active ``dask.distributed`` client, or dask's local
    threads): one task per block sums its genes, then one task per run of whole tiles encodes them and
    stores them at ``path`` itself (which the workers must reach); this process writes obs, var and the
    manifest, last. The tiles, obs and manifest are the same as from memory, byte for byte.

    Parameters
    ----------
    adata
        The AnnData to write.
    path
        Output directory or fsspec URL.
    layer
        Write ``adata.layers[layer]`` instead of ``X``.
    raw
        Write ``adata.raw.X`` (with ``adata.raw.var``) instead of ``X``.
    reorder_genes
        Sort genes by decreasing total counts (ties keep their order) and record the
        order in ``gene_order.npy``; this makes the tiles smaller and faster.
    tile_size
        Cells per tile.
    n_chunks
        Chunks per tile, decoded in parallel by readers.
    level
        zstd level: ``"default"`` (level 6: faster than writing a gzip h5ad, for about a third of its
        size), ``"archive"`` (level 19: about 7% smaller tiles, 20 times slower to encode; as fast to
        read), or an integer ``1 .. 22`` (higher: smaller files, slower writing, same reading speed).
        The manifest records the integer level (``zstd_level``).
    obs_columns
        obs columns to store (``None``: all; ``[]``: none, only the cell names).
    max_categories
        Categorical obs columns with more categories are stored as strings.
    obs_tiles_per_file
        Tiles per obs parquet shard.
    metadata
        Free-form JSON object stored in the manifest.
    overwrite
        Replace an existing dataset at ``path``. The old dataset stays whole and readable until the new one
        is complete; a conversion that fails or is killed leaves it as it was.
    threads
        Threads encoding tiles (default: the usable CPUs); for a dask matrix, dask's workers encode instead.
    progress
        Show a progress bar.
    storage_options
        fsspec options for ``path``.
    io_concurrency
        The most uploads in flight at once (default: 32 on object storage and other remote filesystems,
        8 on a local disk).
    extras
        Also store every other element of the AnnData (obsm, varm, obsp, varp, uns, the layers not written to
        the tiles, raw, and X when the counts come from ``layer=`` or ``raw=True``) with anndata's own element
        writer, in the zarr group ``anndata.zarr`` beside the tiles (docs/format.md, decision 15), so that
        :func:`read_deltacells` gives the whole AnnData back. ``False`` stores the counts, obs and var only.
    append
        Add ``adata``'s cells after the cells of the dataset at ``path`` (docs/format.md, decision 17; a path without a
        dataset gets a new one). Genes are matched by name (any order; the dataset's gene order and var are
        kept), obs columns by name and kind (a categorical's vocabulary grows; obs names must stay unique), the
        last partial tile is completed, and obsm grows with the cells. The dataset's own settings
        (``tile_size``, ``n_chunks``, ``level``, ``obs_tiles_per_file``) apply, and ``reorder_genes`` does not.
        The append is committed atomically: a reader, or a writer killed at any point, sees the dataset
        without or with all of the new cells; concurrent appenders are serialised by a lock on a local disk
        and by a conditional write on S3 (see ``commit_retries``).
    obsp
        With ``append=True``, what happens to per-cell graphs (obsp): ``"refuse"`` (an error, the default) or
        ``"block_diagonal"`` (the new cells' graphs are added as blocks of their own, with no edge to the
        dataset's cells).
    commit_retries
        With ``append=True``, how many times an append that another writer beat to the commit starts again
        (re-reading the dataset) before raising :class:`~deltacells.errors.CommitConflictError`; 0 raises at
        once.
    single_writer
        With ``append=True`` on object storage: only one process ever appends to this dataset, so the append
        need not first prove that the server honours conditional writes (an object written ``If-None-Match: *``
        twice must be refused the second time; stock moto and some S3-compatible stores accept it, which would
        let concurrent appenders both win). Without it such a store is refused.

    Raises
    ------
    ValueError
        For values that are not raw counts (non-integer, negative, above 2^31 - 1),
        naming the first offending cell and gene, an obs column of a type the
        format cannot hold, naming the column, or an unknown ``level``; no dataset is left behind.
    FileExistsError
        If ``path`` holds a dataset and neither ``overwrite`` nor ``append`` is true.
    TypeError
        For an element anndata's writer cannot store (naming it), before any tile is written.
    CommitConflictError
        With ``append=True``, if other writers committed first ``commit_retries + 1`` times.
    StorageError
        With ``append=True``, if the object store does not honour conditional writes and ``single_writer`` is
        false; nothing is changed.
    """
    level = resolve_level(level)
    if append and overwrite:
        msg = "append=True adds cells to the dataset and overwrite=True replaces it: pass one of them"
        raise InvalidValueError(msg)
    source = matrix_source(adata, layer=layer, raw=raw)
    if source.n_cols == 0:
        msg = (
            "the counts have no gene (n_vars is 0), and a deltacells dataset holds at least one gene: every tile "
            "records its cells' counts over n_genes >= 1 genes (docs/format.md, the tile header). Nothing was "
            "written; keep such an AnnData with anndata's writers (write_h5ad, write_zarr)"
        )
        raise InvalidValueError(msg)
    obs = _obs_to_write(adata, obs_columns, max_categories=max_categories)
    ref = view_parts(adata)[0]
    var = _in_memory(ref.raw.var if raw else ref.var).iloc[source.cols].copy()
    store = open_store(path, storage_options, io_concurrency=io_concurrency)
    counts, elements = collect_extras(adata, layer=layer, raw=raw) if extras else ("X", {})
    if append and holds_dataset(store):
        from deltacells.io._append import append_anndata

        bar = _progress_bar(source.n_rows, enabled=progress)
        bar.set_description("append")
        try:
            with _disk_full_explained(store.url, append=True):
                append_anndata(
                    adata, store, source=source, obs=obs, var=var, counts=counts,
                    elements=elements if extras else None, block_rows=max(tile_size, 4096), obsp=obsp,
                    threads=threads, commit_retries=commit_retries, bar=bar, single_writer=single_writer,
                )  # fmt: skip
        finally:
            bar.close()
        return
    check_output(store, overwrite=overwrite)
    if not var.index.is_unique:
        warn(
            "var_names are not unique; they are written as they are (read_deltacells gives them back in the "
            "same order). Call adata.var_names_make_unique() first for unique names."
        )

    n_cells, n_genes = source.n_rows, source.n_cols
    if reorder_genes and n_cells >= KERNELS_MIN_CELLS:
        prepare_kernels()  # the tiles' genes are reordered by a compiled kernel once loaded (permute_columns)
    block_rows = max(tile_size, 4096)
    on_dask = is_dask(source.matrix)
    matrix = dask_matrix(source) if on_dask else None
    bar = _progress_bar(n_cells, enabled=progress)
    try:
        gene_order = None
        if reorder_genes:
            bar.set_description("gene totals")
            totals = dask_gene_totals(matrix, bar) if on_dask else gene_totals(source, block_rows, bar)
            gene_order = np.argsort(-totals, kind="stable")
            bar.reset(total=n_cells)
        bar.set_description("tiles")
        writer = DatasetWriter(
            store,
            n_genes,
            tile_size=tile_size,
            n_chunks=n_chunks,
            level=level,
            gene_order=gene_order,
            var_names=var.index.astype(str),
            obs=obs,
            var=var,
            obs_tiles_per_file=obs_tiles_per_file,
            max_categories=max_categories,
            metadata=metadata,
            overwrite=overwrite,
            threads=threads,
            counts_dtype=getattr(source.matrix, "dtype", None),  # read back in it (docs/format.md, decision 9)
        )
        with _disk_full_explained(store.url, append=False), writer:
            if elements:  # before any tile: an element anndata cannot write fails the conversion now
                stored = write_extras(writer.tile_store, counts, elements)
                writer.metadata = _with_extras(writer.metadata, stored.to_dict())
            if on_dask:  # the tasks store the tiles; the manifest is written here, last
                tiles = store_dask_tiles(
                    matrix, writer.tile_store, tile_size=writer.tile_size, n_chunks=writer.n_chunks,
                    level=writer.level, gene_order=gene_order, bar=bar,
                )  # fmt: skip
                writer.add_tiles(tiles)
            else:
                _write_blocks(writer, source, block_rows, bar)
    finally:
        bar.close()


@contextlib.contextmanager
def _disk_full_explained(url: str, *, append: bool) -> Iterator[None]:
    """Raise :class:`~deltacells.errors.DiskFullError` for a write that ran out of space, naming what it left.

    The writer has already cleaned up when this sees the error: an append removed what it staged and never
    committed (the dataset is the old version, whole); a new dataset has no ``manifest.json`` (nothing is left
    that looks complete, and what was written is removed; an overwritten dataset stays as it was).
    """
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.ENOSPC or isinstance(exc, DiskFullError):
            raise
        left = (
            "the dataset is unchanged (the append was not committed; what it had staged is removed)"
            if append
            else "no dataset was written (no manifest.json; what was written is removed, a dataset overwritten "
            "stays as it was)"
        )
        where = f" ({exc.filename})" if exc.filename else ""
        msg = f"{url}: no space left on the device{where}; {left}. Free some space and run again"
        raise DiskFullError(errno.ENOSPC, msg) from exc


def gene_totals(source: MatrixSource, block_rows: int, bar: Any = None) -> np.ndarray:
    """The first pass of :func:`write_deltacells`: every gene's total count, the values checked on the way.

    A block that is a scipy sparse matrix with valid counts is summed as it is (no copy, no conversion to
    the canonical CSR that the tiles need); any other block, or one with a value that is not a count, goes
    through :func:`~deltacells.tiles.to_count_csr`, which raises the usual error for it.

    Parameters
    ----------
    source
        The matrix.
    block_rows
        Rows read at a time.
    bar
        A progress bar to advance (``None``: none).

    Returns
    -------
    numpy.ndarray
        ``float64[n_genes]``, exact for totals below 2^53.

    Raises
    ------
    InvalidValueError, InvalidTypeError
        For values that are not counts (see :func:`~deltacells.tiles.to_count_csr`).
    """
    n_genes = source.n_cols
    totals = np.zeros(n_genes, dtype=np.float64)
    first_row = 0
    for block in source.blocks(block_rows):
        totals += column_totals(block, first_row=first_row, n_genes=n_genes)
        first_row += block.shape[0]
        if bar is not None:
            bar.update(block.shape[0])
    return totals


def _write_blocks(writer: DatasetWriter, source: MatrixSource, block_rows: int, bar: Any) -> None:
    for block in source.blocks(block_rows):
        before = writer.n_cells
        writer.write(block)
        bar.update(writer.n_cells - before)


def _obs_to_write(adata: ad.AnnData, obs_columns: Sequence[str] | None, *, max_categories: int) -> pd.DataFrame:
    """The obs columns to store, checked now (before any tile is written).

    A lazy obs (anndata's xarray-backed ``Dataset2D``, as ``read_deltacells`` gives for large datasets) is
    brought into memory: the columns to store, for the cells of ``adata``.
    """
    obs = adata.obs
    if not isinstance(obs, pd.DataFrame) and hasattr(obs, "to_memory"):
        from deltacells.io._lazy_obs import LazyObs

        present = None if obs_columns is None or isinstance(obs_columns, str) else [c for c in obs_columns if c in obs]
        if isinstance(obs, LazyObs):
            obs = obs.to_memory(columns=present)
        elif present == []:  # the names only (columns asked for that are not there are reported below)
            index = obs.true_index
            obs = pd.DataFrame(index=index.rename(None if index.name == "_index" else index.name))
        else:
            obs = (obs if present is None else obs[present]).to_memory()
    if obs_columns is not None:
        check_names("obs_columns", obs_columns, of="column names")
    if obs_columns is not None:
        missing = [c for c in obs_columns if c not in obs.columns]
        if missing:
            msg = f"obs_columns {missing} are not in adata.obs (which has {list(obs.columns)})"
            raise UnknownKeyError(msg)
        obs = obs[list(obs_columns)]
    from deltacells.obs import check_obs

    assert isinstance(obs, pd.DataFrame)  # a lazy obs was brought into memory above
    check_obs(obs, max_categories=max_categories)  # raises for columns the format cannot hold
    return obs


def _in_memory(frame: Any) -> pd.DataFrame:
    """A table as a pandas DataFrame: a lazy one (anndata's ``Dataset2D``, as ``read_lazy`` gives) is read."""
    in_memory: pd.DataFrame = (
        frame if isinstance(frame, pd.DataFrame) or not hasattr(frame, "to_memory") else frame.to_memory()
    )
    return in_memory


def _with_extras(metadata: dict[str, Any] | None, entry: dict[str, Any]) -> dict[str, Any]:
    """The manifest's metadata with ``anndata.zarr``'s entry in ``metadata["deltacells"]["anndata"]``."""
    metadata = dict(metadata or {})
    ours = metadata.get("deltacells")
    metadata["deltacells"] = {**(ours if isinstance(ours, dict) else {}), "anndata": entry}
    return metadata


def _progress_bar(total: int, *, enabled: bool) -> Any:
    if not enabled:  # tqdm.auto warns in notebooks without ipywidgets: import it only when a bar is wanted
        from tqdm import tqdm

        return tqdm(total=total, disable=True)
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="cells", unit_scale=True, dynamic_ncols=True)
