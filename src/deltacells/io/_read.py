"""``read_deltacells``: a dataset as a lazy AnnData (X tile-indexed, obs from the local Arrow cache)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pandas as pd

from deltacells._checks import is_bool
from deltacells._kernel_loading import prepare_kernels
from deltacells.core import STALE_ERRORS, Collection, Dataset, manifest_changed, open_dataset
from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.io._anndata_hooks import register_anndata_io
from deltacells.io._assemble import anndata_parts, counts_location_in, counts_of, obsm_frames_named
from deltacells.io._collection import is_collection, read_collection
from deltacells.io._dask import Chunks, dataset_for, parse_chunks, source_of
from deltacells.io._frames import (
    column_order,
    default_names_of,
    names_known_unique,
    obs_store_and_columns,
    read_obs_frame,
    read_var,
)
from deltacells.io._lazy import TiledCSRDataset, read_options_of, with_read_options
from deltacells.io._lazy_obs import LazyObs, add_lazy_columns, lazy_obs_frame
from deltacells.io._read_options import ReadOptions
from deltacells.io._sources import view_parts
from deltacells.tiles import DEFAULT_TILE_CACHE_BYTES

if TYPE_CHECKING:
    import anndata as ad
    from numpy.typing import DTypeLike

__all__ = ["read_deltacells", "read_obs", "read_var", "restore_gene_order"]

#: Datasets with more cells than this get a lazy obs by default (``lazy_obs=None``): see :func:`read_deltacells`.
LAZY_OBS_MIN_CELLS = 1_000_000

#: Times :func:`read_deltacells` opens a dataset again when appends land while it reads obs, var and the extras.
OPEN_ATTEMPTS = 8


def read_deltacells(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str] | Dataset],
    *,
    obs_columns: Sequence[str] | None = None,
    obs_names: bool = True,
    dtype: DTypeLike | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    verify_obs: bool = True,
    storage_options: dict[str, Any] | None = None,
    tile_cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
    threads: int | None = None,
    gene_order: Literal["original", "stored"] = "original",
    io_concurrency: int | None = None,
    lazy_obs: bool | None = None,
    chunks: Chunks | None = None,
    extras: bool = True,
    join: Literal["inner", "outer"] = "inner",
    label: str | None = "dataset",
    keys: Sequence[str] | None = None,
    var_key: str | None = None,
    index_unique: str | None = None,
    merge: Literal["same", "unique", "first", "only"] | Callable[..., Any] | None = None,
) -> ad.AnnData:
    """Open a deltacells dataset as an AnnData whose ``X`` is read lazily.

    Opening reads ``manifest.json`` and the gene table; no tile is decoded.
    ``adata[cells].X``, ``adata[cells].to_memory()`` or ``adata.X[cells]`` decode only
    the tiles that hold the requested cells.

    A list (or tuple) of datasets opens them as one collection (docs/format.md, decision 16): their cells one after the
    other in the order given, their genes joined as :func:`anndata.concat` joins them (``join``), each
    dataset's stored columns mapped to the join's as its tiles decode, and obs joined by
    :func:`anndata.concat` itself, with a ``label`` column saying which dataset each cell came from. See the
    user guide's "Collections" page.

    Parameters
    ----------
    path
        Local directory or fsspec URL (``s3://bucket/prefix``...); or a list of them (and of opened
        :class:`~deltacells.Dataset` objects): a collection.
    obs_columns
        obs columns to load (from the local Arrow cache, localizing them on first
        use); ``None`` loads all, ``[]`` none. Others can be added later with
        :func:`read_obs`.
    obs_names
        Use the stored cell names (the ``_index`` column) as ``obs_names``; with
        ``False`` (or when none are stored) they are ``"0" .. "n-1"``.
    dtype
        dtype of the counts' values: ``None`` (default) gives them in the dtype they were written in (the
        writer records it; docs/format.md, decision 9), ``float32`` for a dataset that records none (written
        before deltacells recorded it), and a collection's in the dtype :func:`anndata.concat` would give
        its datasets' (numpy's promotion). ``float32``, ``int32``, ``int64`` or ``float64`` read in that
        dtype instead. Counts above 2^24 are not exact in float32: reading them as float32 warns once.
    cache_dir
        Root of the local obs cache (default: ``$DELTACELLS_CACHE``,
        ``$XDG_CACHE_HOME/deltacells``, ``~/.cache/deltacells``).
    verify_obs
        Check each obs shard's SHA-256 against the manifest the first time it is read
        into the cache (the whole shard is read once); with ``False`` only the column
        chunks needed are fetched.
    storage_options
        fsspec options for ``path`` (credentials, endpoint, timeouts; see the user guide on object storage).
    tile_cache_bytes
        Bound on the decoded tiles kept in memory.
    threads
        Threads decoding tiles (default: the usable CPUs).
    io_concurrency
        The most requests in flight at once, apart from the decoding threads (default: 32 on object storage
        and other remote filesystems, 8 on a local disk).
    gene_order
        ``"original"`` (default): genes in the order of the AnnData that was written (docs/format.md, decision 13); the
        stored column numbers are mapped back through ``gene_order.npy`` while rows are copied, and var
        follows, so a round trip gives back the AnnData that was written. Each row's columns are then sorted
        again (canonical CSR, as scipy makes it; a linear pass per row). ``"stored"``: genes as stored, by
        decreasing total counts (no mapping, no sorting: the last bit of speed).

    lazy_obs
        Read obs lazily: ``True``, ``False``, or ``None`` (default) for lazily when the dataset has more than
        1,000,000 cells. A lazy obs is the xarray-backed ``anndata.experimental.backed.Dataset2D`` (as
        :func:`anndata.experimental.read_lazy` gives): opening costs the same for a thousand cells or a
        hundred million, ``obs_names`` are the cell numbers ``0 .. n-1``, a column is read from the local
        cache when it is used (``adata.obs["cell_type"] == "B cell"`` loads its codes, 1-2 bytes per cell),
        and ``adata[mask].to_memory()`` gives a pandas obs with the stored names of those cells only. See the
        user guide on reading atlases.
    chunks
        As xarray's ``chunks=``: ``None`` (default) gives the lazy ``X``, a :class:`~deltacells.TiledCSRDataset`;
        otherwise ``X`` is a :class:`dask.array.Array` of CSR blocks of whole tiles (one column block):
        ``"auto"`` blocks of about dask's ``array.chunk-size`` of decoded CSR (128 MiB unless configured), as
        dask's own ``chunks="auto"`` sizes blocks, ``"tiles"`` one block per tile (rows as the manifest's
        ``tile_cells``), and an int blocks of about that many cells, rounded to whole tiles (never less than
        one). Blocks are CSR, as ``TiledCSRDataset.to_memory()`` gives them, and their tasks pickle to the
        dataset's URL and options, so dask.distributed workers read the tiles themselves. Needs
        ``dask[array]``. Same as ``X.to_dask(chunks)`` on the lazy ``X`` (whose default is ``"auto"``).
    extras
        Give back the rest of the AnnData the dataset was written from (``anndata.zarr``, docs/format.md, decision 15):
        obsm, varm, obsp, varp, uns, layers and raw, and the tiles' matrix where it was (X, a layer or raw.X).
        ``uns`` and elements of up to 64 MiB are read into memory, larger ones lazily as dask arrays (their
        rows are read when a subset is brought into memory). ``False``: X is the tiles' matrix, with obs and
        var only. A collection gives the tiles' matrices, obs and var only.
    join
        A collection's genes: ``"inner"`` (default, as :func:`anndata.concat`), those of every dataset, in
        the first dataset's order; ``"outer"``, those of any (sorted, as pandas' ``union`` sorts them), a
        gene a dataset lacks reading as zeros in its cells. obs columns are joined the same way.
    label
        A collection's obs column saying which dataset each cell came from: a categorical of ``keys``
        (``None``: no such column).
    keys
        A collection's dataset names, in order (default: each dataset's folder name, without
        ``.deltacells``).
    var_key
        Join a collection's genes on this var column (Ensembl ids, say) rather than on the var names; it
        becomes the var names of the result.
    index_unique
        As :func:`anndata.concat`'s: make a collection's obs names unique by appending ``index_unique`` and
        the dataset's key (default: keep them as stored, possibly repeated).
    merge
        As :func:`anndata.concat`'s: which var columns a collection keeps of its datasets' gene tables. ``None``
        (default, as concat): none; ``"same"``: those whose values are the same in every dataset; ``"unique"``:
        those with one value per gene among the datasets that have it; ``"first"``: the first value of each;
        ``"only"``: those of one dataset only. Merged by anndata itself, on the var names (or ``var_key``'s
        values, which become the var names).

    Returns
    -------
    anndata.AnnData
        The tiles' matrix is a :class:`~deltacells.TiledCSRDataset` (a :class:`dask.array.Array` with
        ``chunks=``), in ``X`` unless the AnnData written held its counts in a layer or raw. Nothing else is
        added: ``uns`` is the AnnData's as written (a round trip passes :func:`anndata.tests.helpers.assert_equal`
        against it). The dataset, its manifest (settings, metadata) and its gene order are on the matrix:
        ``adata.X.dataset`` (:class:`~deltacells.Dataset`: ``.manifest``, ``.gene_permutation()``, ``.url``).

    Examples
    --------
    >>> import deltacells
    >>> from deltacells.datasets import synthetic_counts
    >>> deltacells.write_deltacells(synthetic_counts(300, 100), "doc.deltacells", progress=False, overwrite=True)
    >>> adata = deltacells.read_deltacells("doc.deltacells", cache_dir="doc-cache")
    >>> adata[adata.obs["cell_type"] == "type_A"].to_memory().X.format
    'csr'
    """
    chunks = parse_chunks(chunks)
    prepare_kernels()  # numba's kernels load in the background while anndata is imported, the manifest read
    register_anndata_io()
    import anndata as ad

    if is_collection(path):
        if gene_order != "original":
            msg = "a collection's genes are in the order of their join (join=); gene_order='stored' is for one dataset"
            raise InvalidValueError(msg)
        collection, obs, var, entry = read_collection(
            path, join=join, label=label, keys=keys, var_key=var_key, index_unique=index_unique, merge=merge,
            storage_options=storage_options, obs_columns=obs_columns, obs_names=obs_names, cache_dir=cache_dir,
            verify_obs=verify_obs, tile_cache_bytes=tile_cache_bytes, threads=threads, io_concurrency=io_concurrency,
            lazy=lambda n_cells: _use_lazy_obs(lazy_obs, n_cells),
        )  # fmt: skip
        options = ReadOptions(_cache_dir_text(cache_dir), tuple(entry["keys"]), entry.get("label"))
        joined = with_read_options(TiledCSRDataset(collection, dtype), options)
        with ad.settings.override(check_uniqueness=isinstance(obs, pd.DataFrame)):  # a lazy obs: a RangeIndex
            return ad.AnnData(X=joined if chunks is None else joined.to_dask(chunks), obs=obs, var=var)
    attempt = 0
    while True:
        attempt += 1
        # cast: a list or tuple is a collection (above); no other sequence is a path
        stored = open_dataset(
            cast("str | os.PathLike[str]", path), storage_options=storage_options, tile_cache_bytes=tile_cache_bytes,
            threads=threads, io_concurrency=io_concurrency,
        )  # fmt: skip
        try:
            return _read_dataset(
                stored, dtype=dtype, chunks=chunks, gene_order=gene_order, extras=extras, lazy_obs=lazy_obs,
                obs_columns=obs_columns, obs_names=obs_names, cache_dir=cache_dir, verify_obs=verify_obs,
            )  # fmt: skip
        except STALE_ERRORS:
            # An append landed while obs, var or the extras were read (objects of the new version beside the
            # old manifest): open the new version. Any other error stands.
            if attempt == OPEN_ATTEMPTS or not manifest_changed(stored.store, stored.manifest):
                raise


def _read_dataset(
    stored: Dataset,
    *,
    dtype: DTypeLike | None,
    chunks: Any,
    gene_order: Literal["original", "stored"],
    extras: bool,
    lazy_obs: bool | None,
    obs_columns: Sequence[str] | None,
    obs_names: bool,
    cache_dir: str | os.PathLike[str] | None,
    verify_obs: bool,
) -> ad.AnnData:
    """:func:`read_deltacells` of one dataset, opened."""
    import anndata as ad

    dataset = stored.with_gene_order(gene_order)
    X = with_read_options(TiledCSRDataset(dataset, dtype), ReadOptions(_cache_dir_text(cache_dir)))
    if chunks is not None:
        X = X.to_dask(chunks)
    var = read_var(dataset, column_order(dataset))
    parts, raw = anndata_parts(dataset, X, var, extras=extras)
    if _use_lazy_obs(lazy_obs, dataset.n_cells):
        obs = _lazy_obs_frame(dataset, obs_columns, obs_names=obs_names, cache_dir=cache_dir, verify=verify_obs)
        # obsm's data frames as anndata's read_lazy gives them (lazy frames, which anndata does not check against
        # the cell numbers a lazy obs has for names), named as the cells are when brought into memory
        parts["obsm"] = obsm_frames_named(parts.get("obsm", {}), _lazy_obsm_names(obs), lazy=True)
        with ad.settings.override(check_uniqueness=False):  # the index is a RangeIndex: unique by construction
            adata = ad.AnnData(obs=obs, **parts)
    else:
        obs = read_obs_frame(dataset, obs_columns, obs_names=obs_names, cache_dir=cache_dir, verify=verify_obs)
        parts["obsm"] = obsm_frames_named(parts.get("obsm", {}), obs.index, lazy=False)
        known = names_known_unique(dataset, obs_names=obs_names, var=parts.get("var"))
        with ad.settings.override(check_uniqueness=not known):  # a million names hashed again for nothing
            adata = ad.AnnData(obs=obs, **parts)
    if raw is not None:
        adata.raw = raw
    return adata


def read_obs(
    adata_or_path: ad.AnnData | str | os.PathLike[str],
    columns: Sequence[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    verify: bool = True,
    storage_options: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Load obs columns of a dataset from the local Arrow cache (localizing them on first use).

    Parameters
    ----------
    adata_or_path
        An AnnData returned by :func:`read_deltacells` (the columns are also added to
        its ``obs``, in place, lazily to a lazy obs; for a view of one, only returned) or a dataset path.
        One read with ``chunks=`` (a dask ``X``) must still hold all the dataset's cells, in order.
    columns
        Columns to load; ``None`` for all.
    cache_dir, verify, storage_options
        As for :func:`read_deltacells` (for an AnnData, the values it was read with
        are used unless given here).

    Returns
    -------
    pandas.DataFrame
        The requested columns, indexed like the AnnData's obs.
    """
    import anndata as ad

    if isinstance(adata_or_path, ad.AnnData):
        adata = adata_or_path
        dataset = _dataset_of(adata)
        if cache_dir is None:
            cache_dir = read_options_of(counts_of(view_parts(adata)[0])).cache_dir
        if not isinstance(counts_of(view_parts(adata)[0]), TiledCSRDataset):
            _check_all_cells(view_parts(adata)[0], dataset, cache_dir=cache_dir, verify=verify)
        frame = read_obs_frame(dataset, columns, obs_names=False, cache_dir=cache_dir, verify=verify)
        if not isinstance(view_parts(adata)[0].obs, pd.DataFrame):  # a lazy obs: add the columns lazily
            frame = frame.iloc[view_parts(adata)[1]] if adata.is_view else frame
            frame.index = adata.obs_names
            if not adata.is_view:
                _, wanted = obs_store_and_columns(dataset, columns, cache_dir=cache_dir, verify=verify)
                lazy_obs = adata.obs
                assert isinstance(lazy_obs, LazyObs)  # not a pandas frame (above): read_deltacells' lazy obs
                add_lazy_columns(lazy_obs, wanted)
            return frame
        if adata.is_view:
            # A view's obs cannot grow in place: return its rows only.
            frame = frame.iloc[view_parts(adata)[1]]
            frame.index = adata.obs_names
            return frame
        frame.index = adata.obs_names
        for name in frame.columns:
            adata.obs[name] = frame[name]
        return frame
    dataset = open_dataset(adata_or_path, storage_options=storage_options)
    return read_obs_frame(dataset, columns, obs_names=True, cache_dir=cache_dir, verify=verify)


def restore_gene_order(adata: ad.AnnData, gene_order: np.ndarray | None = None) -> ad.AnnData:
    """The genes of an AnnData read with ``gene_order="stored"``, back in the order they were written.

    :func:`read_deltacells` gives genes in their original order by default, and then there is nothing to
    restore: the AnnData is returned as it is. So it is for a dataset written without reordering, and for an
    AnnData whose counts are no dataset's (in memory) unless ``gene_order`` is given. Otherwise the result is
    a new lazy AnnData (sharing the dataset and its cache) whose X maps the columns back while it reads, with
    var reordered and obs as it was (categories, their order and ``ordered`` untouched); a view, or an
    AnnData whose counts are a dask array, is reordered in memory.

    Parameters
    ----------
    adata
        An AnnData from :func:`read_deltacells` (or a view of one).
    gene_order
        For an AnnData in memory (``adata.to_memory()`` of one read with ``gene_order="stored"``): the order it
        was read in, ``adata.X.dataset.gene_permutation()`` of the lazy one (column ``j`` was column
        ``gene_order[j]`` of the AnnData written); its genes (X, var, layers, varm, varp) are put back.
        Ignored for an AnnData whose counts are still a dataset's: the dataset knows its order.

    Raises
    ------
    InvalidValueError
        If the gene order does not match the AnnData's genes (it was subset by genes).
    """
    import anndata as ad

    ref = view_parts(adata)[0]
    counts = _dataset_counts(ref)
    if counts is None:
        if gene_order is None:
            return adata  # no dataset's matrix, no order given: nothing known to restore
        order, location = np.asarray(gene_order), "X"
    else:
        source = None if isinstance(counts, TiledCSRDataset) else source_of(counts)
        dataset = counts.dataset if source is None else dataset_for(source)  # counts_of found a source for dask
        if isinstance(dataset, Collection) or dataset.gene_order != "stored" or dataset.gene_permutation() is None:
            return adata  # in the original order already (or a collection's join): nothing to restore
        order, location = np.asarray(dataset.gene_permutation()), counts_location_in(ref, counts)
    in_raw = location == "raw" and adata.raw is not None  # the tiles hold raw's genes
    if order.shape != ((adata.raw.n_vars if in_raw else adata.n_vars),):
        msg = "the gene order does not match the genes of this AnnData (was it subset by genes?)"
        raise InvalidValueError(msg)
    columns = np.argsort(order)
    if isinstance(counts, TiledCSRDataset) and not adata.is_view:
        return _restored_lazily(adata, counts, columns, dict(adata.uns), in_raw=in_raw)
    if in_raw:  # in memory: only raw follows the tiles' genes
        restored = adata.copy()
        restored.raw = ad.AnnData(X=adata.raw.X[:, columns], var=adata.raw.var.iloc[columns])
    else:  # in memory (or a view): reorder what is there
        restored = adata[:, columns].copy()
    # A view drops unused categories; keep them as written. (anndata's obs setter is annotated narrower than what
    # its getter gives: a lazy obs is set back as it is.)
    restored.obs = adata.obs.copy()  # type: ignore[assignment, unused-ignore]
    return restored


def _dataset_counts(adata: ad.AnnData) -> Any:
    """The tiles' matrix of one dataset in ``adata`` (the lazy X or a dask array of its blocks), or ``None``."""
    try:
        counts = counts_of(adata)
    except InvalidTypeError:
        return None
    return counts


def _restored_lazily(
    adata: ad.AnnData, counts: TiledCSRDataset, columns: np.ndarray, uns: dict[str, Any], *, in_raw: bool
) -> ad.AnnData:
    """A new lazy AnnData: the tiles' matrix mapping its columns back, the genes' elements reordered to match."""
    import anndata as ad

    dataset = counts.dataset
    assert isinstance(dataset, Dataset)  # a collection's genes are joined, not in a stored order
    restored = with_read_options(
        TiledCSRDataset(dataset.with_gene_order("original"), counts.dtype), read_options_of(counts)
    )

    def genes(value: Any) -> Any:  # an element whose columns are the tiles' genes
        return restored if value is counts else value[:, columns]

    # The elements as AnnData() takes them: anndata annotates its arguments narrower than what it accepts (a lazy
    # obs, its own aligned mappings), hence a dict of Any.
    elements: dict[str, Any]
    if in_raw:  # only raw follows the tiles' genes; X, var and the rest keep the AnnData's own
        elements = {
            "X": adata.X,
            "obs": adata.obs.copy(),
            "var": adata.var,
            "uns": uns,
            "obsm": dict(adata.obsm),
            "obsp": dict(adata.obsp),
            "varm": dict(adata.varm),
            "varp": dict(adata.varp),
            "layers": {key: value for key, value in adata.layers.items() if key is not None},
        }
        reordered = ad.AnnData(**elements)
        reordered.raw = ad.AnnData(X=restored, var=adata.raw.var.iloc[columns])
        return reordered
    elements = {
        "X": None if adata.X is None else genes(adata.X),
        "obs": adata.obs.copy(),
        "var": adata.var.iloc[columns].copy(),
        "uns": uns,
        "obsm": dict(adata.obsm),
        "obsp": dict(adata.obsp),
        "varm": {key: value[columns] for key, value in adata.varm.items()},
        "varp": {key: value[columns][:, columns] for key, value in adata.varp.items()},
        "layers": {key: genes(value) for key, value in adata.layers.items() if key is not None},
    }
    restored_adata = ad.AnnData(**elements)
    if adata.raw is not None:  # its own genes: unchanged
        restored_adata.raw = adata.raw.to_adata()
    return restored_adata


# ---------------------------------------------------------------------- internals


def _dataset_of(adata: ad.AnnData) -> Dataset:
    counts = counts_of(view_parts(adata)[0])  # in X, or in a layer or raw when the AnnData written had them there
    if isinstance(counts, TiledCSRDataset):
        dataset = counts.dataset
        if isinstance(dataset, Collection):
            msg = (
                "read_obs reads one dataset's obs; this AnnData is a collection of datasets: read it again with "
                "read_deltacells([...], obs_columns=[...]) for more columns"
            )
            raise InvalidTypeError(msg)
        assert isinstance(dataset, Dataset)  # the two kinds of row source
        return dataset
    source = source_of(counts)  # read with chunks=: a dask array of the dataset's blocks
    assert source is not None  # counts_of found one
    return dataset_for(source)


def _check_all_cells(adata: ad.AnnData, dataset: Dataset, *, cache_dir: Any, verify: bool) -> None:
    """An AnnData with a dask X (``chunks=``) must still hold the dataset's cells, in order, to get its obs rows.

    Its X may have been computed from a subset of the cells (``adata[cells].copy()``, ``sc.pp.filter_cells``),
    which the dask graph does not tell: its ``obs_names`` do (cell numbers for a lazy obs, else the stored names
    or ``"0" .. "n-1"``).
    """
    names, n_cells = adata.obs_names, dataset.n_cells
    if len(names) == n_cells:
        if not isinstance(adata.obs, pd.DataFrame):  # a lazy obs is indexed by cell numbers
            if names.equals(pd.RangeIndex(n_cells)):
                return
        elif names.equals(default_names_of(n_cells)) or names.equals(
            read_obs_frame(dataset, [], obs_names=True, cache_dir=cache_dir, verify=verify).index
        ):
            return
    msg = (
        f"this AnnData's cells are not the {n_cells:,} cells of {dataset.store.url} in order (its dask X was "
        "computed from a subset of them?): read_obs(path) gives the dataset's obs, to select the same cells from"
    )
    raise InvalidValueError(msg)


def _use_lazy_obs(lazy_obs: bool | None, n_cells: int) -> bool:
    """Whether obs is read lazily: as asked, or (``None``) when there are more than :data:`LAZY_OBS_MIN_CELLS` cells."""
    if lazy_obs is None:
        return n_cells > LAZY_OBS_MIN_CELLS
    if not is_bool(lazy_obs):
        msg = f"lazy_obs must be True, False or None (lazy above {LAZY_OBS_MIN_CELLS:,} cells), got {lazy_obs!r}"
        raise InvalidTypeError(msg)
    return bool(lazy_obs)


def _lazy_obs_frame(
    dataset: Dataset, columns: Sequence[str] | None, *, obs_names: bool, cache_dir: Any, verify: bool
) -> Any:
    obs_store, wanted = obs_store_and_columns(dataset, columns, cache_dir=cache_dir, verify=verify)
    return lazy_obs_frame(obs_store, dataset.n_cells, wanted, names=obs_names)


def _lazy_obsm_names(obs: LazyObs) -> pd.Index | None:
    """The names obsm's frames take with a lazy obs: their own (stored), or ``"0" .. "n-1"`` without stored names."""
    source = obs.source
    if source is None or source.stored_names:
        return None
    return default_names_of(source.n_cells)


def _cache_dir_text(cache_dir: str | os.PathLike[str] | None) -> str | None:
    return None if cache_dir is None else os.fspath(cache_dir)
