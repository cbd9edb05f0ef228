"""Several datasets read as one: their cells one after another, their genes joined (docs/format.md, decision 16).

Each member is a :class:`Dataset` whose columns are already those of the join (:meth:`~deltacells.Dataset.with_columns`:
its stored genes mapped while they decode, an inner join's extra genes left out, an outer join's missing
ones empty), so a member's rows come out in the collection's columns. A read splits the cells by member,
reads each member's share (only the tiles holding them), and stacks the parts in the order asked.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from deltacells._kernel_loading import prepare_kernels
from deltacells._memory import empty
from deltacells._threads import map_members
from deltacells.core._dtypes import promoted_dtype
from deltacells.core._indexing import expected_nnz, normalize_rows
from deltacells.errors import InvalidValueError
from deltacells.tiles import DIRECT_DTYPES, SplitOutputs, gather_rows_split

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from deltacells.core._dataset import Dataset
    from deltacells.storage import ReadBuffer

__all__ = ["Collection"]


class Collection:
    """Datasets read as one matrix: the cells of the first, then of the second..., in the same columns.

    Cheap to pickle (to its members' stores and manifests). :func:`~deltacells.read_deltacells` of a list of
    datasets makes one; its lazy X reads through :meth:`read_rows` as it would through a :class:`Dataset`'s.

    Parameters
    ----------
    members
        The datasets, each read into the collection's columns (:meth:`~deltacells.Dataset.with_columns`, or
        as stored when its genes are the collection's): all of the same :attr:`~deltacells.Dataset.n_genes`.

    Raises
    ------
    InvalidValueError
        If there is no member, or their columns differ in number.
    """

    def __init__(self, members: Sequence[Dataset]) -> None:
        members = list(members)
        if not members:
            msg = "a collection needs at least one dataset"
            raise InvalidValueError(msg)
        widths = {member.n_genes for member in members}
        if len(widths) != 1:
            msg = f"a collection's datasets must be read into the same columns, got {sorted(widths)} columns"
            raise InvalidValueError(msg)
        self.members = members
        self.offsets = np.zeros(len(members) + 1, dtype=np.int64)
        np.cumsum([member.n_cells for member in members], out=self.offsets[1:])

    def __repr__(self) -> str:
        return f"Collection({len(self.members)} datasets, n_cells={self.n_cells}, n_genes={self.n_genes})"

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_cells, n_genes)``."""
        return (self.n_cells, self.n_genes)

    @property
    def n_cells(self) -> int:
        """Cells of all the datasets."""
        return int(self.offsets[-1])

    @property
    def n_genes(self) -> int:
        """Columns of the join."""
        return self.members[0].n_genes

    @property
    def dtype(self) -> np.dtype:
        """The dtype reads give by default, the members' dtypes promoted as :func:`anndata.concat` would."""
        return promoted_dtype(member.dtype for member in self.members)

    @property
    def n_tiles(self) -> int:
        """Tiles of all the datasets."""
        return sum(member.n_tiles for member in self.members)

    @property
    def nnz(self) -> int:
        """Nonzeros stored in the datasets' tiles (an inner join reads fewer, without the genes it leaves out)."""
        return sum(member.nnz for member in self.members)

    @property
    def url(self) -> str:
        """Where the datasets are (the first one's URL, and how many more)."""
        more = len(self.members) - 1
        return self.members[0].url + (f" and {more} more" if more else "")

    @property
    def tile_size(self) -> int:
        """The largest tile size of the datasets (a reader's natural block of cells)."""
        return max(member.tile_size for member in self.members)

    def member_of(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The member holding each cell of the collection, and the cell's number in it."""
        cells = np.asarray(cells, dtype=np.int64)
        members = np.searchsorted(self.offsets, cells, side="right") - 1
        return members, cells - self.offsets[members]

    def read_rows(self, index: Any = slice(None), *, dtype: DTypeLike | None = None) -> sparse.csr_matrix:
        """Read the cells selected by ``index`` as a CSR matrix, in the requested order (default dtype: ``dtype``).

        As :meth:`~deltacells.Dataset.read_rows`, in each member holding some of the cells. A range of cells (a slice of
        step 1) reads each member's range by its fast path of whole tiles.
        """
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        rows = normalize_rows(index, self.n_cells)
        prepare_kernels(expected_nnz(rows, self.nnz, self.n_cells))
        if isinstance(rows, slice) and rows.step == 1 and rows.stop > rows.start and np.dtype(dtype) in DIRECT_DTYPES:
            matrix = self._read_range(rows.start, rows.stop, np.dtype(dtype))
            if matrix is not None:
                return matrix
        return self._read(rows, lambda member, part: member.read_rows(part, dtype=dtype), dtype)

    def _read_range(self, start: int, stop: int, dtype: np.dtype) -> sparse.csr_matrix | None:
        """Cells ``start`` to ``stop`` (excluded) of every dataset they span decoded into one output, one after another.

        The output is allocated once, for the nonzeros of the tiles holding the cells (the manifests'; an inner
        join's reads hold fewer), and each dataset writes its rows right after the previous one's
        (:meth:`~deltacells.Dataset.read_range_into`): no array per dataset, no stacking copy. None when the
        output would need 64-bit indices (the general path then reads it).
        """
        spans = self._spans(start, stop)
        capacity = sum(self.members[m].range_capacity(a, b) for m, a, b in spans)
        if capacity >= 2**31:
            return None
        indptr = np.empty(stop - start + 1, dtype=np.int64)
        indices, data = empty(capacity, np.int32), empty(capacity, dtype)
        row = nnz = 0
        for m, a, b in spans:
            view = indptr[row : row + b - a + 1]
            written = self.members[m].read_range_into(a, b, dtype, view, indices[nnz:], data[nnz:])
            view += nnz  # its row pointers, counted from its first nonzero: from the output's
            row, nnz = row + b - a, nnz + written
        matrix = sparse.csr_matrix((stop - start, self.n_genes), dtype=dtype)
        # The arrays set as they are: scipy's constructor would copy views of a larger allocation.
        matrix.indptr, matrix.indices, matrix.data = indptr.astype(np.int32), indices[:nnz], data[:nnz]
        matrix.has_sorted_indices = True
        matrix.has_canonical_format = True
        return matrix

    def _spans(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """The members holding cells ``start`` to ``stop`` (excluded), with their ranges: ``(member, a, b)``."""
        first, last = np.searchsorted(self.offsets, [start, stop - 1], side="right") - 1
        spans = []
        for m in range(int(first), int(last) + 1):
            lo, hi = int(self.offsets[m]), int(self.offsets[m + 1])
            if min(stop, hi) > max(start, lo):
                spans.append((m, max(start, lo) - lo, min(stop, hi) - lo))
        return spans

    def read_rows_uncached(
        self, index: Any = slice(None), *, dtype: DTypeLike | None = None, sort_columns: bool = True
    ) -> sparse.csr_matrix:
        """As :meth:`~deltacells.Dataset.read_rows_uncached`, in each member holding some of the cells."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)

        def read(member: Dataset, rows: Any) -> sparse.csr_matrix:
            return member.read_rows_uncached(rows, dtype=dtype, sort_columns=sort_columns)

        return self._read(index, read, dtype)

    def _read(self, index: Any, read: Any, dtype: DTypeLike) -> sparse.csr_matrix:
        rows = normalize_rows(index, self.n_cells)
        if (rows.stop - rows.start if isinstance(rows, slice) else rows.shape[0]) == 0:  # no cell: no member read
            return self._stacked([], dtype)
        prepare_kernels(expected_nnz(rows, self.nnz, self.n_cells))
        if isinstance(rows, slice) and rows.step == 1:
            parts = [read(self.members[m], slice(a, b)) for m, a, b in self._spans(rows.start, rows.stop)]
            return self._stacked(parts, dtype)
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, rows.step, dtype=np.int64)
        members, local = self.member_of(rows)
        changes = np.flatnonzero(members[1:] != members[:-1]) + 1
        starts = np.concatenate(([0], changes))
        if np.unique(members[starts]).shape[0] == starts.shape[0]:  # each member's cells asked in one run
            ends = np.append(starts[1:], rows.shape[0])
            parts = [read(self.members[int(members[a])], local[a:b]) for a, b in zip(starts, ends, strict=True)]
            return self._stacked(parts, dtype)
        # Members interleaved: each member's cells read at once (in the order asked), the rows put back in order.
        order = np.argsort(members, kind="stable")
        grouped = members[order]
        bounds = np.flatnonzero(np.diff(grouped)) + 1
        pieces = np.split(order, bounds)
        parts = [read(self.members[int(members[piece[0]])], local[piece]) for piece in pieces]
        back = np.empty_like(order)
        back[order] = np.arange(order.shape[0])
        matrix = self._stacked(parts, dtype)[back]
        matrix.has_sorted_indices = True
        matrix.has_canonical_format = True
        return matrix

    def _stacked(
        self, parts: list[sparse.csr_matrix], dtype: DTypeLike, *, canonical: bool = True
    ) -> sparse.csr_matrix:
        if not parts:
            return sparse.csr_matrix((0, self.n_genes), dtype=np.dtype(dtype))
        if len(parts) == 1:
            return parts[0]
        matrix: sparse.csr_matrix = sparse.vstack(parts, format="csr")
        if canonical:  # each part's rows are canonical, and so are they together
            matrix.has_sorted_indices = True
            matrix.has_canonical_format = True
        return matrix

    # ------------------------------------------------------------------ what a training loader reads

    @property
    def threads(self) -> int | None:
        """Threads decoding tiles (the first dataset's setting)."""
        return self.members[0].threads

    @property
    def is_local(self) -> bool:
        """Whether every dataset is on a local disk."""
        return all(member.store.is_local for member in self.members)

    @property
    def tile_offsets(self) -> np.ndarray:
        """``int64[n_members + 1]``: the collection's number of each dataset's first tile, then :attr:`n_tiles`."""
        offsets = np.zeros(len(self.members) + 1, dtype=np.int64)
        np.cumsum([member.n_tiles for member in self.members], out=offsets[1:])
        return offsets

    @property
    def tile_starts(self) -> np.ndarray:
        """``int64[n_tiles]``: the first cell of each tile of each dataset, in the collection's cell numbers."""
        return np.concatenate(
            [
                np.asarray(m.manifest.starts, dtype=np.int64) + o
                for m, o in zip(self.members, self.offsets, strict=False)
            ]
        )

    @property
    def tile_cells(self) -> np.ndarray:
        """``int64[n_tiles]``: the cells of each tile of each dataset."""
        return np.concatenate([np.asarray(m.manifest.tile_cells, dtype=np.int64) for m in self.members])

    @property
    def tile_bytes(self) -> np.ndarray:
        """``int64[n_tiles]``: the bytes of each tile of each dataset."""
        return np.concatenate([np.asarray(m.manifest.tile_bytes, dtype=np.int64) for m in self.members])

    def chunk_starts(self, cache_dir: str | os.PathLike[str] | None = None) -> np.ndarray:
        """The first cell of each chunk of each dataset's tiles (in the collection's numbers), then the cells.

        See :meth:`~deltacells.Dataset.chunk_starts`.
        """
        starts = map_members(lambda member: member.chunk_starts(cache_dir)[:-1], self.members)  # fetched at once
        parts = [own + offset for own, offset in zip(starts, self.offsets, strict=False)]
        return np.concatenate([*parts, [self.n_cells]]).astype(np.int64)

    def submit_tile_fetch(self, tile: int) -> Future[ReadBuffer]:
        """Start fetching the collection's tile ``tile`` whole (:meth:`~deltacells.Dataset.submit_tile_fetch`)."""
        offsets = self.tile_offsets
        member = int(np.searchsorted(offsets, tile, side="right")) - 1
        return self.members[member].submit_tile_fetch(int(tile - offsets[member]))

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
        """As :meth:`~deltacells.Dataset.read_row_batches`: each dataset's cells read at once, then cut.

        ``fetched`` takes the collection's tile numbers (:meth:`submit_tile_fetch`).
        """
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        rows = normalize_rows(index, self.n_cells)
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, rows.step, dtype=np.int64)
        n = rows.shape[0]
        cuts = np.array([0, n], dtype=np.int64) if cuts is None else np.asarray(cuts, dtype=np.int64)
        members, local = self.member_of(rows)
        order = np.argsort(members, kind="stable")
        pieces = np.split(order, np.flatnonzero(np.diff(members[order])) + 1) if n else []
        tile_offsets = self.tile_offsets
        parts = []
        for piece in pieces:
            m = int(members[piece[0]])

            def in_member(tile: int, offset: int = int(tile_offsets[m])) -> Future[ReadBuffer] | None:
                assert fetched is not None  # passed on only then
                return fetched(tile + offset)

            (part,) = self.members[m].read_row_batches(
                local[piece], None, dtype=dtype, sort_columns=sort_columns, threads=threads,
                fetched=None if fetched is None else in_member,
            )  # fmt: skip
            parts.append(part)
        if len(parts) == 1 and pieces[0].shape[0] == n and bool(np.all(pieces[0] == np.arange(n))):
            matrices = [parts[0][a:b] for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True)]
        else:
            matrices = _scattered(parts, pieces, cuts, np.dtype(dtype), self.n_genes)
        for matrix in matrices:
            if sort_columns:
                matrix.has_sorted_indices = True
                matrix.has_canonical_format = True
        return matrices


def _scattered(
    parts: list[sparse.csr_matrix], pieces: list[np.ndarray], cuts: np.ndarray, dtype: np.dtype, n_genes: int
) -> list[sparse.csr_matrix]:
    """Each dataset's rows copied once into the matrices ``cuts`` delimits (``parts[k]`` holds rows ``pieces[k]``).

    Each matrix is made of arrays of its own (a training loader's batches), filled by the kernel that copies a
    dataset's decoded chunks into them: no stacked matrix, no second gather.
    """
    lengths = np.empty(int(cuts[-1]), dtype=np.int64)
    for piece, part in zip(pieces, parts, strict=True):
        lengths[piece] = np.diff(part.indptr)
    outputs = SplitOutputs(lengths, cuts, dtype)
    for piece, part in zip(pieces, parts, strict=True):
        indptr = part.indptr.astype(np.int64, copy=False)
        rows = np.arange(piece.shape[0], dtype=np.int64)
        gather_rows_split(
            indptr, part.indices, part.data, rows, outputs.piece[piece], outputs.row[piece], *outputs.kernel_arguments()
        )
    return outputs.matrices(n_genes)
