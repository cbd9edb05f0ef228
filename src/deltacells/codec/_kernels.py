"""Numba kernels of the decoder: arrays in, arrays out, no I/O, no Python objects.

Every kernel is compiled with ``nogil=True`` so that the chunks of a tile (and the
tiles of a read) decode on several threads at once. Kernels report malformed input
through an error code and a position instead of raising: the caller turns that into
a :class:`~deltacells.FormatError` naming the tile, chunk and field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from deltacells._jit import kernel
from deltacells.codec._codes import (  # the error codes the kernels return
    GENE_OUT_OF_RANGE,
    GENES_NOT_INCREASING,
    OK,
    PAYLOAD_OUT_OF_RANGE,
    POSITION_OUT_OF_RANGE,
    POSITIONS_NOT_INCREASING,
    STORED_NOT_ESCAPED,
    ZERO_COUNT,
)
from deltacells.codec._layout import (
    CELL_HI,
    CELL_LO,
    GAPS_LEN,
    GAPS_OFF,
    GEXC_LEN,
    GEXC_OFF,
    NNZ_HI,
    NNZ_LO,
    VALS_LEN,
    VALS_OFF,
    VEXC_LEN,
    VEXC_OFF,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    #: The four scratch rows of a radix sort (:func:`radix_scratch`): indices, data, indices, data.
    Scratch = tuple[NDArray[np.integer[Any]], NDArray[Any], NDArray[np.integer[Any]], NDArray[Any]]

    #: An integer argument: a Python int, or numpy's (the kernels read chunk table entries as ``np.int64``).
    Integer = int | np.integer[Any]


@kernel
def chunk_table_ok(  # pragma: no cover
    table: NDArray[np.uint64],
    indptr: NDArray[np.int64],
    n_cells: np.uint64,
    nnz: np.uint64,
    total_size: np.uint64,
    min_offset: np.uint64,
) -> bool:
    """Whether a chunk table passes every rule ``check_chunk_table`` checks (True), in one pass, no allocation.

    ``table`` is the ``uint64[n_chunks, 12]`` table, ``indptr`` the tile's ``int64`` row pointers (checked:
    non-decreasing from 0); the sizes are ``uint64``. Only when it answers False does the caller run the
    checks one by one, to say which rule is broken and where.
    """
    n_chunks = table.shape[0]
    if n_chunks == 0:
        return True
    if table[0, CELL_LO] != 0 or table[0, NNZ_LO] != 0:
        return False
    for i in range(n_chunks):
        if i > 0 and (table[i, CELL_LO] != table[i - 1, CELL_HI] or table[i, NNZ_LO] != table[i - 1, NNZ_HI]):
            return False
        if table[i, CELL_HI] < table[i, CELL_LO] or table[i, NNZ_HI] < table[i, NNZ_LO]:
            return False
    if table[n_chunks - 1, CELL_HI] != n_cells or table[n_chunks - 1, NNZ_HI] != nnz:
        return False
    limit = np.uint64(2**32)
    for i in range(n_chunks):  # cells are now contiguous from 0 to n_cells: they index the indptr safely
        if np.uint64(indptr[table[i, CELL_LO]]) != table[i, NNZ_LO]:
            return False
        if np.uint64(indptr[table[i, CELL_HI]]) != table[i, NNZ_HI]:
            return False
        if table[i, NNZ_HI] - table[i, NNZ_LO] >= limit:
            return False
        for off_col, len_col, required in (
            (GAPS_OFF, GAPS_LEN, True),
            (VALS_OFF, VALS_LEN, True),
            (VEXC_OFF, VEXC_LEN, False),
            (GEXC_OFF, GEXC_LEN, False),
        ):
            offset, length = table[i, off_col], table[i, len_col]
            if length == 0:
                if required:
                    return False
                continue
            if offset > total_size or length > total_size - offset or offset < min_offset:
                return False
    return True


@kernel
def decode_chunk(  # pragma: no cover
    gaps: NDArray[np.uint8],
    vals: NDArray[np.uint8],
    indptr: NDArray[np.int64],
    cell_lo: int,
    cell_hi: int,
    nnz_lo: int,
    n_genes: int,
    out_indices: NDArray[np.int32],
    out_data: NDArray[Any],
    columns: NDArray[np.int32] | None = None,
) -> tuple[int, int]:
    """Decode one chunk's byte planes into gene indices and counts.

    ``gaps`` and ``vals`` are the decompressed streams (``2 * n`` bytes each: the ``n`` low bytes then
    the ``n`` high bytes). ``out_indices`` and ``out_data`` are the chunk's slices of the output arrays;
    ``out_data`` may be of any numeric dtype (numba compiles a kernel for each), so counts are written
    once, in their final type. ``columns`` (``None``, or ``int32[n_genes]``: the output column of each
    stored gene) maps the indices as they are written; whether it is None is settled when numba compiles
    for its type, so the unmapped kernel keeps no trace of it. Not for a chunk with gap exceptions, which
    are applied to the stored indices. Returns ``(code, position)``; ``position`` is the nonzero within
    the chunk where a problem was found.

    The checks accumulate branch-free in the hot loops (so that they vectorise); only when one fails does
    a second pass look for where.
    """
    n = out_indices.shape[0]
    gaps_low = gaps[:n]
    gaps_high = gaps[n:]
    # Pass 1 (vectorised): merge the byte planes and count zero gaps.
    zero_gaps = 0
    for j in range(n):
        gap = np.int32(gaps_low[j]) | (np.int32(gaps_high[j]) << 8)
        zero_gaps += gap == 0
        out_indices[j] = gap
    # Pass 2: prefix sums within each cell. A cell's first gap may be 0 (gene 0); no other may.
    # int32 cannot overflow below 32768 nonzeros in a cell (32767 * 65535 < 2^31); longer cells sum in int64.
    first_zero = 0
    too_far: bool | np.bool_ = False
    last = np.int32(n_genes - 1)
    for cell in range(cell_lo, cell_hi):
        start = indptr[cell] - nnz_lo
        stop = indptr[cell + 1] - nnz_lo
        if stop == start:
            continue
        first_zero += out_indices[start] == 0
        if stop - start < 32768:
            # Four at a time: the four sums of a step depend on the carry only through one add each, which
            # shortens the loop's dependency chain (measured: this pass 13% faster than one at a time).
            gene = np.int32(0)
            j = start
            while j + 4 <= stop:
                a = out_indices[j]
                b = a + out_indices[j + 1]
                c = b + out_indices[j + 2]
                d = c + out_indices[j + 3]
                if columns is None:
                    out_indices[j] = gene + a
                    out_indices[j + 1] = gene + b
                    out_indices[j + 2] = gene + c
                    out_indices[j + 3] = gene + d
                else:  # off the dependency chain; min() keeps a malformed index (reported below) in bounds
                    out_indices[j] = columns[min(gene + a, last)]
                    out_indices[j + 1] = columns[min(gene + b, last)]
                    out_indices[j + 2] = columns[min(gene + c, last)]
                    out_indices[j + 3] = columns[min(gene + d, last)]
                gene += d
                j += 4
            while j < stop:
                gene += out_indices[j]
                out_indices[j] = gene if columns is None else columns[min(gene, last)]
                j += 1
            too_far |= gene >= n_genes
        else:
            wide = np.int64(0)
            for j in range(start, stop):
                wide += out_indices[j]
                out_indices[j] = min(wide, 2147483647) if columns is None else columns[min(wide, last)]
            too_far |= wide >= n_genes
    bad_gap = zero_gaps != first_zero
    vals_low = vals[:n]
    vals_high = vals[n:]
    zero: bool | np.bool_ = False
    for j in range(n):
        value = np.int32(vals_low[j]) | (np.int32(vals_high[j]) << 8)
        zero |= value == 0
        out_data[j] = value
    if bad_gap or too_far:
        return _locate_gap_error(gaps_low, gaps_high, indptr, cell_lo, cell_hi, nnz_lo, n_genes)
    if zero:
        for j in range(n):
            if out_data[j] == 0:
                return ZERO_COUNT, j
    return OK, 0


@kernel
def map_columns(indices: NDArray[np.int32], columns: NDArray[np.int32]) -> None:  # pragma: no cover
    """Replace each stored gene index ``g`` by ``columns[g]`` (indices already checked below ``n_genes``)."""
    for j in range(indices.shape[0]):
        indices[j] = columns[indices[j]]


#: De Bruijn sequence and table: the index of a 64-bit word's one set bit from one multiplication.
_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DE_BRUIJN_INDEX = np.array(
    [0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18,
     12, 5, 63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19,
     9, 13, 8, 7, 6],
    dtype=np.int64,
)  # fmt: skip


@kernel
def _bit_index_de_bruijn(power: np.uint64) -> int:  # pragma: no cover
    """``k`` for ``power == 2**k``: one multiplication, wrapping modulo 2^64 as compiled code does."""
    index: int = _DE_BRUIJN_INDEX[(power * _DE_BRUIJN) >> np.uint64(58)]
    return index


def _bit_index_search(power: np.uint64) -> int:  # pragma: no cover
    """``k`` for ``power == 2**k`` (a uint64 with one bit set): a binary search, no multiplication to overflow.

    Python only (``NUMBA_DISABLE_JIT``): compiled code takes :func:`_bit_index_de_bruijn`.
    """
    k = 0
    if power >= np.uint64(1 << 32):
        k += 32
        power >>= np.uint64(32)
    if power >= np.uint64(1 << 16):
        k += 16
        power >>= np.uint64(16)
    if power >= np.uint64(1 << 8):
        k += 8
        power >>= np.uint64(8)
    if power >= np.uint64(1 << 4):
        k += 4
        power >>= np.uint64(4)
    if power >= np.uint64(1 << 2):
        k += 2
        power >>= np.uint64(2)
    if power >= np.uint64(2):
        k += 1
    return k


#: Compiled, the multiplication wraps silently; run as Python (``NUMBA_DISABLE_JIT``), numpy would warn of it.
_bit_index = _bit_index_search if numba.config.DISABLE_JIT else _bit_index_de_bruijn  # type: ignore[attr-defined]  # numba's types leave out its config settings


#: Bits of a column sorted per pass of the radix sort of :func:`sort_rows` (256 buckets: counts in L1 cache).
_RADIX_BITS = 8

#: A digit of a column, as an unsigned bucket number. The radix loops index with unsigned integers
#: (digits, counts, positions), to which numba adds no negative-index wraparound: with signed ones, the sort
#: of ``benchmarks/bench_row_sort.py`` took 4.6 to 6.5 ns a nonzero, with unsigned ones 2.9 to 3.1.
_DIGIT_MASK = np.uint64((1 << _RADIX_BITS) - 1)

#: The cost model that chooses between the two sorts of a row (:func:`bitmap_sorts`), in tenths of a
#: nanosecond on the benchmark machine, fitted to ``benchmarks/bench_row_sort.py --classes`` (rows of 4 to
#: 45,000 columns among 256 to 60,000): the bitmap costs ``BITMAP_WORD_COST`` a 64-bit word of the columns
#: (most words end a bit-scanning loop on a mispredicted branch) and more a nonzero than the radix sort,
#: which costs about ``RADIX_ROW_COST`` a row (clearing and summing its buckets). So the bitmap wins for short
#: rows of narrow matrices only, never on a genome's 20,000 columns (on the Visium matrix's rows of 1,217
#: nonzeros and more, which a density rule sent to the bitmap, 4.7 ns a nonzero against 2.7 by radix).
BITMAP_WORD_COST = 65
RADIX_ROW_COST = 1700  # two passes
BITMAP_NONZERO_EXTRA = 9  # what a nonzero costs the bitmap more than two radix passes
RADIX_ROW_COST_ONE_PASS = 1150  # one pass (it also copies the row back from scratch)
BITMAP_NONZERO_EXTRA_ONE_PASS = 16


@kernel
def sort_rows(  # pragma: no cover
    indptr: NDArray[np.integer[Any]],
    first_row: int,
    end_row: int,
    offset: int,
    indices: NDArray[np.integer[Any]],
    data: NDArray[Any],
    n_columns: int,
) -> None:
    """Put each row's columns in increasing order, with their values: rows ``first_row .. end_row - 1``.

    Row ``r`` is ``indices[indptr[r] - offset : indptr[r + 1] - offset]`` (and ``data``), its columns unique
    and below ``n_columns`` (mapped from a tile's stored genes). Linear per row, no comparison sort, two
    ways chosen by a cost model (:func:`bitmap_sorts`): by a least-significant-digit radix sort, 8 bits of
    the column a pass, between the row and a scratch row in L1 cache (every row of a genome-wide matrix);
    or through a bitmap of the columns read back a word at a time, whose cost is the columns' count over 64
    plus the row's (short rows of narrow matrices). On rows of 368 columns of 19,465, about 3 ns a nonzero,
    8 to 9 times as fast as scipy's ``sort_indices``; on the Visium matrix's own rows, 3.0 ns a nonzero
    (``benchmarks/bench_row_sort.py``). A row already in order is left as it is.
    """
    n_passes = radix_passes(n_columns)
    top = radix_top(n_columns, n_passes)
    longest = 0
    for r in range(first_row, end_row):
        longest = max(longest, indptr[r + 1] - indptr[r])
    n_words = (n_columns + 63) >> 6
    some_bitmap = bitmap_sorts(n_words, 2, n_passes)  # the shortest rows sorted are the likeliest
    words = np.zeros(n_words if some_bitmap else 0, dtype=np.uint64)
    values = np.empty(n_columns if some_bitmap else 0, dtype=data.dtype)
    scratch = radix_scratch(longest, indices, data)
    counts = np.zeros((n_passes, 256), dtype=np.uint64)
    for r in range(first_row, end_row):
        lo = indptr[r] - offset
        n = indptr[r + 1] - offset - lo
        if n < 2:
            continue
        if some_bitmap and bitmap_sorts(n_words, n, n_passes):
            _sort_row_bitmap(indices, data, lo, n, words, values, n_columns)
        else:
            row_indices, row_data = indices[lo : lo + n], data[lo : lo + n]
            if radix_offsets(row_indices, counts, n_passes, top):
                continue  # in order already
            if n_passes == 1:  # one pass cannot write the row it reads: into a scratch row, then back
                sorted_indices, sorted_data = radix_sorted_scratch(row_indices, row_data, scratch, counts, 1)
                row_indices[:] = sorted_indices
                row_data[:] = sorted_data
            else:
                radix_scatter(row_indices, row_data, scratch, row_indices, row_data, counts, n_passes)


@kernel
def bitmap_sorts(n_words: int, n: int, n_passes: int) -> bool:  # pragma: no cover
    """Whether a row of ``n`` nonzeros among ``n_words`` words of columns sorts faster through a bitmap.

    From :data:`BITMAP_WORD_COST` and the costs by passes; three passes and more (over 65,536 columns,
    over 1,024 words) always go by radix.
    """
    if n_passes > 2:
        return False
    if n_passes == 1:
        return BITMAP_WORD_COST * n_words + BITMAP_NONZERO_EXTRA_ONE_PASS * n < RADIX_ROW_COST_ONE_PASS
    return BITMAP_WORD_COST * n_words + BITMAP_NONZERO_EXTRA * n < RADIX_ROW_COST


@kernel
def radix_passes(n_columns: int) -> int:  # pragma: no cover
    """Passes of 8 bits that sort columns below ``n_columns`` (1 to 4)."""
    n_passes = 1
    while n_columns - 1 >= (1 << (_RADIX_BITS * n_passes)) and n_passes < 4:
        n_passes += 1
    return n_passes


@kernel
def radix_top(n_columns: int, n_passes: int) -> int:  # pragma: no cover
    """Buckets of the last pass: the values of the top digit of columns below ``n_columns`` (1 to 256)."""
    return ((n_columns - 1) >> (_RADIX_BITS * (n_passes - 1))) + 1


@kernel
def radix_offsets(  # pragma: no cover
    indices: NDArray[np.integer[Any]], counts: NDArray[np.uint64], n_passes: int, top: int
) -> bool:
    """Where each digit's columns go in every pass of a radix sort of ``indices``; whether they are in order.

    ``counts`` (``uint64[n_passes, 256]``) is overwritten: ``counts[d, b]`` becomes the first position of the
    columns whose digit ``d`` is ``b`` (all of them read once). The last pass's digit takes ``top`` values
    (:func:`radix_top`), so only those are summed. Columns already increasing leave it unfinished: the caller
    keeps the row as it is.
    """
    one = np.uint64(1)
    counts[:, :] = 0
    in_order = True
    previous = -1
    for j in range(indices.shape[0]):
        c = indices[j]
        in_order &= c > previous
        previous = c
        u = np.uint64(c)
        counts[0, u & _DIGIT_MASK] += one
        if n_passes > 1:  # the same branch for every nonzero: predicted
            counts[1, (u >> np.uint64(_RADIX_BITS)) & _DIGIT_MASK] += one
            if n_passes > 2:
                counts[2, (u >> np.uint64(2 * _RADIX_BITS)) & _DIGIT_MASK] += one
                if n_passes > 3:
                    counts[3, (u >> np.uint64(3 * _RADIX_BITS)) & _DIGIT_MASK] += one
    if not in_order:
        for d in range(n_passes):
            # Exclusive sums, the running total kept in a register rather than re-read from the last store.
            digits = counts[d]
            total = np.uint64(0)
            for b in range(256 if d < n_passes - 1 else top):
                count = digits[b]
                digits[b] = total
                total += count
    return in_order


@kernel
def radix_scatter(  # pragma: no cover
    row_indices: NDArray[np.integer[Any]],
    row_data: NDArray[Any],
    scratch: Scratch,
    out_indices: NDArray[np.integer[Any]],
    out_data: NDArray[Any],
    counts: NDArray[np.uint64],
    n_passes: int,
) -> None:
    """The passes of a radix sort of a row whose :func:`radix_offsets` are in ``counts``.

    The first pass reads ``row_indices`` (and ``row_data``), the last one writes ``out_indices`` (and
    ``out_data``): another array, which makes the sort a copy too, or the row itself when there are at least
    two passes. Passes in between alternate between two scratch rows, ``scratch`` (from :func:`radix_scratch`).
    """
    n = row_indices.shape[0]
    one = np.uint64(1)
    first_indices, first_data = scratch[0][:n], scratch[1][:n]
    second_indices, second_data = scratch[2][:n], scratch[3][:n]
    for d in range(n_passes):
        if d == 0:
            from_indices, from_data = row_indices, row_data
        elif d % 2 == 1:
            from_indices, from_data = first_indices, first_data
        else:
            from_indices, from_data = second_indices, second_data
        if d == n_passes - 1:
            to_indices, to_data = out_indices, out_data
        elif d % 2 == 0:
            to_indices, to_data = first_indices, first_data
        else:
            to_indices, to_data = second_indices, second_data
        shift = np.uint64(_RADIX_BITS * d)
        digits = counts[d]
        for j in range(n):
            c = from_indices[j]
            b = (np.uint64(c) >> shift) & _DIGIT_MASK
            at = digits[b]
            digits[b] = at + one
            to_indices[at] = c
            to_data[at] = from_data[j]


@kernel
def radix_sorted_scratch(  # pragma: no cover
    row_indices: NDArray[np.integer[Any]],
    row_data: NDArray[Any],
    scratch: Scratch,
    counts: NDArray[np.uint64],
    n_passes: int,
) -> tuple[NDArray[np.integer[Any]], NDArray[Any]]:
    """Sort a row whose :func:`radix_offsets` are in ``counts`` into one of the ``scratch`` rows; the row is left.

    Returns that scratch row's ``(indices, data)``: the one the passes have left free when the last one runs.
    """
    n = row_indices.shape[0]
    if n_passes % 2 == 0:  # the last pass reads the first scratch row: into the second
        out_indices, out_data = scratch[2][:n], scratch[3][:n]
    else:  # the last pass reads the second scratch row (or the row itself): into the first
        out_indices, out_data = scratch[0][:n], scratch[1][:n]
    radix_scatter(row_indices, row_data, scratch, out_indices, out_data, counts, n_passes)
    return out_indices, out_data


@kernel
def radix_scratch(  # pragma: no cover
    longest: int, indices: NDArray[np.integer[Any]], data: NDArray[Any]
) -> Scratch:
    """Two scratch rows for :func:`radix_scatter`, ``longest`` nonzeros long, in the dtypes of ``indices``, ``data``."""
    return (
        np.empty(longest, dtype=indices.dtype),
        np.empty(longest, dtype=data.dtype),
        np.empty(longest, dtype=indices.dtype),
        np.empty(longest, dtype=data.dtype),
    )


@kernel
def _sort_row_bitmap(  # pragma: no cover
    indices: NDArray[np.integer[Any]],
    data: NDArray[Any],
    lo: int,
    n: int,
    words: NDArray[np.uint64],
    values: NDArray[Any],
    n_columns: int,
) -> None:
    """Sort row ``indices[lo : lo + n]`` (and ``data``) through a bitmap of its columns.

    Each value is put at its column and the column's bit set, then the bitmap is read from the row's lowest
    column to its highest, a 64-bit word at a time (and cleared).
    """
    one = np.uint64(1)
    low_col = n_columns
    high_col = 0
    in_order = True
    previous = -1
    for j in range(lo, lo + n):
        c = indices[j]
        in_order = in_order and c > previous
        previous = c
        low_col = min(low_col, c)
        high_col = max(high_col, c)
        values[c] = data[j]
        words[c >> 6] |= one << np.uint64(c & 63)
    out = lo
    for w in range(low_col >> 6, (high_col >> 6) + 1):
        bits = words[w]
        if bits == 0:
            continue
        words[w] = np.uint64(0)
        if in_order:
            continue  # the bitmap is cleared; the row is left as it was
        while bits != 0:
            lowest = bits & (~bits + one)
            c = (w << 6) + _bit_index(lowest)
            indices[out] = c
            data[out] = values[c]
            out += 1
            bits ^= lowest


@kernel
def _locate_gap_error(  # pragma: no cover
    gaps_low: NDArray[np.uint8],
    gaps_high: NDArray[np.uint8],
    indptr: NDArray[np.int64],
    cell_lo: int,
    cell_hi: int,
    nnz_lo: int,
    n_genes: int,
) -> tuple[int, int]:
    for cell in range(cell_lo, cell_hi):
        start = indptr[cell] - nnz_lo
        stop = indptr[cell + 1] - nnz_lo
        gene = np.int64(0)
        for j in range(start, stop):
            gap = np.int64(gaps_low[j]) | (np.int64(gaps_high[j]) << 8)
            if gap == 0 and j > start:
                return GENES_NOT_INCREASING, j
            gene += gap
            if gene >= n_genes:
                return GENE_OUT_OF_RANGE, j
    return OK, 0


@kernel
def apply_value_exceptions(  # pragma: no cover
    positions: NDArray[np.integer[Any]], payloads: NDArray[np.integer[Any]], out_data: NDArray[Any]
) -> tuple[int, int]:
    """Replace the stored 65535 at each position by its true count (``vexc``).

    Positions and payloads are all checked before anything is changed.
    """
    n = out_data.shape[0]
    previous = np.int64(-1)
    for e in range(positions.shape[0]):
        pos = np.int64(positions[e])
        if pos >= n:
            return POSITION_OUT_OF_RANGE, e
        if pos <= previous:
            return POSITIONS_NOT_INCREASING, e
        previous = pos
        payload = np.int64(payloads[e])
        if payload < 65536 or payload > 2147483647:
            return PAYLOAD_OUT_OF_RANGE, e
    for e in range(positions.shape[0]):
        if out_data[positions[e]] != 65535:
            return STORED_NOT_ESCAPED, e
    for e in range(positions.shape[0]):
        out_data[positions[e]] = payloads[e]
    return OK, 0


@kernel
def apply_gap_exceptions(  # pragma: no cover
    positions: NDArray[np.integer[Any]],
    payloads: NDArray[np.integer[Any]],
    indptr: NDArray[np.int64],
    cell_lo: int,
    cell_hi: int,
    nnz_lo: int,
    n_genes: int,
    out_indices: NDArray[np.int32],
) -> tuple[int, int]:
    """Add each ``gexc`` payload to its nonzero and to every later nonzero of the same cell.

    One pass over the nonzeros from the first exception on: the running addition
    resets at each cell boundary, so the cost is linear whatever the input.
    """
    n = out_indices.shape[0]
    k = positions.shape[0]
    previous = np.int64(-1)
    for e in range(k):
        pos = np.int64(positions[e])
        if pos >= n:
            return POSITION_OUT_OF_RANGE, e
        if pos <= previous:
            return POSITIONS_NOT_INCREASING, e
        previous = pos
        payload = np.int64(payloads[e])
        if payload < 1 or payload > n_genes - 1:
            return PAYLOAD_OUT_OF_RANGE, e
    if k == 0:
        return OK, 0
    e = 0
    # Find the cell of the first exception, then sweep forward.
    cell = cell_lo
    while cell < cell_hi and indptr[cell + 1] - nnz_lo <= np.int64(positions[0]):
        cell += 1
    while cell < cell_hi and e < k:
        start = indptr[cell] - nnz_lo
        stop = indptr[cell + 1] - nnz_lo
        first = np.int64(positions[e])
        if first >= stop:
            cell += 1
            continue
        added = np.int64(0)
        previous_sum = np.int64(0)
        for j in range(start, stop):
            prefix_sum = np.int64(out_indices[j])
            stored_gap = prefix_sum - previous_sum if j > start else prefix_sum
            previous_sum = prefix_sum
            while e < k and np.int64(positions[e]) == j:
                if stored_gap != 65535:
                    return STORED_NOT_ESCAPED, e
                added += np.int64(payloads[e])
                e += 1
            gene = prefix_sum + added
            if gene >= n_genes:
                return GENE_OUT_OF_RANGE, j
            out_indices[j] = gene
        cell += 1
    return OK, 0


#: A zstd frame's magic number (RFC 8878), little-endian.
_ZSTD_MAGIC = 0xFD2FB528

#: The most a zstd frame can decompress to per byte, and beyond that one block (see ``codec._frames``).
_MAX_EXPANSION = 32768
_MAX_BLOCK = 131072


@kernel
def frame_header(  # pragma: no cover
    blob: NDArray[np.uint8], offset: Integer, length: Integer
) -> tuple[Integer, Integer]:
    """``(header size, content size)`` of a plain zstd frame at ``blob[offset : offset + length]``, or ``(-1, -1)``.

    The frame header of RFC 8878 (section 3.1.1.1): magic number, frame header descriptor, window
    descriptor, dictionary ID, frame content size. ``(-1, -1)`` whenever the frame is not one these kernels
    vouch for: not a zstd frame, a reserved bit set, a dictionary ID, a window above 2^30, no content size, a
    header cut short, or a size more than a frame of ``length`` bytes can hold; the caller then asks
    python-zstandard (``codec._frames``), which accepts the frame or names its problem. Never a size that
    ``zstandard.get_frame_parameters`` would not give.
    """
    end = offset + length
    if length < 6 or end > blob.shape[0]:
        return -1, -1
    magic = (
        np.uint32(blob[offset])
        | (np.uint32(blob[offset + 1]) << 8)
        | (np.uint32(blob[offset + 2]) << 16)
        | (np.uint32(blob[offset + 3]) << 24)
    )
    if magic != _ZSTD_MAGIC:
        return -1, -1
    descriptor = np.int64(blob[offset + 4])
    if descriptor & 0x0B:  # the reserved bit, or a dictionary ID
        return -1, -1
    single_segment = (descriptor >> 5) & 1
    position = offset + 5
    if not single_segment:
        if blob[position] >> 3 > 20:  # window log above 30
            return -1, -1
        position += 1
    flag = descriptor >> 6
    field = (1 if single_segment else 0) if flag == 0 else (1 << flag)
    if field == 0 or position + field > end:
        return -1, -1
    size = np.uint64(0)
    for k in range(field):
        size |= np.uint64(blob[position + k]) << np.uint64(8 * k)
    if field == 2:
        size += np.uint64(256)
    if size > np.uint64(length) * np.uint64(_MAX_EXPANSION) + np.uint64(_MAX_BLOCK):
        return -1, -1
    return position + field - offset, np.int64(size)


@kernel
def frame_fills(blob: NDArray[np.uint8], offset: Integer, length: Integer) -> bool:  # pragma: no cover
    """Whether the plain zstd frame at ``blob[offset : offset + length]`` ends exactly there (True).

    Its header (:func:`frame_header`), then each block's 3-byte header and content (a raw or compressed
    block its size, an RLE block one byte) up to the last block, then the 4-byte checksum if the header
    announces one: what ``codec._frames.frame_size`` walks. False also for a frame :func:`frame_header` does
    not vouch for, or a block of the reserved type.
    """
    header, _ = frame_header(blob, offset, length)
    if header < 0:
        return False
    end = offset + length
    position = offset + header
    while True:
        if position + 3 > end:
            return False
        word = np.int64(blob[position]) | (np.int64(blob[position + 1]) << 8) | (np.int64(blob[position + 2]) << 16)
        kind = (word >> 1) & 3
        if kind == 3:
            return False
        position += 3 + (1 if kind == 1 else word >> 3)
        if word & 1:
            break
    if blob[offset + 4] & 0x04:  # a content checksum follows the last block
        position += 4
    return position == end


@kernel
def frame_sizes_ok(blob: NDArray[np.uint8], table: NDArray[np.uint64]) -> bool:  # pragma: no cover
    """Whether every frame of every chunk declares a size the format allows (True), in one pass.

    What ``codec._decode._check_frame_sizes`` checks: the gaps and vals frames declare ``2 * n`` bytes, a
    vexc or gexc frame ``8 * k`` bytes with ``k <= n`` (``n`` the chunk's nonzeros). ``blob`` is the whole
    tile object and ``table`` its checked chunk table. Answers False also for a frame it cannot read itself
    (:func:`frame_header`): the caller then runs the checks one by one, which accept it or say what
    is wrong and where.
    """
    for c in range(table.shape[0]):
        n = np.int64(table[c, NNZ_HI] - table[c, NNZ_LO])
        for off_col, len_col in ((GAPS_OFF, GAPS_LEN), (VALS_OFF, VALS_LEN)):
            _, size = frame_header(blob, np.int64(table[c, off_col]), np.int64(table[c, len_col]))
            if size != 2 * n:
                return False
        for off_col, len_col in ((VEXC_OFF, VEXC_LEN), (GEXC_OFF, GEXC_LEN)):
            if table[c, len_col] == 0:
                continue
            _, size = frame_header(blob, np.int64(table[c, off_col]), np.int64(table[c, len_col]))
            if size < 0 or size % 8 or size // 8 > n:
                return False
    return True


@kernel
def run_frames_fill(  # pragma: no cover
    blob: NDArray[np.uint8], table: NDArray[np.uint64], chunks: NDArray[np.int64]
) -> bool:
    """Whether the gaps and vals frames of ``chunks`` each fill their stream exactly (:func:`frame_fills`)."""
    for k in range(chunks.shape[0]):
        c = chunks[k]
        for off_col, len_col in ((GAPS_OFF, GAPS_LEN), (VALS_OFF, VALS_LEN)):
            if not frame_fills(blob, np.int64(table[c, off_col]), np.int64(table[c, len_col])):
                return False
    return True


@kernel
def decode_chunk_run(  # pragma: no cover
    streams: NDArray[np.uint8],
    table: NDArray[np.uint64],
    chunks: NDArray[np.int64],
    chunk_tiles: NDArray[np.int64],
    indptr: NDArray[np.int64],
    indptr_starts: NDArray[np.int64],
    out_starts: NDArray[np.int64],
    n_genes: int,
    out_indices: NDArray[np.int32],
    out_data: NDArray[Any],
    columns: NDArray[np.int32] | None,
    sort: bool,
) -> tuple[int, int, int]:
    """Decode chunks of one or more tiles whose gaps and vals streams are decompressed side by side in ``streams``.

    ``table`` holds the tiles' chunk tables one after the other, ``indptr`` their row pointers: tile ``t``'s are
    ``indptr[indptr_starts[t] : indptr_starts[t + 1]]``, and its nonzeros go from ``out_starts[t]`` in the
    output arrays. Chunk ``chunks[k]`` (a row of ``table``, of tile ``chunk_tiles[k]``, without exception
    frames) has its ``n`` nonzeros' gaps (``2 * n`` bytes) then vals (``2 * n`` bytes) after those of
    ``chunks[:k]``; it is decoded as :func:`decode_chunk` decodes it, into its tile's
    ``[nnz_lo, nnz_hi)``, its genes mapped through ``columns`` and, with ``sort``, the rows then sorted
    (:func:`sort_rows`), once for each run of consecutive chunks of a tile (the sort's set-up costs more than
    a small chunk's rows). One call for the small chunks of a tile, or of many tiles, which one call each
    would cost more to make than to decode. Returns ``(code, k, position)``: the first chunk (``k``, its place
    in ``chunks``) whose decoding found a problem, or ``OK``.
    """
    start = 0
    run_tile, run_first, run_end, run_lo = -1, 0, 0, 0  # the rows decoded and not sorted yet: one tile's
    for k in range(chunks.shape[0]):
        c, t = chunks[k], int(chunk_tiles[k])
        # Signed (int64) numbers: a uint64 with an int64 would make a float. int() leaves numba's type as it is.
        cell_lo, cell_hi = int(np.int64(table[c, CELL_LO])), int(np.int64(table[c, CELL_HI]))
        lo, hi = int(np.int64(table[c, NNZ_LO])), int(np.int64(table[c, NNZ_HI]))
        n = hi - lo
        first = out_starts[t] + lo
        code, position = decode_chunk(
            streams[start : start + 2 * n],
            streams[start + 2 * n : start + 4 * n],
            indptr[indptr_starts[t] : indptr_starts[t + 1]],
            cell_lo,
            cell_hi,
            lo,
            n_genes,
            out_indices[first : first + n],
            out_data[first : first + n],
            columns,
        )
        if code != OK:
            return code, k, position
        start += 4 * n
        if columns is not None and sort:
            if t != run_tile or cell_lo != run_end:  # not next to the rows pending: sort those first
                _sort_run(
                    indptr,
                    indptr_starts,
                    out_starts,
                    run_tile,
                    run_first,
                    run_end,
                    run_lo,
                    out_indices,
                    out_data,
                    columns,
                )
                run_tile, run_first, run_lo = t, cell_lo, lo
            run_end = cell_hi
    if columns is not None and sort:
        _sort_run(
            indptr, indptr_starts, out_starts, run_tile, run_first, run_end, run_lo, out_indices, out_data, columns
        )
    return OK, 0, 0


@kernel
def _sort_run(  # pragma: no cover
    indptr: NDArray[np.int64],
    indptr_starts: NDArray[np.int64],
    out_starts: NDArray[np.int64],
    tile: int,
    first_row: int,
    end_row: int,
    nnz_lo: int,
    out_indices: NDArray[np.int32],
    out_data: NDArray[Any],
    columns: NDArray[np.int32],
) -> None:
    """Sort rows ``first_row .. end_row - 1`` of ``tile`` (see :func:`decode_chunk_run`); none when ``tile < 0``."""
    if tile < 0 or end_row <= first_row:
        return
    tile_indptr = indptr[indptr_starts[tile] : indptr_starts[tile + 1]]
    first = out_starts[tile] + nnz_lo
    n = tile_indptr[end_row] - nnz_lo
    indices, data = out_indices[first : first + n], out_data[first : first + n]
    sort_rows(tile_indptr, first_row, end_row, nnz_lo, indices, data, columns.shape[0])
