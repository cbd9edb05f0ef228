"""The arrays a dataset's rows are read into: allocated for the decoders, filled in its columns, made a CSR matrix.

A dataset read in its stored columns, in the source's gene order (:meth:`~deltacells.Dataset.with_gene_order`) or in
a collection's genes (:meth:`~deltacells.Dataset.with_columns`) fills the same arrays; :class:`RowOutput` holds how
the stored column numbers are mapped (the kernels' map), and finishes the rows accordingly: sorted when mapped, the
genes left out removed.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from deltacells._memory import empty, populate
from deltacells._threads import shared_pool
from deltacells.codec import read_only
from deltacells.errors import warn
from deltacells.tiles import TileReader, drop_dropped_columns, gather_rows, gather_rows_mapped, sort_output_rows

__all__ = ["RowOutput"]


class RowOutput:
    """The output of a dataset's reads: its arrays, in the columns the dataset (or its view) reads into.

    Parameters
    ----------
    tiles
        The dataset's tiles: the threads of their reader map the pages of a new output.
    url
        The dataset's URL, named by the warning about counts float32 cannot hold.
    columns
        The kernels' map, read-only ``int32``: stored column ``j`` goes to output column ``columns[j]`` (a gene
        left out goes to ``n_columns``; its length bounds the sorts' columns). None: the stored columns.
    n_columns
        Columns of the output.
    drops_genes
        Whether some stored genes are left out (mapped to ``n_columns``, removed from each row once sorted).
    warned_precision
        Whether the warning about inexact counts was given already (it is given once).
    """

    def __init__(
        self,
        tiles: TileReader,
        url: str,
        columns: np.ndarray | None,
        n_columns: int,
        *,
        drops_genes: bool,
        warned_precision: bool,
    ) -> None:
        self.tiles = tiles
        self.url = url
        self.columns = columns
        self.n_columns = n_columns
        self.drops_genes = drops_genes
        self.warned_precision = warned_precision

    def empty(self, nnz: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """Output arrays (int32 indices unless the nonzeros need 64-bit offsets, scipy's rule), pages mapping.

        The pages of new memory are mapped in bulk by the decoding threads (:func:`deltacells._memory.populate`),
        ahead of the decoding, which then writes them without a fault each.

        Parameters
        ----------
        nnz
            Nonzeros the arrays hold.
        dtype
            Dtype of the values.

        Returns
        -------
        tuple of numpy.ndarray
            ``(indices, data)``, uninitialised.
        """
        index_dtype = np.int32 if nnz < 2**31 else np.int64
        arrays = empty(nnz, index_dtype), empty(nnz, dtype)
        threads = self.tiles.n_threads
        populate(arrays, shared_pool() if threads > 1 else None)
        return arrays

    def copy_rows(
        self,
        src_indptr: np.ndarray,
        src_indices: np.ndarray,
        src_data: np.ndarray,
        rows: np.ndarray,
        out_indptr: np.ndarray,
        slots: np.ndarray,
        out_indices: np.ndarray,
        out_data: np.ndarray,
    ) -> None:
        """Copy row ``rows[i]`` of the source into output row ``slots[i]`` (the gather kernels), columns mapped.

        ``out_indptr`` must hold the output's row pointers already. Mapped rows are left unsorted: they are
        sorted once, by :meth:`finish` (or :meth:`csr`).
        """
        # The source's arrays are read-only in a cached tile and writable in a fresh one: one type for both.
        source = read_only(src_indptr), read_only(src_indices), read_only(src_data)
        if self.columns is None:
            gather_rows(*source, rows, out_indptr, slots, out_indices, out_data)
        else:
            gather_rows_mapped(*source, rows, out_indptr, slots, out_indices, out_data, self.columns, False)

    def sort_rows(
        self,
        out_indptr: np.ndarray,
        out_indices: np.ndarray,
        out_data: np.ndarray,
        spans: list[tuple[int, int]] | None = None,
    ) -> None:
        """Sort each row's columns (rows mapped to other columns; a no-op without a map), of ``spans`` if given.

        Parameters
        ----------
        out_indptr, out_indices, out_data
            The output, its row pointers filled.
        spans
            ``(first, stop)`` runs of rows to sort (default: every row).
        """
        if self.columns is None:
            return
        if spans is None:
            sort_output_rows(out_indptr, out_indices, out_data, self.columns.shape[0])
        else:
            sort_output_rows(out_indptr, out_indices, out_data, self.columns.shape[0], spans)

    def finish(
        self, out_data: np.ndarray, out_indices: np.ndarray, out_indptr: np.ndarray, *, sorted_already: bool = False
    ) -> int:
        """Sort rows mapped to other columns (unless they are already), remove the genes left out; the nonzeros left.

        Parameters
        ----------
        out_data, out_indices, out_indptr
            The output, filled; ``out_indptr`` is rewritten when genes are removed.
        sorted_already
            Whether the mapped rows were sorted as they were decoded.

        Returns
        -------
        int
            The nonzeros kept, the first of ``out_indices`` and ``out_data``.
        """
        if not sorted_already:
            self.sort_rows(out_indptr, out_indices, out_data)
        if self.drops_genes:
            return int(drop_dropped_columns(out_indptr, out_indices, out_data, self.n_columns))
        return int(out_indices.shape[0])

    def csr(
        self, out_data: np.ndarray, out_indices: np.ndarray, out_indptr: np.ndarray, *, sorted_already: bool = False
    ) -> sparse.csr_matrix:
        """The output arrays as a CSR matrix, finished first (:meth:`finish`).

        Parameters
        ----------
        out_data, out_indices, out_indptr
            The output, filled (``out_indptr`` in ``int64``; it is cast to the indices' dtype).
        sorted_already
            As for :meth:`finish`.

        Returns
        -------
        scipy.sparse.csr_matrix
            ``len(out_indptr) - 1 x n_columns``, canonical, on the arrays given (no copy unless cast).
        """
        nnz = self.finish(out_data, out_indices, out_indptr, sorted_already=sorted_already)
        out_indices, out_data = out_indices[:nnz], out_data[:nnz]
        index_dtype = out_indices.dtype
        matrix = sparse.csr_matrix(
            (out_data, out_indices, out_indptr.astype(index_dtype, copy=False)),
            shape=(out_indptr.shape[0] - 1, self.n_columns),
            copy=False,
        )
        # Set, not computed (a scan of every row): rows are canonical, mapped ones sorted per row (linear), since
        # scipy sorts unsorted rows before its arithmetic (``multiply``...), on every call.
        matrix.has_sorted_indices = True
        matrix.has_canonical_format = True
        return matrix

    def finished_batches(
        self, matrices: list[sparse.csr_matrix], dtype: np.dtype, decoded: np.dtype, *, sorted_rows: bool
    ) -> list[sparse.csr_matrix]:
        """Matrices read chunk by chunk (``read_rows_by_chunk``), finished: genes left out removed, cast to ``dtype``.

        Parameters
        ----------
        matrices
            The matrices as read, in ``decoded``.
        dtype
            The dtype asked for.
        decoded
            The decoders' dtype they were read in (``decoded_dtype(dtype)``).
        sorted_rows
            Whether each row's columns are sorted (the stored columns, or mapped and sorted): what the matrices'
            ``has_sorted_indices`` is set to.

        Returns
        -------
        list of scipy.sparse.csr_matrix
            The matrices (the same objects, unless genes were removed).
        """
        if self.drops_genes:
            matrices = [self.dropped(matrix) for matrix in matrices]
        for matrix in matrices:
            if decoded != dtype:
                matrix.data = matrix.data.astype(dtype)
            matrix.has_sorted_indices = sorted_rows  # set, not computed (see csr)
            matrix.has_canonical_format = sorted_rows
        return matrices

    def dropped(self, matrix: sparse.csr_matrix) -> sparse.csr_matrix:
        """A matrix read with the genes left out still in its rows (sorted, so last in each), without them."""
        indptr = matrix.indptr.astype(np.int64)
        nnz = drop_dropped_columns(indptr, matrix.indices, matrix.data, self.n_columns)
        # The arrays set as they are (slices of the loader's shared arrays): scipy's constructor would copy them.
        matrix.indptr, matrix.indices, matrix.data = (
            indptr.astype(matrix.indices.dtype, copy=False),
            matrix.indices[:nnz],
            matrix.data[:nnz],
        )
        return matrix

    def warn_if_inexact(self, inexact: bool, dtype: np.dtype) -> None:
        """Warn once when float32 (or narrower) values cannot hold the counts (``inexact``) exactly.

        Parameters
        ----------
        inexact
            Whether some count read is above 2^24 (the decoders tell).
        dtype
            The dtype of the values read.
        """
        if inexact and dtype.kind == "f" and dtype.itemsize <= 4 and not self.warned_precision:
            self.warned_precision = True
            warn(
                f"{self.url}: some counts are above 2^24 and are not exact as {dtype}; "
                "read with dtype='int32', 'int64' or 'float64' to keep them exact"
            )
