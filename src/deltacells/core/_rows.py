""":class:`RowSource`: what the AnnData layer, dask and the loader read from: one dataset or a collection.

:class:`~deltacells.Dataset` and :class:`~deltacells.core.Collection` both implement it (``mypy --strict``
checks it at the end of this module, a test at run time), so that the readers above them depend on the
protocol, not on either class, and the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import DTypeLike
    from scipy import sparse

    from deltacells.storage import ReadBuffer

__all__ = ["RowSource"]


@runtime_checkable
class RowSource(Protocol):
    """Cells as rows of a sparse count matrix, stored in tiles of consecutive cells.

    Like :mod:`anndata.abc`'s protocols, a structural type: anything with these members is one.
    """

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_cells, n_genes)``."""
        ...

    @property
    def n_cells(self) -> int:
        """Cells (rows)."""
        ...

    @property
    def n_genes(self) -> int:
        """Genes (columns)."""
        ...

    @property
    def dtype(self) -> np.dtype:
        """The dtype reads give by default."""
        ...

    @property
    def n_tiles(self) -> int:
        """Tiles, in cell order."""
        ...

    @property
    def nnz(self) -> int:
        """Stored nonzeros."""
        ...

    @property
    def url(self) -> str:
        """Where the cells are stored, for a collection its first dataset's location."""
        ...

    @property
    def tile_size(self) -> int:
        """Cells of a full tile."""
        ...

    @property
    def threads(self) -> int | None:
        """Threads its reads use, or None for the usable CPUs."""
        ...

    @property
    def is_local(self) -> bool:
        """Whether every tile is on a local disk."""
        ...

    @property
    def tile_starts(self) -> np.ndarray:
        """``int64[n_tiles + 1]``: the first cell of each tile, then ``n_cells``."""
        ...

    @property
    def tile_cells(self) -> np.ndarray:
        """``int64[n_tiles]``: the cells of each tile."""
        ...

    @property
    def tile_bytes(self) -> np.ndarray:
        """``int64[n_tiles]``: the stored bytes of each tile."""
        ...

    def chunk_starts(self, cache_dir: str | os.PathLike[str] | None = None) -> np.ndarray:
        """The first cell of every chunk of every tile, then ``n_cells``."""
        ...

    def submit_tile_fetch(self, tile: int) -> Future[ReadBuffer]:
        """Start fetching tile ``tile`` whole."""
        ...

    def read_rows(self, index: Any = ..., *, dtype: DTypeLike | None = None) -> sparse.csr_matrix:
        """The rows ``index`` selects, in its order, through the tile cache."""
        ...

    def read_rows_uncached(
        self, index: Any = ..., *, dtype: DTypeLike | None = None, sort_columns: bool = True
    ) -> sparse.csr_matrix:
        """The rows ``index`` selects, bypassing the tile cache."""
        ...

    def read_row_batches(
        self,
        index: Any,
        cuts: Any,
        *,
        dtype: DTypeLike | None = None,
        sort_columns: bool = True,
        threads: int | None = None,
        fetched: Callable[[int], Future[ReadBuffer] | None] | None = None,
    ) -> list[sparse.csr_matrix]:
        """The rows ``index`` selects, cut at ``cuts`` into matrices of their own."""
        ...


if TYPE_CHECKING:  # mypy --strict checks that both classes are row sources

    def _both_are_row_sources(dataset: Dataset, collection: Collection) -> tuple[RowSource, RowSource]:
        return dataset, collection

    from deltacells.core._collection import Collection
    from deltacells.core._dataset import Dataset
