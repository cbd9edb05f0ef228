"""``run_demo``: the steps in order, in a temporary directory, each measured; nothing printed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from deltacells.codec import resolve_level
from deltacells.demo._convert import convert
from deltacells.demo._generate import generate, source_x, write_h5ad_gzip
from deltacells.demo._head_to_head import compare_whole_reads
from deltacells.demo._read import choose_subsets, open_lazily, read_all, read_subset, warm_up
from deltacells.demo._report import DemoReport, FullRead, SubsetRead
from deltacells.demo._scanpy import run_scanpy
from deltacells.errors import DemoMismatchError

__all__ = ["run_demo"]

#: The steps, as the progress bar names them (three subsets are read).
_STEPS = (
    "generate", "h5ad", "convert", "open", "warm-up", "read all", "against h5ad", "subset", "subset", "subset", "scanpy"
)  # fmt: skip


def run_demo(
    *,
    n_cells: int = 10_000,
    n_genes: int = 6_000,
    tile_size: int = 2048,
    level: int | str = "default",
    out: str | Path | None = None,
    seed: int = 0,
    threads: int | None = None,
    progress: bool = False,
) -> DemoReport:
    """Generate, write, read back lazily, check, subset, run scanpy, and measure it all.

    Parameters
    ----------
    n_cells, n_genes
        Size of the generated matrix.
    tile_size
        Cells per tile.
    level
        zstd level of the tiles: 1 .. 22, "default" or "archive" (see ``write_deltacells``).
    out
        Where to keep the dataset (replaced if it exists; its obs cache goes beside it, in
        ``<out>.obs-cache``); by default everything goes to a temporary directory that is removed
        afterwards.
    seed
        Seed of the generator (and of the random sample).
    threads
        Threads writing and decoding (default: the usable CPUs).
    progress
        Show a progress bar of the steps (on stderr).

    Returns
    -------
    DemoReport
        What each step measured; :func:`~deltacells.demo.format_report` makes it readable.

    Raises
    ------
    DemoMismatchError
        If anything read back differs from the source.
    """
    with tempfile.TemporaryDirectory(prefix="deltacells-demo-") as tmp_name:
        tmp = Path(tmp_name)
        if out is not None:
            path = Path(out)
            cache_dir = path.with_name(path.name + ".obs-cache")
        else:
            path, cache_dir = tmp / "demo.deltacells", tmp / "obs-cache"
        bar = _progress_bar(enabled=progress)
        try:
            bar.set_description("generate")
            adata, generated = generate(n_cells, n_genes, seed=seed)
            _next(bar, "h5ad")
            h5ad = write_h5ad_gzip(adata, tmp / "demo.h5ad")
            _next(bar, "convert")
            converted = convert(
                adata,
                path,
                tile_size=tile_size,
                level=resolve_level(level),
                threads=threads,
                overwrite=out is not None,
                metadata={"source": "deltacells demo", "seed": seed},
            )
            _next(bar, "open")
            back, opened = open_lazily(path, cache_dir=cache_dir, threads=threads)
            _next(bar, "warm-up")
            warmed = warm_up(back)
            _next(bar, "read all")
            expected_x = source_x(adata).tocsr()  # read back in the source's gene order (the default)
            full_read = read_all(back, adata, expected_x)
            _require_identical(full_read, path)
            _next(bar, "against h5ad")
            comparison = compare_whole_reads(path, tmp / "demo.h5ad", cache_dir=cache_dir, threads=threads)
            subsets: list[SubsetRead] = []
            analysed = None  # the first subset (a cell type), for scanpy
            for label, index in choose_subsets(back, tile_size=tile_size, seed=seed):
                _next(bar, "subset")
                sub, read = read_subset(back, label, index, expected_x)
                _require_identical_subset(read)
                subsets.append(read)
                if analysed is None:
                    analysed = (label, sub)
            _next(bar, "scanpy")
            assert analysed is not None
            scanpy = run_scanpy(*analysed)
            bar.update()
        finally:
            bar.close()
    return DemoReport(
        generated=generated,
        h5ad=h5ad,
        converted=converted,
        opened=opened,
        warm_up=warmed,
        full_read=full_read,
        comparison=comparison,
        subsets=tuple(subsets),
        scanpy=scanpy,
    )


def _require_identical(read: FullRead, path: Path) -> None:
    if not read.identical:
        msg = (
            f"the data read back from {path} differs from what was written (X identical: {read.same_x}, obs: "
            f"{read.same_obs}, var: {read.same_var}); this is a bug in deltacells, please report it"
        )
        raise DemoMismatchError(msg)


def _require_identical_subset(read: SubsetRead) -> None:
    if not read.identical:
        msg = f"the cells of the subset {read.label} read back differ from the source; this is a bug in deltacells"
        raise DemoMismatchError(msg)


def _next(bar: Any, step: str) -> None:
    bar.update()
    bar.set_description(step)


def _progress_bar(*, enabled: bool) -> Any:
    if not enabled:  # tqdm.auto warns in notebooks without ipywidgets: import it only when a bar is wanted
        from tqdm import tqdm

        return tqdm(total=len(_STEPS), disable=True)
    from tqdm.auto import tqdm

    return tqdm(total=len(_STEPS), unit="step", dynamic_ncols=True, leave=False)
