"""Sorting each row's columns once mapped to the original gene order: deltacells' radix kernel against scipy's.

Rows read in the genes' original order have their stored columns mapped through the gene order, which leaves
each row's columns out of order; a canonical CSR sorts them. deltacells does it with a radix sort per row
(``deltacells.codec._kernels.sort_rows``, 8 bits of the column a pass); scipy's ``sort_indices`` is the
reference (a comparison sort per row, in C++). Both sort the same rows, in place, from the same unsorted
copy; the best of ``--repeat`` runs is kept, in nanoseconds per nonzero.

Data: ``--rows`` rows of ``--nnz`` distinct columns among ``--genes`` (defaults: 368 of 19,465, the Visium
matrix's), each row's columns drawn at random then mapped through a random permutation, as a chunk's rows
are. With ``--classes``, the two ways ``sort_rows`` can sort a row are timed apart, each forced on every row: the
radix sort and the bitmap, on the real rows of the Visium matrix (``--visium``, its columns mapped through a
random permutation, rows grouped by length), then on synthetic rows of 256 to 60,000 columns at densities of
1/64 to 3/4. The cost model that picks one per row (``deltacells.codec._kernels.bitmap_sorts``) is fitted to
these figures. Usage::

    python benchmarks/bench_row_sort.py --json docs/_data/row-sort.json   # about ten seconds
    python benchmarks/bench_row_sort.py --classes  # about half a minute
    python benchmarks/bench_row_sort.py --quick    # CI: a smaller matrix, one run (and the classes, briefly)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numba
import numpy as np
from _record import now, write_json
from scipy import sparse

from deltacells.codec import _kernels
from deltacells.codec._kernels import sort_rows

try:
    from _visium import VISIUM
except ImportError:  # run from elsewhere than benchmarks/
    VISIUM = None


def unsorted_rows(n_rows: int, nnz: int, n_genes: int, seed: int) -> sparse.csr_matrix:
    """Rows of ``nnz`` distinct columns each, sorted, then mapped through a random permutation of the genes."""
    rng = np.random.default_rng(seed)
    columns = np.argsort(rng.random((n_rows, n_genes)), axis=1)[:, :nnz]  # distinct columns per row
    columns.sort(axis=1)
    order = rng.permutation(n_genes).astype(np.int32)
    indices = order[columns].ravel()
    indptr = np.arange(n_rows + 1, dtype=np.int64) * nnz
    data = rng.integers(1, 100, size=indices.shape[0]).astype(np.float32)
    matrix = sparse.csr_matrix((data, indices, indptr.astype(np.int32)), shape=(n_rows, n_genes))
    matrix.has_sorted_indices = False
    return matrix


def best_of(repeat: int, make: callable, run: callable) -> float:
    """The fastest of ``repeat`` runs of ``run`` on a fresh copy from ``make`` (the copy not timed)."""
    best = float("inf")
    for _ in range(repeat):
        matrix = make()
        began = time.perf_counter()
        run(matrix)
        best = min(best, time.perf_counter() - began)
    return best


@numba.njit(nogil=True, boundscheck=False)
def _sort_forced(indptr, rows, indices, data, n_columns, bitmap):  # pragma: no cover
    """Sort ``rows`` the one way asked: all through the bitmap, or all by radix."""
    n_passes = _kernels.radix_passes(n_columns)
    top = _kernels.radix_top(n_columns, n_passes)
    words = np.zeros((n_columns + 63) >> 6, dtype=np.uint64)
    values = np.empty(n_columns, dtype=data.dtype)
    longest = 0
    for r in rows:
        longest = max(longest, indptr[r + 1] - indptr[r])
    scratch = _kernels.radix_scratch(longest, indices, data)
    counts = np.zeros((n_passes, 256), dtype=np.uint64)
    for r in rows:
        lo = indptr[r]
        n = indptr[r + 1] - lo
        if n < 2:
            continue
        if bitmap:
            _kernels._sort_row_bitmap(indices, data, lo, n, words, values, n_columns)
            continue
        row_indices, row_data = indices[lo : lo + n], data[lo : lo + n]
        if _kernels.radix_offsets(row_indices, counts, n_passes, top):
            continue
        if n_passes == 1:
            out_indices, out_data = _kernels.radix_sorted_scratch(row_indices, row_data, scratch, counts, 1)
            row_indices[:] = out_indices
            row_data[:] = out_data
        else:
            _kernels.radix_scatter(row_indices, row_data, scratch, row_indices, row_data, counts, n_passes)


def _forced_ns(matrix: sparse.csr_matrix, rows: np.ndarray, bitmap: bool, repeat: int) -> float:
    indptr = matrix.indptr.astype(np.int64)
    nnz = int((indptr[rows + 1] - indptr[rows]).sum())
    best = float("inf")
    for _ in range(repeat):
        indices, data = matrix.indices.copy(), matrix.data.copy()
        began = time.perf_counter()
        _sort_forced(indptr, rows, indices, data, matrix.shape[1], bitmap)
        best = min(best, time.perf_counter() - began)
    return best / max(nnz, 1) * 1e9


def classes(repeat: int, quick: bool) -> None:
    """Time the radix sort and the bitmap apart, by row length (Visium) and by matrix width and density."""
    if VISIUM is not None and (VISIUM / "matrix.mtx.gz").exists() and not quick:
        from scipy import io

        counts = sparse.csr_matrix(io.mmread(VISIUM / "matrix.mtx.gz").T)
        counts.sort_indices()
        order = np.random.default_rng(0).permutation(counts.shape[1]).astype(np.int32)
        mapped = sparse.csr_matrix(
            (counts.data.astype(np.float32), order[counts.indices], counts.indptr), shape=counts.shape
        )
        lengths = np.diff(mapped.indptr)
        every = np.arange(mapped.shape[0])
        _forced_ns(mapped, every[:8], True, 1)
        _forced_ns(mapped, every[:8], False, 1)  # compiled before timing
        print(f"Visium rows ({mapped.shape[1]:,} columns), by length: ns a nonzero")
        print(f"  {'nonzeros':>14} {'share':>6} {'radix':>7} {'bitmap':>7}")
        for lo, hi in ((0, 64), (64, 128), (128, 256), (256, 512), (512, 1217), (1217, 10**9)):
            rows = every[(lengths >= lo) & (lengths < hi)]
            share = lengths[rows].sum() / lengths.sum()
            radix, bitmap = _forced_ns(mapped, rows, False, repeat), _forced_ns(mapped, rows, True, repeat)
            print(f"  {f'{lo}-{hi - 1}' if hi < 10**9 else f'{lo}+':>14} {share:6.2f} {radix:7.2f} {bitmap:7.2f}")
        print(
            f"  {'all rows':>14} {1:6.2f} {_forced_ns(mapped, every, False, repeat):7.2f} "
            f"{_forced_ns(mapped, every, True, repeat):7.2f}"
        )
    print("synthetic rows: ns a nonzero")
    print(f"  {'columns':>8} {'density':>8} {'nonzeros':>9} {'radix':>7} {'bitmap':>7}")
    rng = np.random.default_rng(1)
    tiny = sparse.csr_matrix(np.eye(4, dtype=np.float32)[::-1])
    for bitmap in (True, False):
        _forced_ns(tiny, np.arange(4), bitmap, 1)  # compiled before timing
    widths = (256, 1000) if quick else (256, 1000, 2000, 19_465, 60_000)
    for n_columns in widths:
        for density in (1 / 64, 1 / 16, 1 / 4, 1 / 2, 3 / 4):
            n = max(2, int(n_columns * density))
            n_rows = max(4, (20_000 if quick else 400_000) // n)
            columns = np.argsort(rng.random((n_rows, n_columns)), axis=1)[:, :n].astype(np.int32)
            indptr = (np.arange(n_rows + 1) * n).astype(np.int64)
            data = rng.random(columns.size).astype(np.float32)
            matrix = sparse.csr_matrix((data, columns.ravel(), indptr), shape=(n_rows, n_columns))
            rows = np.arange(n_rows)
            radix, bitmap = _forced_ns(matrix, rows, False, repeat), _forced_ns(matrix, rows, True, repeat)
            print(f"  {n_columns:8,} {density:8.3f} {n:9,} {radix:7.2f} {bitmap:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--nnz", type=int, default=368)
    parser.add_argument("--genes", type=int, default=19_465)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--classes", action="store_true", help="time the radix sort and the bitmap apart")
    parser.add_argument("--json", type=Path, help="write the figures here (docs/_data/row-sort.json)")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.rows, args.repeat = 512, 1
    source = unsorted_rows(args.rows, args.nnz, args.genes, args.seed)
    expected = source.copy()
    expected.sort_indices()
    check = source.copy()
    indptr64 = check.indptr.astype(np.int64)
    sort_rows(indptr64, 0, args.rows, 0, check.indices, check.data, args.genes)  # compiled before timing
    assert np.array_equal(check.indices, expected.indices) and np.array_equal(check.data, expected.data)

    def ours(matrix: sparse.csr_matrix) -> None:
        sort_rows(indptr64, 0, args.rows, 0, matrix.indices, matrix.data, args.genes)

    def scipy_sort(matrix: sparse.csr_matrix) -> None:
        matrix.has_sorted_indices = False
        matrix.sort_indices()

    nnz = source.nnz
    radix = best_of(args.repeat, source.copy, ours)
    reference = best_of(args.repeat, source.copy, scipy_sort)
    print(f"{args.rows:,} rows of {args.nnz} columns among {args.genes:,}: {nnz:,} nonzeros, best of {args.repeat}")
    print(f"  deltacells sort_rows           {radix / nnz * 1e9:6.2f} ns a nonzero")
    print(f"  scipy sort_indices             {reference / nnz * 1e9:6.2f} ns a nonzero")
    print(f"  ratio                          {reference / radix:6.2f}x")
    doc = {
        "rows": args.rows,
        "nnz_per_row": args.nnz,
        "n_columns": args.genes,
        "repeat": args.repeat,
        "deltacells_ns_per_nnz": radix / nnz * 1e9,
        "scipy_ns_per_nnz": reference / nnz * 1e9,
    }
    write_json(args.json, doc, started=started, quick=args.quick)
    if args.classes or args.quick:
        print()
        classes(args.repeat, args.quick)


if __name__ == "__main__":
    main()
