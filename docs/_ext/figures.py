"""The figures pages quote, computed from the benchmark results committed in ``docs/_data``.

``docs/conf.py`` hands them to MyST as substitutions: a page writes ``{{ read_vs_zarr }}`` where it quotes a
figure, so that a benchmark run rewrites the JSON and every page quoting it follows; no figure is typed by
hand. ``tests/test_docs_figures.py`` checks that every substitution a page uses is defined here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The two runs of ``bench_decode.py`` the reading figures span (the real matrix, and 30,000 of its cells).
DECODE_RUNS = ("decode-visium.json", "decode-30k.json")


def _load(data: Path, name: str) -> Any:
    return json.loads((data / name).read_text(encoding="utf-8"))


def _span(values: list[float], digits: int = 2) -> str:
    """``"a to b"`` (smallest to largest), or one number when they agree at this precision."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low} to {high}"


def figures(data: Path) -> dict[str, str]:
    """Every quoted figure, by the name pages use, formatted as the pages print it."""
    decodes = [_load(data, name) for name in DECODE_RUNS]
    visium = decodes[0]
    deltacells_bytes = visium["stores"]["deltacells"]["mb"] * 1e6
    levels = _load(data, "levels.json")
    archive = next(r for r in levels["rows"] if r["matrix"] == "visium" and r["setting"] == "level 19")

    def read_ratio(store: str) -> str:  # how many times as fast deltacells reads X as anndata from ``store``
        return _span([d["stores"][store]["read_ms"] / d["stores"]["deltacells"]["read_ms"] for d in decodes])

    def bytes_per_nnz(store: str) -> str:
        return f"{visium['stores'][store]['mb'] * 1e6 / visium['nnz']:.2f}"

    def share_of(store: str) -> str:  # the dataset's bytes as a share of ``store``'s
        return f"{visium['stores']['deltacells']['mb'] / visium['stores'][store]['mb']:.0%}"

    engine = [d["engine_ms"] for d in decodes]
    return {
        **_loader_figures(_load(data, "loader.json")),
        "visium_bytes_per_nnz": f"{deltacells_bytes / visium['nnz']:.2f}",
        "visium_share_of_gzip_h5ad": share_of("h5ad gzip"),
        "visium_archive_bytes_per_nnz": f"{archive['bytes_per_nnz']:.2f}",
        "visium_gzip_h5ad_bytes_per_nnz": bytes_per_nnz("h5ad gzip"),
        "visium_zarr_bytes_per_nnz": bytes_per_nnz("zarr"),
        "decode_vs_zstd": _span([e["decode_tile, 1 thread"] / e["zstd alone, 1 thread (floor)"] for e in engine]),
        "read_vs_h5ad_none": read_ratio("h5ad none"),
        "read_vs_zarr": read_ratio("zarr"),
        "read_vs_h5ad_gzip": read_ratio("h5ad gzip"),
        "share_of_h5ad_none_bytes": share_of("h5ad none"),
    }


def _loader_figures(loader: dict[str, Any]) -> dict[str, str]:
    """The training guide's figures: ``bench_loader.py``'s cells per second and shuffle quality."""

    def cells_per_s(name: str, place: str) -> str:
        result = next(r for r in loader["results"] if r["name"] == name and r["place"].startswith(place))
        return f"{result['cells_per_s']:,.0f}"

    shuffle = loader["shuffle"]
    random_spread = shuffle["random"]["spread"]

    def spread(rows: list[dict[str, Any]], **settings: Any) -> str:
        row = next(r for r in rows if all(r.get(k) == v for k, v in settings.items()))
        return f"{row['spread'] / random_spread:.2f}"

    return {
        "loader_date": loader["started"][:10],
        "loader_s3_cells_per_s": cells_per_s("deltacells", "S3"),
        "loader_s3_whole_tiles_cells_per_s": cells_per_s("deltacells, whole tiles", "S3"),
        "loader_local_cells_per_s": cells_per_s("deltacells", "local"),
        "loader_spread_groups_64": spread(shuffle["groups"], group_tiles=64),
        "loader_spread_no_groups": spread(shuffle["grid"], block_size="chunk", buffer_size=16384),
        "loader_spread_whole_tiles": spread(shuffle["grid"], block_size=2048, buffer_size=16384),
    }
