"""The PNG bar charts of benchmarks/bench_peers.py, drawn from its JSON report (matplotlib, no display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

OURS = "#1b7837"  # deltacells
FLOOR = "#a6dba0"  # zstd alone
PEER = "#7b8fa6"
SIZE_HATCH = ("", "//", "..", "xx")


def _colour(name: str) -> str:
    if name.startswith("deltacells"):
        return OURS
    if name.startswith("zstd"):
        return FLOOR
    return PEER


def _caption(report: dict[str, Any]) -> str:
    parts = []
    for size, entry in report["sizes"].items():
        d = entry["data"]
        what = "resampled from visium-cytassist" if d.get("resampled") else "Visium CytAssist, real"
        parts.append(f"{size}: {d['n_cells']:,} cells ({what}), {d['nnz_per_cell_mean']:.0f} nonzeros/cell")
    level = report.get("deltacells", {}).get("zstd_level")
    machine = report["machine"]["label"]
    return f"{machine}; " + "; ".join(parts) + (f"; deltacells zstd level {level}" if level is not None else "")


def _grouped(ax: Any, names: list[str], series: dict[str, list[float | None]], *, log: bool, unit: str) -> None:
    """Bars of each name, one per series (a size or a thread count), with the value written above."""
    import numpy as np

    n = max(1, len(series))
    width = 0.8 / n
    x = np.arange(len(names))
    for k, (label, values) in enumerate(series.items()):
        heights = [v if isinstance(v, (int, float)) and v > 0 else 0 for v in values]
        bars = ax.bar(
            x + (k - (n - 1) / 2) * width,
            heights,
            width,
            color=[_colour(nm) for nm in names],
            hatch=SIZE_HATCH[k % len(SIZE_HATCH)],
            edgecolor="black",
            linewidth=0.5,
            label=label,
        )
        for bar, v in zip(bars, values, strict=True):
            text = "n/a" if not isinstance(v, (int, float)) else f"{v:.3g}"
            y = bar.get_height() if bar.get_height() > 0 else (ax.get_ylim()[0] if log else 0)
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, y), ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(unit)
    if log:
        ax.set_yscale("log")
    ax.margins(y=0.25)
    if n > 1:
        ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3, which="both")


def _save(fig: Any, folder: Path, name: str, caption: str) -> Path:
    fig.text(0.5, 0.005, caption, ha="center", va="bottom", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path = folder / name
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _stores(report: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for entry in report["sizes"].values():
        names += [n for n, s in entry["stores"].items() if s.get("status") == "ok" and n not in names]
    return names


def _readers(report: dict[str, Any], keep: Any) -> list[str]:
    names: list[str] = []
    for entry in report["sizes"].values():
        for n, r in entry["readers"].items():
            if r.get("status") == "ok" and keep(n, r) and n not in names:
                names.append(n)
    return names


def _slot(report: dict[str, Any], size: str, reader: str, threads: str) -> dict[str, Any]:
    r = report["sizes"][size]["readers"].get(reader, {})
    slot = r.get("threads", {}).get(threads) if r.get("status") == "ok" else None
    return slot if isinstance(slot, dict) else {}


def plot_all(report: dict[str, Any], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    caption = _caption(report)
    sizes = list(report["sizes"])
    threads = [str(t) for t in report["settings"]["threads"]]
    top = threads[-1]
    written = []

    # 1. bytes per nonzero (count matrix only), per store and size
    stores = _stores(report)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = {
        size: [report["sizes"][size]["stores"].get(s, {}).get("x_bytes_per_nnz") for s in stores] for size in sizes
    }
    _grouped(ax, stores, series, log=True, unit="bytes per nonzero (X only, log)")
    ax.set_title("Size on disk of the count matrix, per nonzero (lower is better)")
    written.append(_save(fig, folder, "size_per_nnz.png", caption))

    # 2. conversion time and peak memory, from an AnnData in memory
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, key, unit, scale, title in (
        (axes[0], "convert_s", "seconds (log)", 1.0, "Conversion time from an in-memory AnnData"),
        (axes[1], "convert_peak_above_baseline", "MB above baseline (log)", 2**-20, "Conversion peak memory"),
    ):
        series = {}
        for size in sizes:
            values = []
            for s in stores:
                v = report["sizes"][size]["stores"].get(s, {}).get(key)
                values.append(v * scale if isinstance(v, (int, float)) else None)
            series[size] = values
        _grouped(ax, stores, series, log=True, unit=unit)
        ax.set_title(title + " (lower is better)", fontsize=10)
    written.append(_save(fig, folder, "conversion.png", caption))

    # 3. full read into memory, 1 and 2 threads, one panel per size
    readers = _readers(report, lambda n, r: True)
    fig, axes = plt.subplots(1, len(sizes), figsize=(6.5 * len(sizes), 4.8), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        series = {f"{t} thread{'s' if t != '1' else ''}": [_slot(report, size, n, t).get("full_s") for n in readers]
                  for t in threads}  # fmt: skip
        _grouped(ax, readers, series, log=True, unit="seconds (log)")
        d = report["sizes"][size]["data"]
        ax.set_title(
            f"Full read into memory, {size} ({d['nnz']:,} nonzeros; lower is better)\n"
            "one bar: no thread setting (h5py); zstd alone: decompression only, no matrix built",
            fontsize=9,
        )
    written.append(_save(fig, folder, "full_read.png", caption))

    # 4. random subsets, with the most threads: one panel per fraction, bars per size
    lazy = _readers(report, lambda n, r: r.get("kind") in ("lazy", "floor"))
    fractions = [str(f) for f in report["settings"]["fractions"]]
    fig, axes = plt.subplots(1, len(fractions), figsize=(5.5 * len(fractions), 4.8), squeeze=False)
    for ax, fraction in zip(axes[0], fractions, strict=True):
        series = {}
        for size in sizes:
            values = []
            for n in lazy:
                slot = _slot(report, size, n, top) or _slot(report, size, n, "1")
                v = slot.get("subset_s", {}).get(fraction)
                values.append(v * 1e3 if isinstance(v, (int, float)) else None)
            series[size] = values
        _grouped(ax, lazy, series, log=True, unit="milliseconds (log)")
        ax.set_title(f"Random {float(fraction) * 100:g}% of cells, sorted ({top} threads where settable)", fontsize=9)
    written.append(_save(fig, folder, "subsets.png", caption))

    # 5. peak memory scanning the whole matrix in blocks of rows, and of a full read
    scanned = _readers(report, lambda n, r: "peak_above_baseline" in r.get("scan", {}))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    series = {}
    for size in sizes:
        values = []
        for n in scanned:
            v = report["sizes"][size]["readers"].get(n, {}).get("scan", {}).get("peak_above_baseline")
            values.append(v / 2**20 if isinstance(v, (int, float)) else None)
        series[size] = values
    _grouped(axes[0], scanned, series, log=True, unit="MB above baseline (log)")
    axes[0].set_title("Peak memory scanning all cells in row blocks (lower is better)", fontsize=10)
    built = [n for n in readers if not n.startswith("zstd")]  # zstd alone builds no matrix
    series = {}
    for size in sizes:
        values = []
        for n in built:
            v = _slot(report, size, n, top).get("full_peak", {}).get("peak_above_baseline")
            if v is None:
                v = _slot(report, size, n, "1").get("full_peak", {}).get("peak_above_baseline")
            values.append(v / 2**20 if isinstance(v, (int, float)) else None)
        series[size] = values
    _grouped(axes[1], built, series, log=True, unit="MB above baseline (log)")
    axes[1].set_title("Peak memory of a full read into memory (lower is better)", fontsize=10)
    written.append(_save(fig, folder, "peak_memory.png", caption))
    return written
