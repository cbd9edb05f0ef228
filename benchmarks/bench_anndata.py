"""deltacells as an AnnData backend: open cost, random subsets, converter throughput and memory.

Figures from one run on one machine; each number is printed beside its comparison:

1. opening a large dataset (default 2,000,000 cells) without obs: time and memory;
2. ``adata[random 1% of cells].X`` against the same on a backed h5ad (gzip), with tiles decoded;
3. converting a backed h5ad (default 500,000 cells) with ``write_deltacells``: cells/s and peak RSS.

Usage::

    python benchmarks/bench_anndata.py [--open-cells 2000000] [--convert-cells 500000] [--workdir DIR]
    python benchmarks/bench_anndata.py --json docs/_data/anndata.json   # the documentation's figures
    python benchmarks/bench_anndata.py --quick                          # 100,000 and 50,000 cells (CI)

A ``--quick`` run never writes into ``docs/_data`` (``_record.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _record import now, write_json
from scipy import sparse

BLOCK_CELLS = 25_000


def child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line. Adds the child's peak RSS (MB)."""
    # VmHWM (not ru_maxrss, which keeps the forking parent's high-water mark across exec).
    wrapper = (
        "import json\n"
        f"{code}\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "result['peak_rss_mb'] = int(hwm) / 1024\n"
        "print(json.dumps(result))\n"
    )
    out = subprocess.run([sys.executable, "-c", wrapper], check=False, capture_output=True, text=True)
    if out.returncode:
        msg = f"a measure failed (exit {out.returncode}):\n{out.stderr.strip()}"
        raise RuntimeError(msg)
    return json.loads(out.stdout.strip().splitlines()[-1])


def synthetic_blocks(n_cells: int, n_genes: int):
    """Blocks of a synthetic count matrix: one generated block, repeated (tiles are smaller than a block)."""
    from deltacells.datasets import synthetic_counts

    base = synthetic_counts(BLOCK_CELLS, n_genes, seed=1)
    for lo in range(0, n_cells, BLOCK_CELLS):
        yield base.X[: min(BLOCK_CELLS, n_cells - lo)], base.obs.iloc[: min(BLOCK_CELLS, n_cells - lo)]


def bench_open(workdir: Path, n_cells: int, n_genes: int) -> dict[str, Any]:
    import deltacells as dc

    path = workdir / "open.deltacells"
    if not (path / "manifest.json").exists():
        t0 = time.perf_counter()
        with dc.DatasetWriter(path, n_genes, level=3, overwrite=True) as writer:
            for block, _ in synthetic_blocks(n_cells, n_genes):
                writer.write(block)
        print(f"  (wrote {n_cells:,} cells at level 3 in {time.perf_counter() - t0:.0f} s)")
    base = child("import deltacells, anndata\nresult = {}")
    opened = child(
        "import time, anndata, deltacells\n"
        f"deltacells.open_dataset({str(path)!r})\n"  # the modules deltacells loads on first use, loaded
        "t0 = time.perf_counter()\n"
        f"ds = deltacells.open_dataset({str(path)!r})\n"
        "t1 = time.perf_counter()\n"
        f"adata = deltacells.read_deltacells({str(path)!r}, obs_columns=[], obs_names=False)\n"
        "t2 = time.perf_counter()\n"
        "ds = adata.X.dataset\n"
        "result = {'manifest_s': t1 - t0, 'open_s': t2 - t1, 'n_obs': adata.n_obs, 'tiles': ds.n_tiles, "
        "'decoded': ds.tiles_decoded}\n"
    )
    print(
        f"1. open {opened['n_obs']:,} cells ({opened['tiles']:,} tiles), no obs: read_deltacells "
        f"{opened['open_s'] * 1e3:.0f} ms (open_dataset alone: {opened['manifest_s'] * 1e3:.0f} ms; the rest is "
        f"AnnData's string obs_names), peak RSS {opened['peak_rss_mb']:.0f} MB vs {base['peak_rss_mb']:.0f} MB "
        f"after imports alone (+{opened['peak_rss_mb'] - base['peak_rss_mb']:.0f} MB), tiles decoded: "
        f"{opened['decoded']}"
    )
    return {
        "n_cells": opened["n_obs"],
        "n_tiles": opened["tiles"],
        "zstd_level": 3,
        "read_deltacells_ms": round(opened["open_s"] * 1e3),
        "open_dataset_ms": round(opened["manifest_s"] * 1e3, 1),
        "extra_rss_mb": round(opened["peak_rss_mb"] - base["peak_rss_mb"]),
        "tiles_decoded": opened["decoded"],
        "note": "obs_columns=[], obs_names=False; most of the time is AnnData building its string obs_names",
    }


def bench_convert_and_subset(workdir: Path, n_cells: int, n_genes: int) -> dict[str, Any]:
    import anndata as ad
    import pandas as pd

    h5ad = workdir / f"convert_{n_cells}.h5ad"
    if not h5ad.exists():
        t0 = time.perf_counter()
        blocks = list(synthetic_blocks(n_cells, n_genes))
        X = sparse.vstack([b for b, _ in blocks], format="csr")
        obs = pd.concat([o for _, o in blocks])
        obs.index = [f"cell_{i}" for i in range(n_cells)]
        adata = ad.AnnData(X=X.astype(np.float32), obs=obs)
        adata.var_names = [f"gene_{i}" for i in range(n_genes)]
        adata.write_h5ad(h5ad, compression="gzip")
        del adata, X, blocks
        print(f"  (wrote the h5ad, gzip, {h5ad.stat().st_size / 1e6:.0f} MB, in {time.perf_counter() - t0:.0f} s)")
    out = workdir / "converted.deltacells"
    conv = child(
        "import time, anndata, deltacells\n"
        f"adata = anndata.read_h5ad({str(h5ad)!r}, backed='r')\n"
        "t0 = time.perf_counter()\n"
        f"deltacells.write_deltacells(adata, {str(out)!r}, overwrite=True, progress=False)\n"
        "result = {'seconds': time.perf_counter() - t0, 'nnz': int(adata.X.group['data'].shape[0])}\n"
    )
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(
        f"3. convert backed h5ad ({n_cells:,} cells, {conv['nnz']:,} nonzeros, {h5ad.stat().st_size / 1e6:.0f} MB) "
        f"-> {size / 1e6:.0f} MB: {n_cells / conv['seconds']:,.0f} cells/s ({conv['seconds']:.0f} s, the default "
        f"level, 2 passes), peak RSS {conv['peak_rss_mb']:.0f} MB"
    )
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(n_cells, size=n_cells // 100, replace=False))
    np.save(workdir / "idx.npy", idx)
    ours = child(
        "import time, numpy as np, deltacells\n"
        f"idx = np.load({str(workdir / 'idx.npy')!r})\n"
        f"adata = deltacells.read_deltacells({str(out)!r}, obs_columns=[], cache_dir={str(workdir / 'cache')!r})\n"
        "adata.X[:1]\n"
        "adata.X.dataset.cache.clear(); before = adata.X.dataset.tiles_decoded\n"
        "t0 = time.perf_counter(); X = adata[idx].X; t = time.perf_counter() - t0\n"
        "result = {'seconds': t, 'nnz': int(X.nnz), 'tiles': adata.X.dataset.tiles_decoded - before, "
        "'n_tiles': adata.X.dataset.n_tiles}\n"
    )
    theirs = child(
        "import time, numpy as np, anndata\n"
        f"idx = np.load({str(workdir / 'idx.npy')!r})\n"
        f"adata = anndata.read_h5ad({str(h5ad)!r}, backed='r')\n"
        "t0 = time.perf_counter(); X = adata[idx].X; t = time.perf_counter() - t0\n"
        "result = {'seconds': t, 'nnz': int(X.nnz)}\n"
    )
    assert ours["nnz"] == theirs["nnz"], (ours, theirs)
    print(
        f"2. adata[random 1% = {idx.size:,} cells].X: deltacells {ours['seconds'] * 1e3:.0f} ms "
        f"({ours['tiles']} of {ours['n_tiles']} tiles decoded), backed h5ad gzip {theirs['seconds'] * 1e3:.0f} ms "
        f"-> {theirs['seconds'] / ours['seconds']:.1f}x faster"
    )
    import deltacells

    level = deltacells.open_dataset(out).manifest.to_dict().get("zstd_level")
    return {
        "random_subset": {
            "n_cells": n_cells,
            "selected": int(idx.size),
            "tiles_decoded": ours["tiles"],
            "n_tiles": ours["n_tiles"],
            "deltacells_ms": round(ours["seconds"] * 1e3),
            "backed_h5ad_gzip_ms": round(theirs["seconds"] * 1e3),
        },
        "convert": {
            "n_cells": n_cells,
            "nnz": conv["nnz"],
            "h5ad_gzip_mb": round(h5ad.stat().st_size / 1e6),
            "deltacells_mb": round(size / 1e6),
            "cells_per_s": round(n_cells / conv["seconds"]),
            "seconds": round(conv["seconds"], 1),
            "zstd_level": level,
            "passes": 2,
            "peak_rss_mb": round(conv["peak_rss_mb"]),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--open-cells", type=int, default=2_000_000)
    parser.add_argument("--convert-cells", type=int, default=500_000)
    parser.add_argument("--genes", type=int, default=2_000)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the data here between runs")
    parser.add_argument("--quick", action="store_true", help="100,000 cells opened, 50,000 converted (CI)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    started = now()
    if args.quick:
        args.open_cells, args.convert_cells = 100_000, 50_000
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        opened = bench_open(workdir, args.open_cells, args.genes)
        rest = bench_convert_and_subset(workdir, args.convert_cells, args.genes)
    doc = {
        "benchmark": "bench_anndata",
        "data": f"synthetic counts (deltacells.datasets.synthetic_counts, {args.genes:,} genes), blocks of "
        f"{BLOCK_CELLS:,} generated cells repeated",
        "open": opened,
        **rest,
    }
    write_json(args.json, doc, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
