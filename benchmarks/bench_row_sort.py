"""Sorting each row's columns once mapped to the original gene order: deltacells' radix kernel against scipy's.

Rows read in the genes' original order have their stored columns mapped through the gene order, which leaves
each row's columns out of order; a canonical CSR sorts them. deltacells does it with a radix sort per row
(``deltacells.codec._kernels.sort_rows``, 8 bits of the column a pass); scipy's ``sort_indices`` is the
reference (a comparison sort per row, in C++). Both sort the same rows, in place, from the same unsorted
copy; the best of ``--repeat`` runs is kept, in nanoseconds per nonzero.

Data: ``--rows`` rows of ``--nnz`` distinct columns among ``--genes`` (defaults: 368 of 19,465, the Visium
matrix's), each row's columns drawn at random then mapped through a random permutation, as a chunk's rows
are. Usage::

    python benchmarks/bench_row_sort.py            # about ten seconds
    python benchmarks/bench_row_sort.py --quick    # CI: a smaller matrix, one run
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import sparse

from deltacells.codec._kernels import sort_rows


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--nnz", type=int, default=368)
    parser.add_argument("--genes", type=int, default=19_465)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
