"""The figures pages quote, computed from the benchmark results committed in ``docs/_data``.

``docs/conf.py`` hands them to MyST as substitutions: a page writes ``{{ read_vs_zarr }}`` where it quotes a
figure, so that a benchmark run rewrites the JSON and every page quoting it follows; no figure is typed by
hand (``typed_figures.py`` fails the build on one that is). The code cells of the performance page draw their
tables from the same files, and take the figures of their prose from here. ``README.md``, which Sphinx does not
build, quotes them between markers that ``readme_figures.py`` rewrites. ``tests/test_docs_figures.py`` checks
that every substitution a page uses, and every figure ``README.md`` marks, is defined here.

Each JSON is written by one benchmark (``nox -s bench`` runs them all; the module of each function below names
its benchmark): ``decode-*.json`` by ``bench_decode.py``, ``levels.json`` by ``bench_levels.py``,
``object-storage.json`` by ``bench_object_storage.py``, ``s3-clients.json`` by ``bench_s3_clients.py``,
``collection-open.json`` by ``bench_collection_open.py``, ``loader.json`` by ``bench_loader.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The two runs of ``bench_decode.py`` the reading figures span (the real matrix, and 30,000 of its cells).
DECODE_RUNS = ("decode-visium.json", "decode-30k.json")
#: The real matrix of ``bench_levels.py`` (sizes of the chunks are quoted for it: resampled cells repeat, and one
#: frame per tile finds the repeats).
REAL_MATRIX = "visium"


def _load(data: Path, name: str) -> Any:
    return json.loads((data / name).read_text(encoding="utf-8"))


def _span(values: list[float], digits: int = 2) -> str:
    """``"a to b"`` (smallest to largest), or one number when they agree at this precision."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low} to {high}"


def _span_percent(shares: list[float], digits: int = 0) -> str:
    """Shares (``0.07``) as ``"7%"``, or ``"6% to 7%"`` when they differ at this precision."""
    low, high = f"{min(shares):.{digits}%}", f"{max(shares):.{digits}%}"
    return low if low == high else f"{low} to {high}"


#: The runs of ``bench_cold_start.py``, one per supported Python (``nox -s bench_cold_start``).
COLD_START_RUNS = ("cold-start-3.11.json", "cold-start-3.13.json")

#: The contenders of ``bench_gene_order.py`` the pages name.
STORED, ORIGINAL, DEFAULT = (
    "deltacells, stored order",
    "deltacells, original order",
    "deltacells, original order (default)",
)


def figures(data: Path) -> dict[str, str]:
    """Every quoted figure, by the name pages use, formatted as the pages print it."""
    return {
        **_decode_figures([_load(data, name) for name in DECODE_RUNS], _load(data, "levels.json")),
        **_level_figures(_load(data, "levels.json")),
        **_object_storage_figures(_load(data, "object-storage.json")),
        **_s3_client_figures(_load(data, "s3-clients.json"), _load(data, "collection-open.json")),
        **_loader_figures(_load(data, "loader.json")),
        **_gene_order_figures(_load(data, "gene-order.json"), _load(data, "row-sort.json")),
        **_cold_start_figures([_load(data, name) for name in COLD_START_RUNS]),
        **_import_figures(_load(data, "import.json")),
        **_output_memory_figures(_load(data, "output-memory.json")),
    }


def _decode_figures(decodes: list[dict[str, Any]], levels: dict[str, Any]) -> dict[str, str]:
    """Reading: ``bench_decode.py``'s runs (sizes against anndata's stores, speeds against zstd, checks)."""
    visium = decodes[0]
    deltacells_bytes = visium["stores"]["deltacells"]["mb"] * 1e6
    archive = next(r for r in levels["rows"] if r["matrix"] == REAL_MATRIX and r["setting"] == "level 19")

    def read_ratio(store: str) -> str:  # how many times as fast deltacells reads X as anndata from ``store``
        return _span([d["stores"][store]["read_ms"] / d["stores"]["deltacells"]["read_ms"] for d in decodes])

    def bytes_per_nnz(store: str) -> str:
        return f"{visium['stores'][store]['mb'] * 1e6 / visium['nnz']:.2f}"

    def share_of(store: str) -> str:  # the dataset's bytes as a share of ``store``'s
        return f"{visium['stores']['deltacells']['mb'] / visium['stores'][store]['mb']:.0%}"

    engine = [d["engine_ms"] for d in decodes]
    floor = "zstd alone, 1 thread (floor)"
    checks = [d["checks"] for d in decodes]
    return {
        "visium_bytes_per_nnz": f"{deltacells_bytes / visium['nnz']:.2f}",
        "visium_share_of_gzip_h5ad": share_of("h5ad gzip"),
        "visium_archive_bytes_per_nnz": f"{archive['bytes_per_nnz']:.2f}",
        "visium_gzip_h5ad_bytes_per_nnz": bytes_per_nnz("h5ad gzip"),
        "visium_zarr_bytes_per_nnz": bytes_per_nnz("zarr"),
        "decode_vs_zstd": _span([e["decode_tile, 1 thread"] / e[floor] for e in engine]),
        "read_vs_h5ad_none": read_ratio("h5ad none"),
        "read_vs_zarr": read_ratio("zarr"),
        "read_vs_h5ad_gzip": read_ratio("h5ad gzip"),
        "share_of_h5ad_none_bytes": share_of("h5ad none"),
        # what this machine's second core gives: to pure Python in two processes, to zstd on two threads
        "python_two_processes_speedup": _span([d["python_two_processes_speedup"] for d in decodes], 1),
        "zstd_two_threads_speedup": _span([e[floor] / e["zstd alone, 2 threads"] for e in engine], 1),
        # what decode_tile checks before decompressing, as a share of its time; the CRC-32 alone
        "checks_share_of_decode": _span_percent([c["share_of_decode_tile"] for c in checks]),
        "crc32_gb_s": _span([c["crc32_gb_s"] for c in checks], 0),
        "zlib_crc32_gb_s": _span([c["zlib_crc32_gb_s"] for c in checks], 1),
    }


def _level_figures(levels: dict[str, Any]) -> dict[str, str]:
    """Writing: ``bench_levels.py``'s zstd levels and knobs, chunks, and the layouts of the format page."""
    plain = {(r["matrix"], r["level"]): r for r in levels["rows"] if not r["knob"]}
    matrices = [m["name"] for m in levels["matrices"]]

    def over(fn: Callable[[str], float]) -> list[float]:
        return [fn(m) for m in matrices]

    def size(matrix: str, level: int) -> int:
        return plain[(matrix, level)]["tile_bytes"]

    def best_knob_row(matrix: str) -> dict[str, Any]:
        rows = [r for r in levels["rows"] if r["knob"] and r["matrix"] == matrix and r["level"] == 6]
        return min(rows, key=lambda r: r["tile_bytes"])

    def best_knob(matrix: str) -> int:
        return int(best_knob_row(matrix)["tile_bytes"])

    chunks = {c["n_chunks"]: c for c in levels["chunks"] if c["matrix"] == REAL_MATRIX}
    layouts = levels["layouts"]
    steps = layouts["bytes_per_nnz"]
    return {
        "level6_encode_mnnz_s": _span(over(lambda m: plain[(m, 6)]["encode_mnnz_s"]), 0),
        "level6_vs_archive_encode": _span(
            over(lambda m: plain[(m, 6)]["encode_mnnz_s"] / plain[(m, 19)]["encode_mnnz_s"]), 0
        ),
        "level6_vs_archive_decode": _span(
            over(lambda m: plain[(m, 6)]["decode_mnnz_s"] / plain[(m, 19)]["decode_mnnz_s"]), 1
        ),
        "level6_larger_than_archive": _span_percent(over(lambda m: size(m, 6) / size(m, 19) - 1)),
        "archive_smaller_than_level6": _span_percent(over(lambda m: 1 - size(m, 19) / size(m, 6))),
        "above_archive_smaller": _span_percent(
            over(lambda m: 1 - min(size(m, level) for level in (20, 21, 22)) / size(m, 19)), 1
        ),
        "best_knob_smaller_than_level6": _span_percent(over(lambda m: 1 - best_knob(m) / size(m, 6)), 1),
        "best_knob_level6": " and ".join(dict.fromkeys(best_knob_row(m)["knob"] for m in matrices)),
        # the low levels' sizes barely differ (their short matches cost what they save): writing.md's level table
        "low_levels_size_spread": _span_percent(
            over(lambda m: max(abs(size(m, level) / size(m, 6) - 1) for level in range(1, 13))), 0
        ),
        "level1_vs_level6_size": _span_percent(over(lambda m: size(m, 1) / size(m, 6) - 1), 1),
        "level1_vs_level6_encode": _span(
            over(lambda m: plain[(m, 1)]["encode_mnnz_s"] / plain[(m, 6)]["encode_mnnz_s"]), 1
        ),
        "level13_smaller_than_level6": _span_percent(over(lambda m: 1 - size(m, 13) / size(m, 6))),
        "default_chunks_size_cost": (
            f"{chunks[levels['default_n_chunks']]['tile_bytes'] / chunks[1]['tile_bytes'] - 1:.1%}"
        ),
        # the Visium matrix's nonzeros laid out step by step (format page), bytes per nonzero
        "layout_csr_int32_zstd": f"{steps['csr int32, zstd']:.2f}",
        "layout_gaps_planes_original_order": f"{steps['gaps + planes, original order, zstd']:.2f}",
        "layout_reordered_uint16": f"{steps['reordered, uint16, zstd']:.2f}",
        "layout_reordered_gaps": f"{steps['reordered + gaps, zstd']:.2f}",
        "layout_reordered_gaps_planes": f"{steps['reordered + gaps + planes, zstd']:.2f}",
        "layout_reordered_gaps_planes_default_level": f"{steps['reordered + gaps + planes, default level']:.2f}",
        "median_gap_original_order": f"{layouts['median_gap_original']:g}",
        "median_gap_reordered": f"{layouts['median_gap_reordered']:g}",
        "gaps_in_one_byte_reordered": f"{layouts['gaps_below_256_reordered']:.0%}",
    }


def _object_storage_figures(run: dict[str, Any]) -> dict[str, str]:
    """The object storage guide's figures: ``bench_object_storage.py``'s scans and subsets, local and S3."""
    places = list(run["results"])  # local disk, S3 server, S3 + latency
    local, s3, slow = (run["results"][place] for place in places)
    smallest = (  # the subset the chunking's goal is about, else the smallest measured
        "0.10% random"
        if "0.10% random" in slow
        else min(slow, key=lambda m: float(m.split("%")[0]) if "random" in m else 1e9)
    )
    subset = slow[smallest]
    quick = ", a `--quick` run (small data, one round) that the full run replaces" if run.get("quick") else ""
    out = {
        "object_storage_run": f"{run['started'][:10]}{quick}",
        "object_storage_cells": f"{run['n_cells']:,}",
        "object_storage_genes": f"{run['n_genes']:,}",
        "object_storage_nnz_per_cell": f"{run['nnz'] / run['n_cells']:.0f}",
        "object_storage_tiles": f"{run['n_tiles']:,}",
        "object_storage_tile_size": f"{run['tile_size']:,}",
        "object_storage_tile_mib": f"{run['tile_bytes'] / 2**20:.1f}",
        "object_storage_level": f"{run['zstd_level']}",
        "object_storage_repeat": f"{run['repeat']}",
        "object_storage_latency_ms": f"{run['latency_s'] * 1e3:g}",
        "object_storage_subset": smallest.split()[0],
        "object_storage_subset_cells_per_tile": f"{subset['cells_read'] / run['n_tiles']:.1f}",
        "object_storage_latency_kept": f"{slow['full scan']['cells_per_s'] / s3['full scan']['cells_per_s']:.2f}",
    }
    out["object_storage_local_cells_per_s"] = f"{local['full scan']['cells_per_s']:,}"
    for name, place in (("s3", s3), ("latency", slow)):  # the two places behind the test proxy
        scan = place["full scan"]
        out[f"object_storage_{name}_cells_per_s"] = f"{scan['cells_per_s']:,}"
        out[f"object_storage_{name}_vs_local"] = f"{scan['cells_per_s'] / local['full scan']['cells_per_s']:.2f}"
        out[f"object_storage_{name}_requests"] = f"{scan['requests']:,}"
        out[f"object_storage_{name}_in_flight"] = f"{scan['max_in_flight']}"
        out[f"object_storage_{name}_subset_requests"] = f"{place[smallest]['requests']:,}"
        out[f"object_storage_{name}_subset_share"] = f"{place[smallest]['share_of_tile_bytes']:.1%}"
    out.update(_chunking_figures(run))
    return out


def _s3_client_figures(run: dict[str, Any], opened: dict[str, Any]) -> dict[str, str]:
    """The two clients of s3:// URLs: ``bench_s3_clients.py``'s scans, ``bench_collection_open.py``'s opens."""
    quick = ", a `--quick` run that the full run replaces" if run.get("quick") else ""
    out = {
        "s3_clients_run": f"{run['started'][:10]}{quick}",
        "s3_clients_cells": f"{run['n_cells']:,}",
        "s3_clients_tiles": f"{run['n_tiles']:,}",
        "s3_clients_tile_mib": f"{run['tile_bytes'] / 2**20:.1f}",
        "s3_clients_latency_ms": f"{run['latency_s'] * 1e3:g}",
        "s3_clients_repeat": f"{run['repeat']}",
        "s3_clients_local_scan_s": f"{run['local_scan_s']:.2f}",
    }
    # Runs before the fast server had one table, of moto's; now a table per server ("moto", "fast").
    servers = run.get("servers") or {"moto": run["clients"]}
    for client in ("obstore", "fsspec"):  # what an older run did not measure
        for figure in ("scan_s", "vs_local", "scan_cpu_per_get_ms", "fetch_cpu_per_get_ms", "server_per_get_ms"):
            out[f"s3_clients_fast_{client}_{figure}"] = "(not measured)"
    for server, rows in servers.items():
        for client, row in rows.items():
            for prefix in [f"s3_clients_{server}_{client}"] + ([f"s3_clients_{client}"] if server == "moto" else []):
                out[f"{prefix}_scan_s"] = f"{row['scan_s']:.2f}"
                out[f"{prefix}_vs_local"] = f"{row['scan_vs_local']:.2f}"
                out[f"{prefix}_scan_cpu_per_get_ms"] = f"{row['scan_cpu_per_get_ms']:.2f}"
                out[f"{prefix}_fetch_cpu_per_get_ms"] = f"{row['fetch_cpu_per_get_ms']:.2f}"
                out[f"{prefix}_server_per_get_ms"] = f"{row['server_cpu_per_get_ms']:.1f}"
    costs = run.get("server_cpu_per_get_ms", {})
    for name in ("moto", "proxy", "fast"):
        out[f"s3_clients_server_{name}_ms"] = f"{costs[name]:.2f}" if name in costs else "(not measured)"
    out["collection_open_datasets"] = f"{opened['datasets']:,}"
    # Runs before the fast server had moto's figures at the top; now under "moto" and "fast".
    for server in ("moto", "fast"):
        measured = opened.get(server, opened if server == "moto" else {})
        for client in ("obstore", "fsspec"):
            row = measured.get("clients", {}).get(client)
            for prefix in [f"collection_open_{server}_{client}"] + (
                [f"collection_open_{client}"] if server == "moto" else []
            ):
                if row is None:
                    out.update(
                        {f"{prefix}_{k}": "(not measured)" for k in ("s", "client_cpu_ms", "server_cpu_s", "requests")}
                    )
                    continue
                out[f"{prefix}_s"] = f"{row['seconds']:.2f}"
                out[f"{prefix}_client_cpu_ms"] = f"{row['client_cpu_per_dataset_ms']:.2f}"
                out[f"{prefix}_server_cpu_s"] = f"{row['server_cpu_s']:.1f}"
                out[f"{prefix}_requests"] = f"{row['requests']:,}"
    return out


def _chunking_figures(run: dict[str, Any]) -> dict[str, str]:
    """The chunks a tile: ``bench_object_storage.py``'s frontier (both matrices) and its coalescing sweep."""
    default = run["default_n_chunks"]
    goal = run["goal"]["subset"]
    out = {
        "default_n_chunks": f"{default}",
        "chunks_pick": f"{run['chunks_pick']}",
        "coalescing_pick_kib": f"{run['coalescing']['pick'] / 1024:g}",
        "default_max_gap_kib": f"{run['default_max_gap'] / 1024:g}",
        "remote_scan_draws": f"{run['draws']}",
        "chunks_goal_subset": run["goal"]["subset"].replace(".10%", ".1%"),
        "chunks_goal_share": f"{run['goal']['share_of_tile_bytes']:.0%}",
        "default_chunk_cells": f"{run['tile_size'] / default:.0f}",
    }
    for key, matrix in run["frontier"].items():
        points = {p["n_chunks"]: p for p in matrix["points"]}
        old, new = points[8], points[default]

        def cost(field: str, old: dict[str, Any] = old, new: dict[str, Any] = new, digits: int = 0) -> str:
            return f"{new[field] / old[field] - 1:+.{digits}%}"

        out.update(
            {
                f"chunks_{key}_share_8": f"{old['subsets'][goal]['share_of_tile_bytes']:.1%}",
                f"chunks_{key}_share_default": f"{new['subsets'][goal]['share_of_tile_bytes']:.1%}",
                f"chunks_{key}_size_cost": cost("tile_bytes", digits=1),
                f"chunks_{key}_read_cost_1_core": cost("local_read_1_core_s"),
                f"chunks_{key}_zstd_cost": cost("zstd_alone_1_core_s"),
                f"chunks_{key}_read_cost_2_cores": cost("local_read_2_cores_s"),
                f"chunks_{key}_remote_scan_vs_local": f"{new['remote_scan_vs_local']:.2f}",
                f"chunks_{key}_fetch_vs_local_scan": f"{new['local_scan_1_core_s'] / new['remote_fetch_only_s']:.2f}",
                f"chunks_{key}_remote_scan_cpu_vs_local": f"{new['remote_scan_cpu_s'] / new['local_scan_cpu_s']:.2f}",
                # the client's CPU a remote scan spends beyond the local one, per request
                f"chunks_{key}_remote_cpu_per_request_ms": (
                    f"{(new['remote_scan_cpu_s'] - new['local_scan_cpu_s']) / new['remote_scan_requests'] * 1e3:.1f}"
                ),
            }
        )
    return out


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


def _gene_order_figures(run: dict[str, Any], row_sort: dict[str, Any]) -> dict[str, str]:
    """Reading in the original gene order: ``bench_gene_order.py`` (1 and 2 cores) and ``bench_row_sort.py``."""
    matrices = run["matrices"]
    big = matrices["resampled"]["cores"]

    def ratio(cores: str, numerator: str, denominator: str) -> str:
        return f"{big[cores][numerator] / big[cores][denominator]:.2f}"

    return {
        "gene_order_cells": f"{matrices['resampled']['n_cells']:,}",
        "gene_order_nnz_millions": f"{matrices['resampled']['nnz'] / 1e6:.0f}",
        "original_vs_stored_1_core": ratio("1", ORIGINAL, STORED),
        "original_vs_stored_2_cores": ratio("2", ORIGINAL, STORED),
        "original_vs_stored_visium": _span(
            [matrices["visium"]["cores"][c][ORIGINAL] / matrices["visium"]["cores"][c][STORED] for c in ("1", "2")]
        ),
        "zarr_vs_default_1_core": ratio("1", "zarr", DEFAULT),
        "zarr_vs_default_2_cores": ratio("2", "zarr", DEFAULT),
        "h5ad_vs_default_2_cores": ratio("2", "h5ad (uncompressed)", DEFAULT),
        "default_two_cores_speedup": f"{big['1'][DEFAULT] / big['2'][DEFAULT]:.2f}",
        "row_sort_ns": f"{row_sort['deltacells_ns_per_nnz']:.1f}",
        "row_sort_vs_scipy": f"{row_sort['scipy_ns_per_nnz'] / row_sort['deltacells_ns_per_nnz']:.1f}",
        "row_sort_row_length": f"{row_sort['nnz_per_row']:,}",
    }


def _cold_start_figures(runs: list[dict[str, Any]]) -> dict[str, str]:
    """A fresh process: ``bench_cold_start.py`` on each supported Python (medians of its runs)."""
    cases = [case for run in runs for case in run["interpreters"].values()]

    def first_over_steady(case: str) -> list[float]:
        found = [c[case] for c in cases]
        return [c["full read 1"] / min(c["full read 2"], c["full read 3"]) for c in found]

    return {
        "cold_start_pythons": " and ".join(version for run in runs for version in run["interpreters"]),
        "cold_start_cells": f"{runs[0]['n_cells']:,}",
        "kernel_loading_s": _span([c["warm, kernels alone"]["kernels loaded"] for c in cases]),
        "first_cell_ms": _span([c[f"warm, {way}"]["first cell"] * 1000 for c in cases for way in WAYS], 0),
        "first_cell_cold_cache_ms": _span([c[f"cold, {way}"]["first cell"] * 1000 for c in cases for way in WAYS], 0),
        "first_full_read_script": _span(first_over_steady("warm, script")),
        "first_full_read_anndata_first": _span(first_over_steady("warm, anndata first")),
        "first_full_read_cold_cache": _span(
            [
                c[f"cold, {way}"]["full read 1"]
                / min(c["warm, script"]["full read 2"], c["warm, script"]["full read 3"])
                for c in cases
                for way in WAYS
            ],
            0,
        ),
        "steady_full_read_s": _span(
            [min(c["warm, script"]["full read 2"], c["warm, script"]["full read 3"]) for c in cases]
        ),
        "open_script_s": _span([c["warm, script"]["open"] for c in cases]),
        "open_anndata_first_s": _span([c["warm, anndata first"]["open"] for c in cases]),
    }


#: How ``bench_cold_start.py`` starts its processes.
WAYS = ("script", "anndata first")


def _import_figures(run: dict[str, Any]) -> dict[str, str]:
    """Start-up: ``bench_import.py`` (best of its fresh processes, ms)."""
    seconds = run["seconds"]

    def ms(name: str) -> str:
        return f"{seconds[name] * 1000:,.0f}"

    return {
        "import_deltacells_ms": ms('python -c "import deltacells"'),
        "import_anndata_ms": ms('python -c "import anndata"'),
        "cli_help_ms": ms("deltacells --help"),
        "cli_info_ms": ms("deltacells info DATASET"),
    }


def quick_runs(data: Path) -> list[str]:
    """The JSON files of ``data`` written, wholly or in part, by a ``--quick`` run (to be rerun in full)."""
    found = []
    for path in sorted(data.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("quick") or doc.get("settings", {}).get("quick") or "--quick" in str(doc.get("partial", "")):
            found.append(path.name)
    return found


def _output_memory_figures(run: dict[str, Any]) -> dict[str, str]:
    """A read's output on memory new to a process, and on memory a read released: ``bench_output_memory.py``."""
    ways = run["ways"]

    def cpu_ms(way: str, setting: str) -> str:
        return f"{ways[way][setting]['cpu'] * 1000:.0f}"

    return {
        "output_memory_mb": f"{run['mb']:.0f}",
        "output_memory_fresh_ms": cpu_ms("deltacells._memory.empty", "fresh process"),
        "output_memory_reused_ms": cpu_ms("deltacells._memory.empty", "again"),
        "output_memory_shared_ms": cpu_ms("mmap shared", "again"),
        "output_memory_faulted_ms": cpu_ms("mmap private", "fresh process"),
        "output_memory_numpy_fresh_ms": cpu_ms("np.empty", "fresh process"),
        "output_memory_numpy_again_ms": cpu_ms("np.empty", "again"),
    }
