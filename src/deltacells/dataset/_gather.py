"""Numba kernel copying selected rows of a decoded tile into an output CSR."""

from __future__ import annotations

import numba


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
