"""Growing a dataset: appends of ``--batch`` cells to a ``--base``-cell dataset, against rewriting it each time.

The cells are resampled from the real Visium CytAssist matrix (19,465 genes), with obs (a categorical batch
label that gains a category each time, a float, the cell names). ``--appends`` times (default 10):

* **append**: ``write_deltacells(batch, path, append=True)``: the commit protocol of DECISIONS.md 17 (staging,
  conditional manifest, moves), whose cost should not grow with the dataset;
* **rewrite**: ``write_deltacells(concatenation so far, other_path, overwrite=True)`` from memory (what growing a
  dataset costs without appends: everything is encoded again).

Both datasets are read back at the end and compared (same counts, same obs names). Nothing is asserted.
Defaults: a 1,000,000-cell dataset and 10 batches of 50,000 cells; ``--quick`` (CI): 20,000 and 5 x 2,000.

Usage::

    python benchmarks/bench_append.py --json out.json
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import io as sio
from scipy import sparse

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _record import now, write_json  # noqa: E402
from _visium import VISIUM, resampled_rows  # noqa: E402


def cells(matrix: sparse.csr_matrix, genes: np.ndarray, start: int, n: int, label: str) -> Any:
    """``n`` cells resampled from the Visium spots, named ``cell<start>``..., obs with a batch label and a float."""
    import anndata as ad
    import pandas as pd

    rows = resampled_rows(matrix.shape[0], n, seed=start)
    counts = matrix[rows]
    obs = pd.DataFrame(
        {"batch": pd.Categorical([label] * n), "total": np.asarray(counts.sum(axis=1)).ravel().astype(np.float32)},
        index=[f"cell{start + i}" for i in range(n)],
    )
    return ad.AnnData(X=counts, obs=obs, var=pd.DataFrame(index=genes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--appends", type=int, default=10)
    parser.add_argument("--no-rewrite", action="store_true", help="time the appends only")
    parser.add_argument("--quick", action="store_true", help="20,000 cells and 5 appends of 2,000 (CI)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.base, args.batch, args.appends = 20_000, 2_000, 5

    import anndata as ad
    import pandas as pd

    import deltacells

    matrix = sparse.csr_matrix(sio.mmread(VISIUM / "matrix.mtx.gz").T.astype(np.int32))
    genes = pd.read_csv(VISIUM / "features.tsv.gz", sep="\t", header=None)[0].to_numpy().astype(str)
    genes = pd.Index(genes).where(~pd.Index(genes).duplicated(), pd.Index(genes) + "-dup").to_numpy()
    with tempfile.TemporaryDirectory(prefix="bench-append-") as tmp:
        grown, rewritten = Path(tmp) / "grown", Path(tmp) / "rewritten"
        parts = [cells(matrix, genes, 0, args.base, "b0")]
        t0 = time.perf_counter()
        deltacells.write_deltacells(parts[0], grown, progress=False)
        base_seconds = time.perf_counter() - t0
        print(f"base: {args.base:,} cells written in {base_seconds:.2f} s")
        rows = []
        for i in range(1, args.appends + 1):
            start = args.base + (i - 1) * args.batch
            part = cells(matrix, genes, start, args.batch, f"b{i}")
            parts.append(part)
            t0 = time.perf_counter()
            deltacells.write_deltacells(part, grown, append=True, progress=False)
            append_seconds = time.perf_counter() - t0
            rewrite_seconds = None
            if not args.no_rewrite:
                whole = ad.concat(parts)
                t0 = time.perf_counter()
                deltacells.write_deltacells(whole, rewritten, overwrite=True, progress=False)
                rewrite_seconds = time.perf_counter() - t0
                del whole
            n_cells = args.base + i * args.batch
            rows.append({"append": i, "n_cells": n_cells, "append_s": append_seconds, "rewrite_s": rewrite_seconds})
            rewrite = f"{rewrite_seconds:7.2f} s" if rewrite_seconds is not None else "      -"
            print(f"append {i:2d}: dataset {n_cells:>10,} cells   append {append_seconds:6.2f} s   rewrite {rewrite}")
        got = deltacells.read_deltacells(grown)
        assert got.n_obs == args.base + args.appends * args.batch
        if not args.no_rewrite:
            other = deltacells.read_deltacells(rewritten)
            assert list(other.obs_names) == list(got.obs_names)
            check = np.random.default_rng(0).choice(got.n_obs, 2000, replace=False)
            check.sort()
            a = got[check].X
            b = other[check].X
            a = a if sparse.issparse(a) else a[np.arange(len(check))]
            assert (abs(sparse.csr_matrix(a) - sparse.csr_matrix(b)).sum()) == 0
        size = sum(f.stat().st_size for f in grown.rglob("*") if f.is_file())
    appends = [r["append_s"] for r in rows]
    summary = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "data": "Visium CytAssist resampled (19,465 genes)",
        "base_cells": args.base,
        "batch_cells": args.batch,
        "base_write_s": base_seconds,
        "appends": rows,
        "append_first_s": appends[0],
        "append_last_s": appends[-1],
        "append_median_s": float(np.median(appends)),
        "grown_bytes": size,
    }
    print(f"append median {summary['append_median_s']:.2f} s (first {appends[0]:.2f}, last {appends[-1]:.2f})")
    write_json(args.json, summary, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
