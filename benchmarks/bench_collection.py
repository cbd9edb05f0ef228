"""Many datasets read as one: a collection against ``anndata``'s ways and against one merged dataset.

``--datasets`` datasets (default 20) of ``--cells`` cells each (default 50,000) resampled from the real Visium
CytAssist matrix, each with the genes of a common core (90% of them, drawn once) and a random half of the
others (so that two datasets' gene sets differ by about 10%), written as deltacells datasets and as h5ad files.
Then, in one run on one machine, with the inner join of the genes:

* **collection**: ``read_deltacells([paths...])`` (opening), the whole matrix into memory, a random 1% of the
  cells, and one epoch of ``CellLoader([paths...])`` (batches of 256, scipy output);
* **merged**: the same on one deltacells dataset written from the collection (``write_deltacells``);
* **anndata**: ``anndata.concat`` of the h5ad files read into memory (the whole matrix: what concat needs),
  and ``anndata.experimental.AnnCollection`` of the same files opened backed (``join_vars="inner"``) for the
  random 1% and a shuffled epoch (``iterate_axis(256, shuffle=True)``).

Each read is checked against the others (same nonzeros). Nothing is asserted. ``--quick`` (CI): 3 datasets of
3,000 cells.

Usage::

    python benchmarks/bench_collection.py --json out.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy import io as sio
from scipy import sparse

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _record import now, write_json  # noqa: E402
from _visium import VISIUM, resampled_rows  # noqa: E402


def load_visium(folder: Path) -> tuple[sparse.csr_matrix, np.ndarray]:
    """The Visium counts (spots x genes, CSR) and gene ids."""
    import pandas as pd

    matrix = sparse.csr_matrix(sio.mmread(folder / "matrix.mtx.gz").T.astype(np.int32))
    genes = pd.read_csv(folder / "features.tsv.gz", sep="\t", header=None)[0].to_numpy().astype(str)
    return matrix, genes


def build(matrix: sparse.csr_matrix, genes: np.ndarray, n_datasets: int, n_cells: int, workdir: Path) -> list[Any]:
    """The studies: resampled cells, the core genes and half the others each; as datasets and h5ad files."""
    import anndata as ad

    import deltacells

    rng = np.random.default_rng(0)
    core = rng.random(genes.shape[0]) < 0.9
    studies = []
    for k in range(n_datasets):
        rows = resampled_rows(matrix.shape[0], n_cells, seed=k)
        kept = np.flatnonzero(core | (rng.random(genes.shape[0]) < 0.5))
        adata = ad.AnnData(matrix[rows][:, kept].astype(np.float32))
        adata.var_names = genes[kept]
        adata.obs_names = [f"s{k}-{i}" for i in range(n_cells)]
        path = workdir / f"study{k:02d}.deltacells"
        deltacells.write_deltacells(adata, path, progress=False)
        adata.write_h5ad(workdir / f"study{k:02d}.h5ad")
        studies.append((path, workdir / f"study{k:02d}.h5ad"))
    return studies


def _timed(run: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def _epoch(loader: Any) -> int:
    return sum(len(batch) for batch in loader)


def measure(studies: list[Any], workdir: Path) -> dict[str, Any]:
    import anndata as ad
    from anndata.experimental import AnnCollection

    import deltacells

    paths = [path for path, _ in studies]
    h5ads = [h5ad for _, h5ad in studies]
    cache = workdir / "cache"
    result: dict[str, Any] = {}

    warm = deltacells.read_deltacells(paths[:2], cache_dir=cache, obs_columns=[])  # numba's kernels loaded first
    warm.X[:: max(1, warm.n_obs // 50)]
    warm.X[:]
    next(iter(deltacells.CellLoader(paths[:2], batch_size=256, cache_dir=cache)))
    open_s, collection = _timed(lambda: deltacells.read_deltacells(paths, cache_dir=cache, obs_columns=[]))
    n = collection.n_obs
    subset = np.sort(np.random.default_rng(1).choice(n, max(1, n // 100), replace=False))
    full_s, full = _timed(lambda: collection.X[:])
    subset_s, part = _timed(lambda: collection.X[subset])
    loader = deltacells.CellLoader(paths, batch_size=256, cache_dir=cache)
    epoch_s, cells = _timed(lambda: _epoch(loader))
    result["collection"] = {
        "open_s": open_s, "full_s": full_s, "subset_s": subset_s, "epoch_s": epoch_s, "epoch_cells": cells,
    }  # fmt: skip

    merged_path = workdir / "merged.deltacells"
    write_s, _ = _timed(lambda: deltacells.write_deltacells(collection, merged_path, progress=False))
    open_s, merged = _timed(lambda: deltacells.read_deltacells(merged_path, cache_dir=cache, obs_columns=[]))
    full_s, merged_full = _timed(lambda: merged.X[:])
    subset_s, merged_part = _timed(lambda: merged.X[subset])
    loader = deltacells.CellLoader(merged_path, batch_size=256, cache_dir=cache)
    epoch_s, cells = _timed(lambda: _epoch(loader))
    result["merged"] = {
        "write_s": write_s, "open_s": open_s, "full_s": full_s, "subset_s": subset_s, "epoch_s": epoch_s,
        "epoch_cells": cells,
    }  # fmt: skip
    assert (merged_full != full).nnz == 0 and (merged_part != part).nnz == 0
    del merged_full

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full_s, concatenated = _timed(lambda: ad.concat([ad.read_h5ad(h) for h in h5ads], join="inner"))
        open_s, backed = _timed(
            lambda: AnnCollection([ad.read_h5ad(h, backed="r") for h in h5ads], join_vars="inner", label="dataset")
        )
        subset_s, backed_part = _timed(lambda: backed[subset].to_adata().X)
        epoch_s, cells = _timed(lambda: sum(b.X.shape[0] for b, _ in backed.iterate_axis(256, shuffle=True)))
    same = list(concatenated.var_names) == list(collection.var_names)
    result["anndata"] = {
        "concat_full_s": full_s, "anncollection_open_s": open_s, "anncollection_subset_s": subset_s,
        "anncollection_epoch_s": epoch_s, "epoch_cells": cells,
        "same_genes": same,
        "same_values": same
        and (sparse.csr_matrix(concatenated.X) != full).nnz == 0
        and (sparse.csr_matrix(backed_part) != part).nnz == 0,
    }  # fmt: skip
    result["shape"] = [int(n), int(collection.n_vars)]
    result["nnz"] = int(full.nnz)
    result["subset_cells"] = int(subset.shape[0])
    return result


def machine() -> dict[str, Any]:
    return {"machine": f"{os.uname().machine}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"}


def print_table(result: dict[str, Any]) -> None:
    c, m, a = result["collection"], result["merged"], result["anndata"]
    print(f"{result['shape'][0]:,} cells x {result['shape'][1]:,} genes (inner join), {result['nnz']:,} nonzeros")
    print(f"{'':28} {'open':>8} {'full read':>10} {'1% cells':>10} {'epoch':>8}")
    for name, row in (("collection (deltacells)", c), ("one merged dataset", m)):
        print(f"{name:28} {row['open_s']:8.3f} {row['full_s']:10.2f} {row['subset_s']:10.3f} {row['epoch_s']:8.2f}")
    print(
        f"{'anndata (concat / AnnColl.)':28} {a['anncollection_open_s']:8.3f} {a['concat_full_s']:10.2f} "
        f"{a['anncollection_subset_s']:10.3f} {a['anncollection_epoch_s']:8.2f}"
    )
    print(f"epoch cells: {c['epoch_cells']:,} / {m['epoch_cells']:,} / {a['epoch_cells']:,}")
    print(f"same genes and values as anndata.concat: {a['same_values']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visium", type=Path, default=VISIUM)
    parser.add_argument("--datasets", type=int, default=20)
    parser.add_argument("--cells", type=int, default=50_000, help="cells per dataset")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="3 datasets of 3,000 cells (CI)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    started = now()
    if not (args.visium / "matrix.mtx.gz").exists():
        print(f"no Visium data at {args.visium}: skipped")
        return 0
    n_datasets, n_cells = (3, 3000) if args.quick else (args.datasets, args.cells)
    matrix, genes = load_visium(args.visium)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        workdir = Path(tmp)
        build_s, studies = _timed(lambda: build(matrix, genes, n_datasets, n_cells, workdir))
        result = {"benchmark": "bench_collection", "datasets": n_datasets, "cells_per_dataset": n_cells}
        result.update(machine())
        result["build_s"] = build_s
        result.update(measure(studies, workdir))
    print_table(result)
    write_json(args.json, result, started=started, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
