"""zstd levels and knobs for the tiles: bytes per nonzero, encode and decode speed, size against gzip h5ad.

The real writer's pieces are measured: tiles are cut as ``write_deltacells`` cuts them (genes by decreasing
totals, 2,048 cells per tile) and encoded with ``deltacells.codec._encode.encode_tile`` on one thread, then
decoded with ``deltacells.decode_tile`` on one thread. Two matrices:

* ``visium``: the real Visium CytAssist matrix (``../shared/data/visium-cytassist``, 2,898 x 19,465);
* ``resampled``: 30,000 cells drawn with replacement from its real cells (``--cells``).

Settings: every zstd level 1..22, and zstd's other knobs (``window_log``, ``strategy``, long-distance
matching) on top of the levels of ``--knob-levels``, through ``zstandard.ZstdCompressionParameters`` (the
parameters of the level for streams of the tiles' size, with one knob changed). ``encode_tile`` calls
``compress_frame(data, level)`` for every stream; for the knob rows that call is given the parameters.

Speeds are the best of ``--repeat`` rounds; the rounds interleave the settings (one pass over all of them,
then the next), so load from other work on the machine hits them alike: compare them as ratios. Sizes are
given as a fraction of anndata's gzip h5ad of the same matrix (``adata.write_h5ad(compression="gzip")``, the
whole file). With ``--sample-tiles`` only that many tiles of a matrix are encoded; its bytes per nonzero are
then those of the sample, and its size is extrapolated to all its nonzeros.

Sizes only (exact; no timing), at the default level:

* ``chunks``: the tiles of each matrix encoded with 1, 8, 16 and the default number of chunks, what chunks cost in size;
* ``layouts`` (the Visium matrix): its nonzeros laid out step by step towards what the tiles' streams hold,
  each layout compressed as one stream per array (``FORMAT``'s "Why this layout"): CSR with int32 indices and
  counts, then zstd, delta-coded gaps and byte planes in the original gene order, genes reordered with
  uint16 indices, reordered gaps, reordered gaps in byte planes (at level 19 and at the default level); and
  the gaps themselves (median, share below 256) in the original and the reordered gene order.

Usage::

    python benchmarks/bench_levels.py [--quick] [--json PATH] [--cells 30000] [--repeat 3]
    python benchmarks/bench_levels.py --knob-levels 6 --sample-tiles 4 --json docs/_data/levels.json   # the docs'
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import zstandard
from _record import now, write_json
from _visium import VISIUM, resampled_rows
from scipy import sparse

from deltacells.codec import DEFAULT_N_CHUNKS

TILE_SIZE = 2048
STRATEGIES = dict(enumerate(("fast", "dfast", "greedy", "lazy", "lazy2", "btlazy2", "btopt", "btultra", "btultra2"), 1))


@dataclass
class Matrix:
    """A count matrix, as the user has it (for h5ad) and cut in tiles as the writer cuts them."""

    name: str
    counts: sparse.csr_matrix  # float32, source gene order: what anndata writes
    tiles: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    nnz: int = 0
    tile_nnz: int = 0  # nonzeros in the tiles measured (all, or the sample)
    h5ad_gzip_bytes: int = 0


@dataclass
class Setting:
    """What zstd is told: a level, or a level's parameters with one knob changed."""

    label: str
    level: int
    knob: str = ""
    params: zstandard.ZstdCompressionParameters | None = None


@dataclass
class Row:
    matrix: str
    setting: str
    level: int
    knob: str
    tile_bytes: int
    bytes_per_nnz: float
    fraction_of_gzip_h5ad: float
    encode_mnnz_s: float
    decode_mnnz_s: float
    encode_s: float
    decode_s: float


def load_visium() -> tuple[sparse.csr_matrix, list[str]]:
    """The Visium matrix as scanpy reads it (float32 CSR), and the cell names."""
    import scanpy as sc

    adata = sc.read_10x_mtx(VISIUM)
    return sparse.csr_matrix(adata.X, dtype=np.float32), [str(name) for name in adata.obs_names]


def resample(counts: sparse.csr_matrix, n_cells: int, seed: int = 0) -> sparse.csr_matrix:
    """``n_cells`` real cells of ``counts`` drawn with replacement."""
    rows = resampled_rows(counts.shape[0], n_cells, seed)
    return counts[rows]


def reordered(counts: sparse.csr_matrix) -> sparse.csr_matrix:
    """``counts`` as int32 with its genes by decreasing totals (stable), as ``write_deltacells`` stores them."""
    totals = np.bincount(counts.indices, weights=counts.data, minlength=counts.shape[1])
    order = np.argsort(-totals, kind="stable")
    columns = np.empty_like(order)
    columns[order] = np.arange(order.size)
    csr = sparse.csr_matrix(
        (counts.data.astype(np.int32), columns[counts.indices].astype(np.int32), counts.indptr.astype(np.int64)),
        shape=counts.shape,
    )
    csr.has_sorted_indices = False
    csr.sort_indices()
    return csr


def writer_tiles(counts: sparse.csr_matrix, tile_size: int = TILE_SIZE) -> list[tuple[np.ndarray, ...]]:
    """The tiles' CSR arrays as ``write_deltacells`` encodes them: genes by decreasing totals (stable), int32."""
    csr = reordered(counts)
    tiles = []
    for lo in range(0, csr.shape[0], tile_size):
        block = csr[lo : lo + tile_size]
        tiles.append((block.indptr.astype(np.int64), block.indices, block.data))
    return tiles


def gzip_h5ad_bytes(counts: sparse.csr_matrix, names: list[str], workdir: Path) -> int:
    """Size of ``adata.write_h5ad(path, compression="gzip")`` for this matrix (obs names, gene names)."""
    import anndata as ad
    import pandas as pd

    adata = ad.AnnData(
        X=counts,
        obs=pd.DataFrame(index=names),
        var=pd.DataFrame(index=[f"gene{j}" for j in range(counts.shape[1])]),
    )
    path = workdir / "m.h5ad"
    adata.write_h5ad(path, compression="gzip")
    size = path.stat().st_size
    path.unlink()
    return size


def settings(levels: list[int], knob_levels: list[int], stream_size: int) -> list[Setting]:
    """Every level, then each knob changed from the parameters of each level in ``knob_levels``."""
    out = [Setting(f"level {level}", level) for level in levels]
    for level in knob_levels:
        base = zstandard.ZstdCompressionParameters.from_level(level, source_size=stream_size)
        knobs: list[tuple[str, dict[str, int]]] = [("params of the level", {})]
        knobs += [(f"window_log={w}", {"window_log": w}) for w in (16, 18, 20, 23, 27) if w != base.window_log]
        knobs += [(f"strategy={STRATEGIES[s]}", {"strategy": s}) for s in STRATEGIES if s != base.strategy]
        knobs += [("enable_ldm", {"enable_ldm": 1}), ("enable_ldm, window_log=27", {"enable_ldm": 1, "window_log": 27})]
        # min_match: the shortest match the match finder takes (levels 3-12: 4 bytes; level 1: 6)
        knobs += [(f"min_match={m}", {"min_match": m}) for m in (3, 4, 5, 6, 7) if m != base.min_match]
        knobs += [("target_length=999", {"target_length": 999})]
        for label, change in knobs:
            params = zstandard.ZstdCompressionParameters.from_level(level, source_size=stream_size, **change)
            out.append(Setting(f"level {level}, {label}", level, label, params))
    return out


@contextmanager
def compressing_with(setting: Setting) -> Iterator[None]:
    """``encode_tile`` as it is, its ``compress_frame`` given ``setting.params`` (when there are any)."""
    from deltacells.codec import _encode, _frames

    if setting.params is None:
        yield
        return
    params = setting.params

    def compress(data: bytes, level: int) -> bytes:
        return _frames.compress_frame(data, params)

    _encode.compress_frame = compress
    try:
        yield
    finally:
        _encode.compress_frame = _frames.compress_frame


def encode_all(matrix: Matrix, setting: Setting) -> tuple[float, list[bytes]]:
    from deltacells.codec._encode import encode_tile

    with compressing_with(setting):
        t0 = time.perf_counter()
        blobs = [
            encode_tile(indptr, indices, data, matrix.counts.shape[1], level=setting.level, threads=1)
            for indptr, indices, data in matrix.tiles
        ]
        return time.perf_counter() - t0, blobs


def decode_all(blobs: list[bytes]) -> float:
    from deltacells import decode_tile

    t0 = time.perf_counter()
    for blob in blobs:
        decode_tile(blob, threads=1)
    return time.perf_counter() - t0


def check_frames(blob: bytes, tile: tuple[np.ndarray, ...]) -> None:
    """The tile decodes exactly; every frame declares its content size and decodes with a default decompressor."""
    from deltacells import decode_tile
    from deltacells.codec._layout import CHUNK_ENTRY_SIZE, HEADER_SIZE, TileHeader

    got = decode_tile(blob, threads=1)
    indptr, indices, data = tile
    assert np.array_equal(got.indptr, indptr) and np.array_equal(got.indices, indices)
    assert np.array_equal(got.data, data)
    n_chunks = TileHeader.unpack(blob, object_size=len(blob)).n_chunks
    table = np.frombuffer(blob, dtype="<u8", count=CHUNK_ENTRY_SIZE // 8 * n_chunks, offset=HEADER_SIZE)
    table = table.reshape(n_chunks, CHUNK_ENTRY_SIZE // 8)
    dctx = zstandard.ZstdDecompressor()
    for row in table:
        for slot in range(4):
            off, size = int(row[4 + 2 * slot]), int(row[5 + 2 * slot])
            if size:
                frame = blob[off : off + size]
                declared = zstandard.get_frame_parameters(frame).content_size
                assert declared not in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR)
                assert len(dctx.decompress(frame, allow_extra_data=False)) == declared


def run(matrices: list[Matrix], all_settings: list[Setting], repeat: int) -> list[Row]:
    best_enc: dict[tuple[str, str], float] = {}
    best_dec: dict[tuple[str, str], float] = {}
    sizes: dict[tuple[str, str], int] = {}
    decode_all(encode_all(matrices[0], Setting("warm-up", 1))[1])  # compiles the decoder's kernels
    for round_ in range(repeat):
        t0 = time.perf_counter()
        for matrix in matrices:
            for setting in all_settings:
                key = (matrix.name, setting.label)
                enc, blobs = encode_all(matrix, setting)
                dec = decode_all(blobs)
                if round_ == 0:
                    sizes[key] = sum(len(b) for b in blobs)
                    check_frames(blobs[0], matrix.tiles[0])
                best_enc[key] = min(best_enc.get(key, np.inf), enc)
                best_dec[key] = min(best_dec.get(key, np.inf), dec)
        print(f"round {round_ + 1}/{repeat}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    rows = []
    for matrix in matrices:
        for setting in all_settings:
            key = (matrix.name, setting.label)
            per_nnz = sizes[key] / matrix.tile_nnz
            rows.append(
                Row(
                    matrix=matrix.name,
                    setting=setting.label,
                    level=setting.level,
                    knob=setting.knob,
                    tile_bytes=sizes[key],
                    bytes_per_nnz=per_nnz,
                    fraction_of_gzip_h5ad=per_nnz * matrix.nnz / matrix.h5ad_gzip_bytes,
                    encode_mnnz_s=matrix.tile_nnz / best_enc[key] / 1e6,
                    decode_mnnz_s=matrix.tile_nnz / best_dec[key] / 1e6,
                    encode_s=best_enc[key],
                    decode_s=best_dec[key],
                )
            )
    return rows


def chunk_sizes(matrices: list[Matrix], chunks: tuple[int, ...] | None = None) -> list[dict[str, object]]:
    """The tiles of each matrix at the default level with each number of chunks: bytes, and against one chunk.

    ``chunks`` defaults to 1, 8, 16 and the writer's default.
    """
    from deltacells.codec._encode import DEFAULT_LEVEL, encode_tile

    chunks = chunks or tuple(sorted({1, 8, 16, DEFAULT_N_CHUNKS}))

    out: list[dict[str, object]] = []
    for matrix in matrices:
        sizes = {
            k: sum(len(encode_tile(*tile, matrix.counts.shape[1], n_chunks=k, level=DEFAULT_LEVEL, threads=1))
                   for tile in matrix.tiles)
            for k in chunks
        }  # fmt: skip
        out += [
            {
                "matrix": matrix.name,
                "level": DEFAULT_LEVEL,
                "n_chunks": k,
                "tile_bytes": size,
                "bytes_per_nnz": size / matrix.tile_nnz,
                "vs_one_chunk": size / sizes[min(chunks)],
            }
            for k, size in sizes.items()
        ]
    return out


def _gaps(csr: sparse.csr_matrix) -> np.ndarray:
    """Each cell's first gene index, then the differences: the gaps the tiles store."""
    indices = csr.indices.astype(np.int64)
    gaps = indices.copy()
    gaps[1:] -= indices[:-1]
    starts = csr.indptr[:-1][csr.indptr[:-1] < csr.indptr[1:]]
    gaps[starts] = indices[starts]
    return gaps


def _u16(values: np.ndarray) -> bytes:
    return np.minimum(values, 65535).astype("<u2").tobytes()


def _planes(values: np.ndarray) -> bytes:
    """uint16 values as byte planes, all low bytes then all high bytes (as the tiles' streams)."""
    return np.minimum(values, 65535).astype("<u2").view(np.uint8).reshape(-1, 2).T.tobytes()


def layouts(counts: sparse.csr_matrix, archive: int = 19) -> dict[str, object]:
    """Bytes per nonzero of one matrix's nonzeros laid out step by step, each array compressed as one frame."""
    from deltacells.codec._encode import DEFAULT_LEVEL
    from deltacells.codec._frames import compress_frame

    original = sparse.csr_matrix(counts, dtype=np.int32)
    original.sort_indices()
    stored = reordered(counts)
    nnz = original.nnz
    values = stored.data.astype(np.int64)

    def size(level: int, *arrays: bytes) -> float:
        return sum(len(compress_frame(a, level)) for a in arrays) / nnz

    gaps_original, gaps_stored = _gaps(original), _gaps(stored)
    int32 = (original.indices.astype("<i4").tobytes(), original.data.astype("<i4").tobytes())
    steps = {
        "csr int32": sum(len(a) for a in int32) / nnz,
        "csr int32, zstd": size(archive, *int32),
        "gaps + planes, original order, zstd": size(archive, _planes(gaps_original), _planes(original.data)),
        "reordered, uint16, zstd": size(archive, _u16(stored.indices), _u16(values)),
        "reordered + gaps, zstd": size(archive, _u16(gaps_stored), _u16(values)),
        "reordered + gaps + planes, zstd": size(archive, _planes(gaps_stored), _planes(values)),
        "reordered + gaps + planes, default level": size(DEFAULT_LEVEL, _planes(gaps_stored), _planes(values)),
    }
    return {
        "level": archive,
        "default_level": DEFAULT_LEVEL,
        "nnz": nnz,
        "bytes_per_nnz": steps,
        "median_gap_original": float(np.median(gaps_original)),
        "median_gap_reordered": float(np.median(gaps_stored)),
        "gaps_below_256_original": float(np.mean(gaps_original < 256)),
        "gaps_below_256_reordered": float(np.mean(gaps_stored < 256)),
    }


def print_table(rows: list[Row], matrices: list[Matrix]) -> None:
    for matrix in matrices:
        sample = "" if matrix.tile_nnz == matrix.nnz else f", sample of {len(matrix.tiles)} tiles"
        print(
            f"\n{matrix.name}: {matrix.counts.shape[0]:,} cells x {matrix.counts.shape[1]:,} genes, "
            f"{matrix.nnz:,} nonzeros{sample}; gzip h5ad {matrix.h5ad_gzip_bytes / 1e6:.2f} MB "
            f"({matrix.h5ad_gzip_bytes / matrix.nnz:.2f} B/nnz)"
        )
        print(f"{'setting':44s} {'B/nnz':>6s} {'x gzip':>7s} {'enc M/s':>8s} {'dec M/s':>8s}")
        for row in rows:
            if row.matrix == matrix.name:
                print(
                    f"{row.setting:44s} {row.bytes_per_nnz:6.3f} {row.fraction_of_gzip_h5ad:7.3f} "
                    f"{row.encode_mnnz_s:8.2f} {row.decode_mnnz_s:8.1f}"
                )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few settings on small matrices (seconds; for CI)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--cells", type=int, default=30_000, help="cells of the resampled matrix")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; speeds are the best round")
    parser.add_argument("--levels", default="1-22", help="levels to sweep: '1-22' or '1,3,19'")
    parser.add_argument("--knob-levels", default="3,19", help="levels whose parameters get the other knobs")
    parser.add_argument("--sample-tiles", type=int, default=0, help="encode only this many tiles of each matrix")
    args = parser.parse_args(argv)
    started = now()
    if args.quick:
        args.cells, args.repeat, args.levels, args.knob_levels = 3000, 1, "1,3,19", ""

    def parse(spec: str) -> list[int]:
        if not spec:
            return []
        if "-" in spec:
            lo, hi = map(int, spec.split("-"))
            return list(range(lo, hi + 1))
        return [int(x) for x in spec.split(",")]

    visium, names = load_visium()
    resampled = resample(visium, args.cells)
    matrices = [
        Matrix("visium", visium[:TILE_SIZE] if args.quick else visium),
        Matrix(f"resampled {args.cells // 1000}k", resampled),
    ]
    with tempfile.TemporaryDirectory(prefix="bench-levels-") as tmp:
        for matrix, cell_names in ((matrices[0], names), (matrices[1], None)):
            n = matrix.counts.shape[0]
            cell_names = [f"c{i}" for i in range(n)] if cell_names is None else cell_names[:n]
            matrix.nnz = matrix.counts.nnz
            matrix.h5ad_gzip_bytes = gzip_h5ad_bytes(matrix.counts, cell_names, Path(tmp))
            matrix.tiles = writer_tiles(matrix.counts)
            if args.sample_tiles:
                matrix.tiles = matrix.tiles[: args.sample_tiles]
            matrix.tile_nnz = sum(int(t[0][-1]) for t in matrix.tiles)
    stream_size = int(2 * np.median([t[0][-1] for t in matrices[-1].tiles]) / 8)  # a plane stream, 8 chunks
    all_settings = settings(parse(args.levels), parse(args.knob_levels), stream_size)
    rows = run(matrices, all_settings, args.repeat)
    print_table(rows, matrices)
    chunks = chunk_sizes(matrices)
    steps = layouts(matrices[0].counts)
    print("\nchunks per tile, default level: " + "; ".join(
        f"{c['matrix']} {c['n_chunks']}: {c['bytes_per_nnz']:.3f} B/nnz ({c['vs_one_chunk']:.3f} x one chunk)"
        for c in chunks
    ))  # fmt: skip
    print(f"\nlayouts of {matrices[0].name} (bytes per nonzero, one frame per array):")
    for name, per_nnz in steps["bytes_per_nnz"].items():
        print(f"  {name:44s} {per_nnz:6.3f}")
    print(
        f"  median gap {steps['median_gap_original']:g} -> {steps['median_gap_reordered']:g} with genes reordered; "
        f"below 256: {steps['gaps_below_256_original']:.1%} -> {steps['gaps_below_256_reordered']:.1%}"
    )
    if args.json:
        doc = {
            "benchmark": "bench_levels",
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "zstd": zstandard.ZSTD_VERSION},
            "repeat": args.repeat,
            "matrices": [
                {
                    "name": m.name,
                    "n_cells": m.counts.shape[0],
                    "n_genes": m.counts.shape[1],
                    "nnz": m.nnz,
                    "tiles_measured": len(m.tiles),
                    "nnz_measured": m.tile_nnz,
                    "h5ad_gzip_bytes": m.h5ad_gzip_bytes,
                }
                for m in matrices
            ],
            "rows": [asdict(r) for r in rows],
            "chunks": chunks,
            "default_n_chunks": DEFAULT_N_CHUNKS,
            "layouts": {"matrix": matrices[0].name, **steps},
        }
        write_json(args.json, doc, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
