"""The end-to-end demo behind ``deltacells demo``: generate, write, read back, check, report."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from deltacells.dataset import TileWriter, open_dataset
from deltacells.datasets import synthetic_counts


def run_demo(
    *,
    n_cells: int = 10_000,
    n_genes: int = 6_000,
    tile_size: int = 2048,
    out: str | Path | None = None,
    seed: int = 0,
    echo: Callable[[str], None] = print,
) -> dict[str, float]:
    """Generate a synthetic count matrix, write it as a dataset, read it back and report.

    Parameters
    ----------
    n_cells, n_genes
        Size of the generated matrix.
    tile_size
        Cells per tile.
    out
        Where to write the dataset (a temporary directory, removed afterwards, if None).
    seed
        Seed of the generator.
    echo
        Where the report goes, line by line.

    Returns
    -------
    dict
        The figures that were reported (sizes, times, throughputs).
    """
    with tempfile.TemporaryDirectory(prefix="deltacells-demo-") as tmp:
        path = Path(out) if out is not None else Path(tmp) / "demo.deltacells"
        t0 = time.perf_counter()
        adata = synthetic_counts(n_cells, n_genes, seed=seed)
        t_gen = time.perf_counter() - t0
        X = adata.X
        echo(f"generated   {n_cells:,} cells x {n_genes:,} genes, {X.nnz:,} nonzeros ({t_gen:.1f} s)")

        totals = np.asarray(X.sum(axis=0)).ravel()
        gene_order = np.argsort(-totals, kind="stable")
        t0 = time.perf_counter()
        metadata = {"source": "deltacells demo", "seed": seed}
        options = {"tile_size": tile_size, "gene_order": gene_order, "var_names": adata.var_names}
        with TileWriter(path, n_genes, overwrite=out is not None, metadata=metadata, **options) as writer:
            for lo in range(0, n_cells, 10_000):
                writer.write(X[lo : lo + 10_000])
        t_write = time.perf_counter() - t0
        manifest = writer.manifest
        assert manifest is not None
        stored = int(manifest.tile_bytes.sum())
        raw = X.nnz * 8 + (n_cells + 1) * 8
        echo(
            f"wrote       {manifest.n_tiles} tiles to {path}: {stored / 1e6:.2f} MB, "
            f"{stored / max(X.nnz, 1):.2f} bytes "
            f"per nonzero ({raw / max(stored, 1):.1f}x smaller than int32 CSR), {n_cells / t_write:,.0f} cells/s"
        )

        dataset = open_dataset(path, tile_cache_bytes=0)
        t0 = time.perf_counter()
        dataset.read_rows(slice(0, 1))  # the first read loads the compiled numba kernels
        t_warm = time.perf_counter() - t0
        echo(f"warm-up     first read of one cell (loads the compiled kernels): {t_warm * 1e3:.0f} ms")
        dataset.tiles_decoded = 0
        t0 = time.perf_counter()
        back = dataset.read_rows(dtype=np.int32)
        t_read = time.perf_counter() - t0
        expected = X[:, gene_order]
        same = back.shape == expected.shape and (back != expected).nnz == 0
        echo(
            f"read all    {dataset.tiles_decoded} tiles in {t_read * 1e3:.0f} ms "
            f"({X.nnz / t_read / 1e6:,.0f} M nonzeros/s); identical to the source: {same}"
        )

        rng = np.random.default_rng(seed)
        cells = np.sort(rng.choice(n_cells, size=max(1, n_cells // 100), replace=False))
        before = dataset.tiles_decoded
        t0 = time.perf_counter()
        subset = dataset.read_rows(cells, dtype=np.int32)
        t_subset = time.perf_counter() - t0
        same_subset = (subset != expected[cells]).nnz == 0
        echo(
            f"read 1%     {cells.size:,} random cells from {dataset.tiles_decoded - before} tiles in "
            f"{t_subset * 1e3:.0f} ms; identical: {same_subset}"
        )
        if not (same and same_subset):
            msg = "the data read back differs from what was written"
            raise RuntimeError(msg)
        return {
            "n_cells": n_cells,
            "n_genes": n_genes,
            "nnz": X.nnz,
            "bytes": stored,
            "bytes_per_nnz": stored / max(X.nnz, 1),
            "write_cells_per_s": n_cells / t_write,
            "read_nnz_per_s": X.nnz / t_read,
        }
