"""The figures the documentation quotes come from the committed benchmark results, never typed by hand.

``docs/_ext/figures.py`` computes them from ``docs/_data/*.json``; pages write ``{{ name }}``. Every name a
page uses must be one it computes (the build would print the braces otherwise), from the JSON committed now.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _figures() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("figures", DOCS / "_ext" / "figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.figures(DOCS / "_data")


def test_every_quoted_figure_is_computed() -> None:
    figures = _figures()
    used = {
        name: page.relative_to(DOCS)
        for page in DOCS.rglob("*.md")
        if "_build" not in page.parts
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
