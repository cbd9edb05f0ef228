"""Decode speed of deltacells against its floor (zstd alone) and against anndata (h5ad, zarr).

All figures come from one run on one machine and are reported as ratios, so they can be
compared across machines. Usage::

    python benchmarks/bench_decode.py                 # synthetic data (100,000 x 10,000)
    python benchmarks/bench_decode.py --visium PATH   # the 10x matrix in ../shared/data
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import anndata as ad
import numpy as np
import zstandard
from scipy import sparse

import deltacells as dc
from deltacells.codec._layout import GAPS_LEN, GAPS_OFF, VALS_LEN, VALS_OFF, TileHeader, read_chunk_table
from deltacells.datasets import synthetic_counts
from deltacells.format import tile_path
from deltacells.tiles import DEFAULT_TILE_SIZE


def best_of(fn, repeat: int = 5) -> float:
    """Best wall time of ``repeat`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def load(args: argparse.Namespace) -> tuple[str, sparse.csr_matrix]:
    if args.visium:
        import scanpy as sc

        adata = sc.read_10x_mtx(args.visium)
        return f"visium-cytassist {adata.shape[0]:,} x {adata.shape[1]:,}", sparse.csr_matrix(adata.X)
    adata = synthetic_counts(args.cells, args.genes, seed=0)
    return f"synthetic {args.cells:,} x {args.genes:,}", adata.X


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--genes", type=int, default=10_000)
    parser.add_argument("--visium", type=Path, default=None, help="a 10x mtx directory")
    parser.add_argument("--tile-size", type=int, default=DEFAULT_TILE_SIZE)
    args = parser.parse_args()

    label, X = load(args)
    X = X.astype(np.int32)
    order = np.argsort(-np.asarray(X.sum(axis=0)).ravel(), kind="stable")
    X = X[:, order].tocsr()
    X.sort_indices()
    nnz = X.nnz
    print(f"data: {label}, {nnz:,} nonzeros")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        with dc.DatasetWriter(root / "ds", X.shape[1], tile_size=args.tile_size) as writer:
            writer.write(X)
        t_write = time.perf_counter() - t0
        ds = dc.open_dataset(root / "ds", tile_cache_bytes=0)
        stored = int(ds.manifest.tile_bytes.sum())
        print(
            f"deltacells: {ds.n_tiles} tiles, {stored / 1e6:.2f} MB ({stored / nnz:.3f} B/nonzero), "
            f"written at {X.shape[0] / t_write:,.0f} cells/s"
        )

        blobs = [(root / "ds" / tile_path(i)).read_bytes() for i in range(ds.n_tiles)]
        frames = []
        for blob in blobs:
            header = TileHeader.unpack(blob)
            for row in read_chunk_table(blob, header):
                for off, length in ((GAPS_OFF, GAPS_LEN), (VALS_OFF, VALS_LEN)):
                    frames.append(blob[int(row[off]) : int(row[off]) + int(row[length])])
        dctx = zstandard.ZstdDecompressor()

        def zstd_only() -> None:
            for frame in frames:
                dctx.decompress(frame)

        def decode_tiles_one_thread() -> None:
            for blob in blobs:
                dc.decode_tile(blob, threads=1)

        def decode_tiles() -> None:
            for blob in blobs:
                dc.decode_tile(blob)

        results = {
            "zstd alone, 1 thread (floor)": best_of(zstd_only),
            "decode_tile, 1 thread": best_of(decode_tiles_one_thread),
            "decode_tile, chunk threads": best_of(decode_tiles),
            "Dataset.read_rows(all), from disk": best_of(lambda: ds.read_rows(dtype=np.float32)),
        }

        adata = ad.AnnData(X=X.astype(np.float32))
        sizes = {}
        for name, kwargs in (
            ("h5ad gzip", {"compression": "gzip"}),
            ("h5ad lzf", {"compression": "lzf"}),
            ("h5ad none", {}),
        ):
            path = root / f"{name.replace(' ', '_')}.h5ad"
            adata.write_h5ad(path, **kwargs)
            sizes[name] = path.stat().st_size
            results[f"anndata read_h5ad ({name})"] = best_of(lambda p=path: ad.read_h5ad(p), repeat=3)
        zpath = root / "x.zarr"
        adata.write_zarr(zpath)
        sizes["zarr"] = sum(f.stat().st_size for f in zpath.rglob("*") if f.is_file())
        results["anndata read_zarr"] = best_of(lambda: ad.read_zarr(zpath), repeat=3)

    floor = results["zstd alone, 1 thread (floor)"]
    print(f"\n{'what':42} {'ms':>9} {'M nnz/s':>9} {'x floor time':>12}")
    for what, seconds in results.items():
        print(f"{what:42} {seconds * 1e3:9.1f} {nnz / seconds / 1e6:9.0f} {seconds / floor:12.2f}")
    ours = results["Dataset.read_rows(all), from disk"]
    print(f"\n{'store':12} {'MB':>8} {'B/nnz':>7} {'read time vs deltacells':>24}")
    print(f"{'deltacells':12} {stored / 1e6:8.2f} {stored / nnz:7.3f} {1.0:24.2f}")
    for name, size in sizes.items():
        key = f"anndata read_h5ad ({name})" if name != "zarr" else "anndata read_zarr"
        print(f"{name:12} {size / 1e6:8.2f} {size / nnz:7.3f} {results[key] / ours:24.2f}")


if __name__ == "__main__":
    main()
