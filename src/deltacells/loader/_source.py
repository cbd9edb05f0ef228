"""What a loader reads: the dataset, its gene order, the cells selected, and where obs comes from."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from deltacells.core import Collection, Dataset, RowSource, normalize_rows, open_dataset
from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.io import TiledCSRDataset, counts_of, open_collection, read_options_of, view_parts
from deltacells.loader._plan import Blocks, BlockWeights
from deltacells.obs import resolve_cache_dir

if TYPE_CHECKING:
    import anndata as ad

    from deltacells.io import ReadOptions

__all__ = ["LoaderSource", "resolve_source"]


@dataclass
class LoaderSource:
    """A dataset in the gene order asked for, the cells selected (sorted, or ``None``: all) and obs settings.

    Attributes
    ----------
    dataset
        The dataset, its columns in the order the batches give.
    cells
        Selected cell numbers, sorted and unique; ``None`` for every cell.
    genes
        Columns to keep, in order (a view's genes); ``None`` for all.
    cache_dir, verify
        Where obs is cached, and whether its shards are checked.
    keys, label
        A collection's dataset names, and the obs column giving them (None for one dataset).
    """

    dataset: RowSource
    cells: np.ndarray | None
    genes: np.ndarray | None
    cache_dir: Any
    verify: bool
    keys: list[str] | None = None
    label: str | None = None

    @property
    def n_cells(self) -> int:
        """Cells selected."""
        return self.dataset.n_cells if self.cells is None else int(self.cells.shape[0])

    def tile_bounds(self) -> np.ndarray:
        """``int64[n_tiles + 1]``: where each tile's selected cells start among the selected cells."""
        edges = np.append(self.dataset.tile_starts, self.dataset.n_cells).astype(np.int64)
        return edges if self.cells is None else np.searchsorted(self.cells, edges).astype(np.int64)

    def chunk_bounds(self) -> np.ndarray:
        """``int64``: where each chunk's selected cells start among the selected cells, then their number.

        Increasing, with repeats for chunks holding no selected cell; every tile's bound is among them.
        """
        edges = self.dataset.chunk_starts(cache_dir=self.chunk_cache_dir())
        return edges.copy() if self.cells is None else np.searchsorted(self.cells, edges).astype(np.int64)

    def chunk_cache_dir(self) -> Any:
        """Where the chunk starts of a dataset on object storage are kept: the local cache (as obs's); None on disk.

        On a local disk, reading every tile's chunk table costs about as much as reading the kept copy.
        """
        if self.dataset.is_local:
            return None

        return resolve_cache_dir(self.cache_dir)

    def cell_numbers(self, positions: np.ndarray) -> np.ndarray:
        """The cell numbers of selection ``positions``."""
        return positions if self.cells is None else self.cells[positions]

    def block_weights(self, weights: Sequence[float] | None, blocks: Blocks) -> BlockWeights | None:
        """A collection's ``weights``, checked, with the dataset of each block; None without weights.

        Raises
        ------
        InvalidValueError
            For weights of one dataset, of another number than the datasets, negative, all zero, or
            positive for a dataset none of whose cells is selected.
        """
        if weights is None:
            return None
        if not isinstance(self.dataset, Collection):
            msg = "weights= are for a collection (a list of datasets): each dataset's share of an epoch"
            raise InvalidValueError(msg)
        shares = np.asarray(weights, dtype=np.float64)
        n = len(self.dataset.members)
        if shares.shape != (n,) or not np.all(np.isfinite(shares)) or (shares < 0).any() or shares.sum() <= 0:
            msg = f"weights must be {n} non-negative numbers (one per dataset), not all zero; got {weights!r}"
            raise InvalidValueError(msg)
        tile_offsets = self.dataset.tile_offsets
        group_of_block = (np.searchsorted(tile_offsets, blocks.tiles, side="right") - 1).astype(np.int64)
        present = np.bincount(group_of_block, weights=blocks.lengths, minlength=n) > 0
        empty = np.flatnonzero((shares > 0) & ~present)
        if empty.shape[0]:
            msg = f"weights: dataset(s) {empty.tolist()} have a weight but none of their cells is selected"
            raise InvalidValueError(msg)
        return BlockWeights(group_of_block, shares / shares.sum())


def resolve_source(
    source: Any,
    *,
    cells: Any,
    gene_order: Literal["original", "stored"] | None,
    storage_options: dict[str, Any] | None,
    cache_dir: Any,
    verify: bool,
    threads: int | None,
    join: str = "inner",
    var_key: str | None = None,
    keys: Sequence[str] | None = None,
    label: str | None = "dataset",
) -> LoaderSource:
    """The dataset and cells a loader reads from ``source``: a path or URL, a :class:`Dataset`, an AnnData or a list.

    A list of datasets is a collection, read as one.

    Raises
    ------
    TypeError
        For another kind of source, or an AnnData that :func:`deltacells.read_deltacells` did not give.
    """
    import anndata as ad

    genes = None
    rows: Any = slice(None)
    if isinstance(source, (list, tuple)):
        if gene_order not in (None, "original"):
            msg = "a collection's genes are in the order of their join; gene_order='stored' is for one dataset"
            raise InvalidValueError(msg)
        opened = open_collection(
            source, join=join, keys=keys, var_key=var_key, storage_options=storage_options, threads=threads
        )
        selected = _select(opened.collection.n_cells, rows, cells)
        return LoaderSource(opened.collection, selected, None, cache_dir, verify, opened.keys, label)
    if isinstance(source, ad.AnnData):
        dataset, rows, genes, options = _from_anndata(source)
        cache_dir = cache_dir if cache_dir is not None else options.cache_dir
        if isinstance(dataset, Collection):
            selected = _select(dataset.n_cells, rows, cells)
            return LoaderSource(dataset, selected, genes, cache_dir, verify, list(options.keys), options.label)
        assert isinstance(dataset, Dataset)  # the two kinds of row source
        order = gene_order or dataset.gene_order  # the AnnData's, unless asked otherwise
    elif isinstance(source, Dataset):
        dataset, order = source, gene_order or "original"
    elif isinstance(source, (str, os.PathLike)):
        dataset = open_dataset(source, storage_options=storage_options, threads=threads)
        order = gene_order or "original"
    else:
        msg = (
            "source must be a dataset path or URL, a deltacells Dataset, or an AnnData from read_deltacells; "
            f"got {type(source).__name__}"
        )
        raise InvalidTypeError(msg)
    dataset = dataset.with_gene_order(order)
    selected = _select(dataset.n_cells, rows, cells)
    return LoaderSource(dataset, selected, genes, cache_dir, verify)


def _from_anndata(adata: ad.AnnData) -> tuple[RowSource, Any, np.ndarray | None, ReadOptions]:
    """The dataset under an AnnData from ``read_deltacells`` (or a view of one), its rows, genes and read options."""
    ref, rows, cols = view_parts(adata)
    counts = counts_of(ref)  # X, or the layer or raw.X the counts were written from
    if not isinstance(counts, TiledCSRDataset):
        msg = (
            "a CellLoader reads an AnnData from read_deltacells with its lazy X (chunks=None); this one's counts are "
            f"a {type(counts).__name__}: pass the dataset's path instead"
        )
        raise InvalidTypeError(msg)
    dataset = counts.dataset
    genes = None
    raw_x: object = None if ref.raw is None else ref.raw.X  # anndata types raw.X narrower than what it may hold
    if raw_x is not None and counts is raw_x:
        cols = slice(None)  # a view selects genes of X, not of raw
    if not (isinstance(cols, slice) and cols == slice(None)):
        genes = np.arange(ref.n_vars)[cols]
        if np.array_equal(genes, np.arange(ref.n_vars)):
            genes = None
    return dataset, rows, genes, read_options_of(counts)


def _select(n_cells: int, rows: Any, cells: Any) -> np.ndarray | None:
    """The sorted, unique cell numbers of ``rows`` (a view's) then ``cells`` (among them); ``None`` for all."""
    picked = normalize_rows(rows, n_cells, what="cell")
    if cells is not None:
        base = np.arange(picked.start, picked.stop) if isinstance(picked, slice) else picked
        chosen = normalize_rows(cells, base.shape[0], what="cell")
        picked = base[chosen]
    if isinstance(picked, slice):
        if picked == slice(0, n_cells, 1):
            return None
        return np.arange(picked.start, picked.stop, dtype=np.int64)
    return np.unique(np.asarray(picked, dtype=np.int64))
