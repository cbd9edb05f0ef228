"""The figures the documentation quotes come from the committed benchmark results, never typed by hand.

``docs/_ext/figures.py`` computes them from ``docs/_data/*.json``; pages write ``{{ name }}``. Every name a
page uses must be one it computes (the build would print the braces otherwise), from the JSON committed now.
``docs/_ext/typed_figures.py`` finds the figures typed by hand (the documentation build fails on them); these
tests run it on what the build does not see as well: ``README.md`` (whose marked figures
``docs/_ext/readme_figures.py`` writes) and the command line's help.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def figures() -> dict[str, str]:
    return _load(DOCS / "_ext" / "figures.py").figures(DOCS / "_data")


@pytest.fixture(scope="module")
def typed() -> ModuleType:
    return _load(DOCS / "_ext" / "typed_figures.py")


@pytest.fixture(scope="module")
def readme() -> ModuleType:
    return _load(DOCS / "_ext" / "readme_figures.py")


def _pages() -> list[Path]:
    """README.md, the pages of docs/ (not the build, nor the copies of the tutorials) and the tutorials."""
    docs = [
        page
        for page in DOCS.rglob("*.md")
        if "_build" not in page.parts and page.relative_to(DOCS).parts[0] != "tutorials"
    ]
    return [ROOT / "README.md", *sorted(docs), *sorted((ROOT / "tutorials").glob("*.md"))]


def test_every_quoted_figure_is_computed(figures: dict[str, str]) -> None:
    used = {
        name: page.relative_to(ROOT)
        for page in _pages()
        for name in re.findall(r"\{\{\s*(\w+)\s*\}\}", page.read_text(encoding="utf-8"))
    }
    assert used, "no page quotes a figure"
    missing = {name: str(page) for name, page in used.items() if name not in figures}
    assert not missing, f"pages quote figures that docs/_ext/figures.py does not compute: {missing}"
    assert all(value and "nan" not in value for value in figures.values()), figures


def test_the_front_page_types_no_ratio() -> None:
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    typed = re.findall(r"\b\d+\.\d+ (?:to \d+\.\d+ )?times\b|\b\d+(?:\.\d+)? bytes\b|\b\d+% of\b", text)
    assert not typed, f"docs/index.md types figures that should come from docs/_data: {typed}"


@pytest.mark.parametrize("page", _pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_no_page_types_a_figure(typed: ModuleType, page: Path) -> None:
    if page.name == "changelog.md":
        pytest.skip("the changelog is history: it keeps the figures of its day")
    found = typed.find_typed_figures(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
    assert not found, "performance figures typed by hand (quote them as {{ name }} from docs/_ext/figures.py):\n" + (
        "\n".join(map(str, found))
    )


def _help_texts() -> dict[str, str]:
    """Every command's ``--help``, as ``docs/conf.py`` writes them into the command line reference."""
    import click

    from deltacells.cli import main

    texts: dict[str, str] = {}

    def walk(command: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(command, info_name=path[-1], parent=parent, terminal_width=78, max_content_width=78)
        texts[" ".join(path)] = command.get_help(ctx)
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, [*path, name], ctx)

    walk(main, ["deltacells"], None)
    return texts


def test_the_command_line_help_types_no_figure(typed: ModuleType) -> None:
    texts = _help_texts()
    assert {"deltacells", "deltacells convert", "deltacells demo"} <= set(texts)
    found = [hit for name, text in texts.items() for hit in typed.find_typed_figures(text, name, markdown=False)]
    assert not found, "\n".join(map(str, found))


def test_the_readme_quotes_the_figures_of_docs_data(readme: ModuleType, figures: dict[str, str]) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.marked(text), "README.md marks no figure"
    wrong = readme.differences(text, figures)
    assert not wrong, "README.md's figures are stale (python docs/_ext/readme_figures.py --write):\n" + "\n".join(wrong)


def test_readme_figures_are_rewritten(readme: ModuleType, tmp_path: Path) -> None:
    text = "a <!-- figure: ratio -->1.0<!-- /figure -->x and <!-- figure: size -->2<!-- /figure --> bytes"
    assert readme.marked(text) == [("ratio", "1.0"), ("size", "2")]
    values = {"ratio": "3.5", "size": "0.84"}
    assert readme.differences(text, values) == [
        "ratio: README.md says '1.0', docs/_data gives '3.5'",
        "size: README.md says '2', docs/_data gives '0.84'",
    ]
    new = readme.rewrite(text, values)
    assert readme.marked(new) == [("ratio", "3.5"), ("size", "0.84")]
    assert readme.differences(new, values) == []
    with pytest.raises(KeyError):
        readme.rewrite(text, {"ratio": "3.5"})
    page = tmp_path / "README.md"
    page.write_text(text)
    data = DOCS / "_data"
    assert readme.main(["--check", "--readme", str(page), "--data", str(data)]) == 1
    page.write_text(text.replace("ratio", "read_vs_zarr").replace("size", "visium_bytes_per_nnz"))
    assert readme.main(["--write", "--readme", str(page), "--data", str(data)]) == 0
    assert readme.main(["--check", "--readme", str(page), "--data", str(data)]) == 0


@pytest.mark.parametrize(
    "text",
    [
        "decoding takes 12.5 ms a tile",
        "opens in 0.16 s",
        "about 3 ns a nonzero",
        "it reads 3.1x faster",
        "kept 0.81\u00d7 of the rate",
        "1.4 to 1.9 times as fast",
        "some twenty times as fast as level 19",
        "it takes half as long",
        "moved 26.7% of the tile bytes",
        "checks cost a few percent",
        "at 50 GB/s on one core",
        "134,701 cells/s from the bucket",
        "about 25 million nonzeros a second per thread",
        "a nonzero takes 0.84 bytes per nonzero",
        "costs about a millisecond of work",
        "encodes some 20\n  times more slowly",
    ],
)
def test_the_check_finds_typed_figures(typed: ModuleType, text: str) -> None:
    found = typed.find_typed_figures(f"Prose.\n\n{text}, it says.\n", "page.md")
    assert len(found) == 1, found
    assert found[0].line == 3


@pytest.mark.parametrize(
    "text",
    [
        "a nonzero takes {{ visium_bytes_per_nnz }} bytes, {{ read_vs_zarr }} times as fast",
        "run `bench.py --latency 0.03` then `sleep 5s`",
        "```python\nt = 0.5  # 3.1x faster, 12 ms\n```",
        "```{code-cell} ipython3\nMarkdown(f'{x:.2f} times as fast, 7% smaller')\n```",
        "the Visium matrix, 2,898 \u00d7 19,465, a 100M x 50 embedding",
        "a 10x Visium matrix, a 10x (h5 or mtx) file",
        "random subsets of 0.1%, 1% and 10% of the cells; a random 0.1%",
        "a connect timeout of 10 s and a read timeout of 30 s",
        "an S3 server behind 30 ms of latency, with 30 ms\nadded to every request",
        "tiles of 2,048 cells in 8 chunks, level 19, 256 MiB by default",
        "a <!-- figure: read_vs_zarr -->3.5<!-- /figure --> times faster read",
        "[a link](https://example.org/3x-faster-5%25)",
    ],
)
def test_the_check_lets_other_numbers_through(typed: ModuleType, text: str) -> None:
    assert typed.find_typed_figures(f"{text}\n", "page.md") == []


def test_front_matter_and_directives(typed: ModuleType) -> None:
    page = "---\ntitle: 3.1x faster\n---\n\n:::{note}\nIt is 2.5x faster.\n:::\n"
    found = typed.find_typed_figures(page, "page.md")
    assert [(f.line, f.text) for f in found] == [(6, "2.5x")]


def test_every_allowed_figure_has_a_reason(typed: ModuleType) -> None:
    for entry in typed.ALLOWED:
        assert len(entry.reason) > 10, entry
        re.compile(entry.pattern)


def test_the_sphinx_check_warns(typed: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("sphinx")
    from sphinx.util import logging

    messages: list[tuple[str, object]] = []

    class Logger:
        def warning(self, message: str, *args: object, location: object = None, **kwargs: object) -> None:
            messages.append((message % args, location))

    class Env:
        def doc2path(self, docname: str) -> Path:
            return tmp_path / "docs" / f"{docname}.md"

    class App:
        srcdir = tmp_path / "docs"
        env = Env()

    original = logging.getLogger
    logging.getLogger = lambda name: Logger()  # type: ignore[assignment]
    try:
        typed._check_source(App(), "page", ["Intro.\n\nIt reads 3.1x faster.\n"])
        typed._check_source(App(), "changelog", ["It reads 3.1x faster.\n"])
        typed._check_include(App(), Path("../CHANGELOG.md"), "changelog", ["It reads 3.1x faster.\n"])
        typed._check_include(App(), Path("generated/cli.md.inc"), "cli", ["```text\n  --fast  2.5x faster\n```\n"])
    finally:
        logging.getLogger = original
    assert len(messages) == 2
    assert "'3.1x'" in messages[0][0]
    assert messages[0][1] == ("page", 3)
    assert "'2.5x'" in messages[1][0]
    assert messages[1][1] == f"{tmp_path / 'docs' / 'generated' / 'cli.md.inc'}:2"


def test_a_quick_run_never_writes_docs_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _load(ROOT / "benchmarks" / "_record.py")
    monkeypatch.setattr(record, "QUICK_DIR", tmp_path / "quick")
    committed = DOCS / "_data" / "decode-visium.json"
    assert record.output_path(committed, quick=True) == tmp_path / "quick" / "decode-visium.json"
    assert record.output_path(DOCS / "_static" / "loader", quick=True) == tmp_path / "quick" / "loader"
    assert record.output_path(committed, quick=False) == committed
    elsewhere = tmp_path / "out.json"
    assert record.output_path(elsewhere, quick=True) == elsewhere
    before = committed.read_bytes()
    written = record.write_json(committed, {"x": 1}, started="2026-01-01T00:00:00+00:00", quick=True)
    assert written == tmp_path / "quick" / "decode-visium.json"
    assert committed.read_bytes() == before
    doc = __import__("json").loads(written.read_text())
    assert doc["x"] == 1 and doc["quick"] is True and doc["started"] == "2026-01-01T00:00:00+00:00"
    assert {"command", "finished", "machine", "python"} <= set(doc)
    assert record.write_json(None, {}, started="", quick=True) is None


def test_nox_bench_rewrites_every_json_of_docs_data() -> None:
    """``nox -s bench`` gives each file of docs/_data to the benchmark that writes it (noxfile.py)."""
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    names = r"([\w.-]+\.json)"  # cold-start-3.11.json
    written = set(re.findall(rf'"{names}"', noxfile)) | set(re.findall(rf"docs/_data/{names}", noxfile))
    committed = {path.name for path in (DOCS / "_data").glob("*.json")}
    assert committed <= written, f"no benchmark of nox -s bench writes {sorted(committed - written)}"
    for script in re.findall(r'\("(bench_\w+)", "[\w-]+\.json"', noxfile):
        source = (ROOT / "benchmarks" / f"{script}.py").read_text(encoding="utf-8")
        assert "--json" in source and "--quick" in source, script


def test_the_writer_defaults_are_the_measured_picks() -> None:
    """The default chunks a tile and coalescing gap are what the committed object-storage run picked.

    ``bench_object_storage.py`` picks both from its measurements (the fewest chunks for which a random 0.1% moves
    at most 12% of the tile bytes on both matrices; the gap whose 0.1% subsets were fastest within that share);
    a change of either default, or of the measurements, without the other fails here.
    """
    import json

    from deltacells.codec import DEFAULT_MAX_GAP, DEFAULT_N_CHUNKS

    run = json.loads((DOCS / "_data" / "object-storage.json").read_text(encoding="utf-8"))
    if run.get("quick"):
        pytest.skip("object-storage.json comes from a --quick run")
    assert run["default_n_chunks"] == DEFAULT_N_CHUNKS == run["chunks_pick"]
    assert run["coalescing"]["n_chunks"] == DEFAULT_N_CHUNKS
    assert run["default_max_gap"] == DEFAULT_MAX_GAP == run["coalescing"]["pick"]
