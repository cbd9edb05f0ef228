"""Numba kernel copying selected rows of a decoded tile into an output CSR."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, boundscheck=False)
def gather_rows(
    src_indptr, src_indices, src_data, rows, out_indptr, out_slots, out_indices, out_data
):  # pragma: no cover
    """Copy row ``rows[i]`` of the source into output row ``out_slots[i]``.

    ``out_indptr`` must already hold the output row pointers; ``out_data`` may have
    another dtype than ``src_data`` (values are cast on the way).
    """
    for i in range(rows.shape[0]):
        start = src_indptr[rows[i]]
        stop = src_indptr[rows[i] + 1]
        dest = out_indptr[out_slots[i]]
        for j in range(stop - start):
            out_indices[dest + j] = src_indices[start + j]
            out_data[dest + j] = src_data[start + j]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def gather_rows_mapped(
    src_indptr, src_indices, src_data, rows, out_indptr, out_slots, out_indices, out_data, columns, sort
):  # pragma: no cover
    """:func:`gather_rows`, writing column ``columns[j]`` for stored column ``j`` (one gather per nonzero).

    With ``sort``, each output row's columns are then put in increasing order (with their values).
    """
    for i in range(rows.shape[0]):
        start = src_indptr[rows[i]]
        stop = src_indptr[rows[i] + 1]
        dest = out_indptr[out_slots[i]]
        n = stop - start
        for j in range(n):
            out_indices[dest + j] = columns[src_indices[start + j]]
            out_data[dest + j] = src_data[start + j]
        if sort and n > 1:
            order = np.argsort(out_indices[dest : dest + n])
            sorted_indices = out_indices[dest : dest + n][order]
            sorted_data = out_data[dest : dest + n][order]
            out_indices[dest : dest + n] = sorted_indices
            out_data[dest : dest + n] = sorted_data
