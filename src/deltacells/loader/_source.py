"""What a loader reads: the dataset, its gene order, the cells selected, and where obs comes from."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells.dataset import Dataset, open_dataset
from deltacells.dataset._indexing import normalize_rows
from deltacells.errors import InvalidTypeError

if TYPE_CHECKING:
    import anndata as ad

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
    """

    dataset: Dataset
    cells: np.ndarray | None
    genes: np.ndarray | None
    cache_dir: Any
    verify: bool

    @property
    def n_cells(self) -> int:
        """Cells selected."""
        return self.dataset.n_cells if self.cells is None else int(self.cells.shape[0])

    def tile_bounds(self) -> np.ndarray:
        """``int64[n_tiles + 1]``: where each tile's selected cells start among the selected cells."""
        manifest = self.dataset.manifest
        edges = np.append(manifest.starts, manifest.n_cells).astype(np.int64)
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
        if self.dataset.store.is_local:
            return None
        from deltacells.obs import resolve_cache_dir

        return resolve_cache_dir(self.cache_dir)

    def cell_numbers(self, positions: np.ndarray) -> np.ndarray:
        """The cell numbers of selection ``positions``."""
        return positions if self.cells is None else self.cells[positions]


def resolve_source(
    source: Any,
    *,
    cells: Any,
    gene_order: str | None,
    storage_options: dict[str, Any] | None,
    cache_dir: Any,
    verify: bool,
    threads: int | None,
) -> LoaderSource:
    """The dataset and cells a loader reads from ``source`` (a path or URL, a :class:`Dataset`, or an AnnData).

    Raises
    ------
    TypeError
        For another kind of source, or an AnnData that :func:`deltacells.read_deltacells` did not give.
    """
    import anndata as ad

    genes = None
    rows: Any = slice(None)
    if isinstance(source, ad.AnnData):
        dataset, rows, genes, settings = _from_anndata(source)
        cache_dir = cache_dir if cache_dir is not None else settings.get("cache_dir")
        gene_order = gene_order or settings.get("columns")
    elif isinstance(source, Dataset):
        dataset = source
    elif isinstance(source, (str, os.PathLike)):
        dataset = open_dataset(source, storage_options=storage_options, threads=threads)
    else:
        msg = (
            "source must be a dataset path or URL, a deltacells Dataset, or an AnnData from read_deltacells; "
            f"got {type(source).__name__}"
        )
        raise InvalidTypeError(msg)
    dataset = dataset.with_gene_order(gene_order or "original")
    selected = _select(dataset.n_cells, rows, cells)
    return LoaderSource(dataset, selected, genes, cache_dir, verify)


def _from_anndata(adata: ad.AnnData) -> tuple[Dataset, Any, np.ndarray | None, dict[str, Any]]:
    """The dataset under an AnnData from ``read_deltacells`` (or a view of one), its rows and genes."""
    from deltacells.io import TiledCSRDataset
    from deltacells.io._assemble import counts_of
    from deltacells.io._read import UNS_KEY
    from deltacells.io._sources import view_parts

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
    if ref.raw is not None and counts is ref.raw.X:
        cols = slice(None)  # a view selects genes of X, not of raw
    if not (isinstance(cols, slice) and cols == slice(None)):
        genes = np.arange(ref.n_vars)[cols]
        if np.array_equal(genes, np.arange(ref.n_vars)):
            genes = None
    return dataset, rows, genes, dict(ref.uns.get(UNS_KEY, {}))


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
