"""Numba kernels copying selected rows of a decoded tile into an output CSR.

Consecutive source rows that go to consecutive output rows (a whole tile, a slice) are copied as one run:
one flat loop over their nonzeros, which the compiler vectorises, instead of a short loop per row. Indices
and values are copied in separate loops over slices: fused, the column gather kept the value copy from
vectorising (measured: the mapped copy of a full read took 1.5x the plain one; split, 1.05x).

Both public kernels are the one run loop of :func:`_gather_runs`; whether stored columns are mapped is told
by the type of its ``columns`` (``None`` or an array), so numba compiles each variant apart and drops the
other's branch: the loops over the nonzeros are the same as if each kernel had its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._jit import kernel
from deltacells.codec._kernels import radix_offsets, radix_passes, radix_scratch, radix_sorted_scratch, radix_top

if TYPE_CHECKING:
    from numpy.typing import NDArray

    #: Row pointers, columns, rows or output slots (numba compiles each kernel for the integer dtypes it is given).
    Ints = NDArray[np.integer[Any]]
    #: Values, of any numeric dtype.
    Values = NDArray[Any]


@kernel
def _run_end(rows: Ints, out_slots: Ints, i: int) -> int:  # pragma: no cover
    """First ``k > i`` where the run of consecutive rows (and output slots) starting at ``i`` stops."""
    k = i + 1
    while k < rows.shape[0] and rows[k] == rows[k - 1] + 1 and out_slots[k] == out_slots[k - 1] + 1:
        k += 1
    return k


@kernel
def _copy(source: Values, target: Values) -> None:  # pragma: no cover
    for j in range(source.shape[0]):
        target[j] = source[j]


@kernel
def _map(source: Ints, columns: Ints, target: Ints) -> None:  # pragma: no cover
    for j in range(source.shape[0]):
        target[j] = columns[source[j]]


@kernel
def _sort_rows(  # pragma: no cover
    out_indptr: Ints, out_slots: Ints, out_indices: Ints, out_data: Values, i: int, k: int
) -> None:
    """Put the columns of the output rows ``out_slots[i:k]`` in increasing order (with their values)."""
    for r in range(i, k):
        dest = out_indptr[out_slots[r]]
        n = out_indptr[out_slots[r] + 1] - dest
        if n > 1:
            order = np.argsort(out_indices[dest : dest + n])
            sorted_indices = out_indices[dest : dest + n][order]
            sorted_data = out_data[dest : dest + n][order]
            out_indices[dest : dest + n] = sorted_indices
            out_data[dest : dest + n] = sorted_data


@kernel
def _gather_runs(  # pragma: no cover
    src_indptr: Ints,
    src_indices: Ints,
    src_data: Values,
    rows: Ints,
    out_indptr: Ints,
    out_slots: Ints,
    out_indices: Ints,
    out_data: Values,
    columns: Ints | None,
    sort: bool,
) -> None:
    """The run loop of both kernels: copy row ``rows[i]`` of the source into output row ``out_slots[i]``.

    ``columns`` is ``None`` (stored columns copied as they are) or the column map (``columns[j]`` written
    for stored column ``j``). The ``is None`` test is settled when numba compiles for the argument's type,
    so each variant keeps only its own index loop. With ``sort`` (only meaningful with a map), each run's
    output rows are then sorted by column.
    """
    i = 0
    while i < rows.shape[0]:
        k = _run_end(rows, out_slots, i)
        start = src_indptr[rows[i]]
        stop = src_indptr[rows[k - 1] + 1]
        dest = out_indptr[out_slots[i]]
        _copy(src_data[start:stop], out_data[dest : dest + stop - start])
        if columns is None:
            _copy(src_indices[start:stop], out_indices[dest : dest + stop - start])
        else:
            _map(src_indices[start:stop], columns, out_indices[dest : dest + stop - start])
            if sort:
                _sort_rows(out_indptr, out_slots, out_indices, out_data, i, k)
        i = k


@kernel
def gather_rows(  # pragma: no cover
    src_indptr: Ints,
    src_indices: Ints,
    src_data: Values,
    rows: Ints,
    out_indptr: Ints,
    out_slots: Ints,
    out_indices: Ints,
    out_data: Values,
) -> None:
    """Copy row ``rows[i]`` of the source into output row ``out_slots[i]``.

    ``out_indptr`` must already hold the output row pointers; ``out_data`` may have
    another dtype than ``src_data`` (values are cast on the way).
    """
    _gather_runs(src_indptr, src_indices, src_data, rows, out_indptr, out_slots, out_indices, out_data, None, False)


@kernel
def gather_rows_mapped(  # pragma: no cover
    src_indptr: Ints,
    src_indices: Ints,
    src_data: Values,
    rows: Ints,
    out_indptr: Ints,
    out_slots: Ints,
    out_indices: Ints,
    out_data: Values,
    columns: Ints,
    sort: bool,
) -> None:
    """:func:`gather_rows`, writing column ``columns[j]`` for stored column ``j`` (one gather per nonzero).

    With ``sort``, each output row's columns are then put in increasing order (with their values).
    """
    _gather_runs(src_indptr, src_indices, src_data, rows, out_indptr, out_slots, out_indices, out_data, columns, sort)


@kernel
def gather_rows_split(  # pragma: no cover
    src_indptr: Ints,
    src_indices: Ints,
    src_data: Values,
    rows: Ints,
    pieces: Ints,
    piece_rows: Ints,
    indptr_starts: Ints,
    indptrs: Ints,
    nnz_starts: Ints,
    indices: Ints,
    data: Values,
) -> None:
    """Copy row ``rows[i]`` of the source into row ``piece_rows[i]`` of output ``pieces[i]``.

    The outputs are separate CSR matrices laid end to end: output ``p``'s row pointers are
    ``indptrs[indptr_starts[p]:]`` (already made, from 0), its nonzeros ``indices[nnz_starts[p]:]`` and
    ``data[nnz_starts[p]:]``; each matrix is then made of slices of its own, not a view of a larger
    matrix (a training loader's batches, which scipy would copy again if they were views).
    """
    for i in range(rows.shape[0]):
        p = pieces[i]
        start = src_indptr[rows[i]]
        n = src_indptr[rows[i] + 1] - start
        dest = nnz_starts[p] + indptrs[indptr_starts[p] + piece_rows[i]]
        _copy(src_data[start : start + n], data[dest : dest + n])
        _copy(src_indices[start : start + n], indices[dest : dest + n])


@kernel
def gather_rows_split_sorted(  # pragma: no cover
    src_indptr: Ints,
    src_indices: Ints,
    src_data: Values,
    rows: Ints,
    pieces: Ints,
    piece_rows: Ints,
    indptr_starts: Ints,
    indptrs: Ints,
    nnz_starts: Ints,
    indices: Ints,
    data: Values,
    n_columns: int,
) -> None:
    """:func:`gather_rows_split`, each row's columns sorted on the way (source rows mapped, not yet sorted).

    A least-significant-digit radix sort of each row, 8 bits of the column a pass, in scratch rows in L1 cache,
    then copied to the output row in order: the output, fresh memory, is written sequentially (measured on a
    loader's windows of resampled Visium cells: 8 to 10% less time than the last pass writing straight into
    the output row, at random places in it). The counts of every pass come from one read of the row, which
    also tells a row already in order (copied as it is).
    """
    n_passes = radix_passes(n_columns)
    top = radix_top(n_columns, n_passes)
    longest = 0
    for i in range(rows.shape[0]):
        longest = max(longest, src_indptr[rows[i] + 1] - src_indptr[rows[i]])
    scratch = radix_scratch(longest, src_indices, src_data)
    counts = np.zeros((n_passes, 256), dtype=np.uint64)
    for i in range(rows.shape[0]):
        p = pieces[i]
        start = src_indptr[rows[i]]
        n = src_indptr[rows[i] + 1] - start
        dest = nnz_starts[p] + indptrs[indptr_starts[p] + piece_rows[i]]
        target_indices = indices[dest : dest + n]
        target_data = data[dest : dest + n]
        row_indices = src_indices[start : start + n]
        row_data = src_data[start : start + n]
        if radix_offsets(row_indices, counts, n_passes, top):  # in order: copied as it is
            _copy(row_data, target_data)
            _copy(row_indices, target_indices)
        else:
            sorted_indices, sorted_data = radix_sorted_scratch(row_indices, row_data, scratch, counts, n_passes)
            _copy(sorted_data, target_data)
            _copy(sorted_indices, target_indices)


@kernel
def drop_dropped_columns(indptr: Ints, indices: Ints, data: Values, limit: int) -> int:  # pragma: no cover
    """Remove, in place, every nonzero whose column is ``limit`` or more; rewrite ``indptr``; return the new nnz.

    For rows mapped into a joined gene space where the genes left out (an inner join's) map to ``limit``: once
    each row is sorted they are its last nonzeros, so each row keeps a prefix, moved down over the gaps. One
    pass, no allocation; ``indptr[0]`` stays where it is.
    """
    write = indptr[0]
    lo = indptr[0]
    for r in range(indptr.shape[0] - 1):
        hi = indptr[r + 1]
        kept = lo
        while kept < hi and indices[kept] < limit:
            kept += 1
        if write != lo:
            for j in range(lo, kept):
                indices[write + j - lo] = indices[j]
                data[write + j - lo] = data[j]
        write += kept - lo
        indptr[r + 1] = write
        lo = hi
    kept_nnz: int = write - indptr[0]
    return kept_nnz
