"""Find performance figures typed by hand: every figure a page quotes must come from ``docs/_data``.

A page quotes a measured figure as a substitution, ``{{ name }}``, that ``figures.py`` computes from the JSON
a benchmark wrote; a code cell may compute one from that JSON too. What is left, a time, a ratio, a share, a
rate or bytes per nonzero written out in the prose, is a figure that no benchmark run updates: this module
finds them. As a Sphinx extension it warns (and the documentation build, whose warnings are errors, fails)
for each one, naming the page, the line and the text; ``tests/test_docs_figures.py`` runs the same check on
``README.md``, the pages, the tutorials and the command line's help, so that the test suite catches them
too. ``docs/changelog.md`` is exempt: the changelog is history and keeps the figures of its day.

Not checked: fenced code blocks and code cells, inline code, substitutions, the values between
``<!-- figure: name -->`` and ``<!-- /figure -->`` markers (``README.md``: ``readme_figures.py`` writes them),
HTML comments and link targets. :data:`ALLOWED` lists the few figures that are not measurements (a default
timeout, the latency a benchmark adds, the share of the cells a subset asks for), each with its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A number as pages write them: ``3``, ``1,024``, ``0.81``.
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
#: A number or a span of two: ``1.4 to 1.9``, ``17-22``.
_SPAN = rf"(?<![\w.,-]){_NUMBER}(?:\s*(?:to|-|\u2013)\s*{_NUMBER})?"
_WORDS = r"(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|hundred)"
_FLAGS = re.IGNORECASE

#: What a hand-typed performance figure looks like, by kind.
PATTERNS: dict[str, re.Pattern[str]] = {
    "time": re.compile(
        rf"{_SPAN}\s?(?:s|ms|\u00b5s|\u03bcs|us|ns|secs?|seconds?|milliseconds?|microseconds?|nanoseconds?)(?![\w/])"
        r"|\b(?:a|one)\s+(?:milli|micro|nano)second\b",
        _FLAGS,
    ),
    "ratio": re.compile(
        rf"{_SPAN}\s?[x\u00d7](?![\w-])(?!\s*\d)"  # 3.1x, 0.81 times (the sign); not a shape (2,898 x 19,465)
        rf"|{_SPAN}\s+times\b|\b{_WORDS}\s+times\b|\btwice\s+(?:as|the)\b"
        r"|\b(?:half|a\s+third|a\s+quarter|a\s+fifth|a\s+tenth)\s+"
        r"(?:as\s+(?:fast|long|slow|much|many|large|small|big)\b|the\s+(?:time|bytes|size)\b)",
        _FLAGS,
    ),
    "share": re.compile(rf"{_SPAN}\s?(?:%|per\s?cent\b|percent\b)|\bfew\s+per\s?cent\b", _FLAGS),
    "rate": re.compile(
        rf"{_SPAN}\s*(?:thousand|million|billion|[kMG])?\s*"
        r"(?:[kKMGT]i?B/s|B/s|(?:cells|nonzeros|rows|tiles)\s*(?:/\s*s\b|(?:a|per)\s+second\b))",
        _FLAGS,
    ),
    "bytes per nonzero": re.compile(
        rf"{_SPAN}\s*(?:bytes?|B)\s*(?:per|a|/)\s*(?:nonzero|nnz)\b|{_SPAN}\s*B/nnz\b", _FLAGS
    ),
}


@dataclass(frozen=True)
class Allowed:
    """A figure let through, and why.

    ``pattern`` matches it in the text (a space of the pattern matching any white space, line breaks included);
    ``reason`` says why it may stay.
    """

    pattern: str
    reason: str
    #: Only in files whose path ends so ("" : any file).
    path: str = ""


#: Figures that are not measurements, each with its reason.
ALLOWED: tuple[Allowed, ...] = (
    Allowed(r"connect timeout of \d+ s and a read timeout of \d+ s", "the storage layer's default timeouts"),
    Allowed(
        r"\d+ ms (?:of latency|added to (?:every|each) request|per request)|behind \d+ ms",
        "the latency the benchmarks' test proxy adds to each request: a setting, not a result",
    ),
    Allowed(r"\b10x(?= (?:Visium|Genomics|Chromium|h5|mtx|or|and|\())", "10x Genomics, its Visium and files: no ratio"),
    Allowed(
        r"core of \d+% of the genes|gene sets differ by about \d+%",
        "how bench_collection.py draws its datasets' genes: an input of the benchmark, not a result",
    ),
    Allowed(
        r"above \d+% of it the worker pauses, above \d+% it is killed",
        "dask's memory thresholds (distributed's defaults): settings, not results",
    ),
    Allowed(
        r"(?:\d+(?:\.\d+)?%,\s*)*\d+(?:\.\d+)?% and \d+(?:\.\d+)?% of the cells|"
        r"\d+(?:\.\d+)?% of (?:the |its |their )?cells|random \d+(?:\.\d+)?%|\d+(?:\.\d+)?% random"
        r"|of \d+(?:\.\d+)?%(?:,| and)",
        "the share of the cells a subset asks for: an input of the benchmark, not a result",
    ),
)


@dataclass(frozen=True)
class TypedFigure:
    """A figure typed by hand: where, what, and what kind of figure it looks like."""

    path: str
    line: int
    text: str
    kind: str
    context: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text!r} ({self.kind}) in: {self.context.strip()}"


def _blank(match: re.Match[str]) -> str:
    """The match with every character but line breaks turned into a space (positions and lines are kept)."""
    return re.sub(r"[^\n]", " ", match.group(0))


#: Fenced blocks whose content is code (not a directive holding prose, such as ``{note}``).
_CODE_INFO = re.compile(r"^(?:|[\w+.-]+|\{(?:code-cell|code-block|code|sourcecode|literalinclude|toctree|math)\}.*)$")


def _mask_fences(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    fence: str | None = None
    code = False
    for line in lines:
        stripped = line.lstrip()
        if fence is None:
            found = re.match(r"(`{3,}|~{3,}|:{3,})(.*)$", stripped)
            if found:
                fence = found.group(1)
                code = fence[0] != ":" and bool(_CODE_INFO.match(found.group(2).strip()))
                out.append(" " * len(line))
                continue
            out.append(line)
        else:
            if stripped.startswith(fence) and not stripped[len(fence) :].strip():
                fence = None
                out.append(" " * len(line))
                continue
            directive_option = re.match(r":[\w-]+:", stripped) is not None
            out.append(" " * len(line) if code or directive_option else line)
    return "\n".join(out)


def masked(text: str) -> str:
    """``text`` (Markdown) with what is not prose blanked out, keeping every line where it was."""
    text = re.sub(r"\A---\n.*?\n---\n", _blank, text, flags=re.DOTALL)  # front matter
    text = re.sub(r"<!--\s*figure:.*?<!--\s*/figure\s*-->", _blank, text, flags=re.DOTALL)
    text = re.sub(r"<!--.*?-->", _blank, text, flags=re.DOTALL)
    text = _mask_fences(text)
    text = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", _blank, text, flags=re.DOTALL)  # inline code, roles' targets
    text = re.sub(r"\{\{.*?\}\}", _blank, text, flags=re.DOTALL)  # substitutions
    return re.sub(r"\]\([^)\s]*\)", _blank, text)  # link targets


def _allowed_spans(path: str, text: str, entries: tuple[Allowed, ...]) -> list[tuple[int, int, Allowed]]:
    """Where the entries that apply to ``path`` match ``text`` (a space of a pattern matches any white space)."""
    spans = []
    for entry in entries:
        if entry.path and not path.replace("\\", "/").endswith(entry.path):
            continue
        pattern = re.compile(entry.pattern.replace(" ", r"\s+"), _FLAGS)
        spans += [(found.start(), found.end(), entry) for found in pattern.finditer(text)]
    return spans


def find_typed_figures(text: str, path: str = "<text>", *, markdown: bool = True) -> list[TypedFigure]:
    """The figures typed by hand in ``text``, in order.

    Parameters
    ----------
    text
        A page (Markdown, MyST) or, with ``markdown=False``, plain text such as a command's help.
    path
        The name the results give for ``text`` (and which :data:`ALLOWED` entries apply).
    markdown
        Blank out code, substitutions, comments and link targets first.

    Returns
    -------
    list of TypedFigure
        One per figure; empty when the text types none.
    """
    prose = masked(text) if markdown else text
    allowed = _allowed_spans(path, prose, ALLOWED)
    hits = [(m.start(), m.end(), kind) for kind, pattern in PATTERNS.items() for m in pattern.finditer(prose)]
    lines = text.split("\n")
    found: list[TypedFigure] = []
    end_of_last = -1
    for start, end, kind in sorted(hits, key=lambda hit: (hit[0], -hit[1])):
        if start < end_of_last:
            continue  # one figure, matched by two kinds
        end_of_last = end
        if any(s <= start and end <= e for s, e, _ in allowed):
            continue
        line = prose.count("\n", 0, start) + 1
        figure = " ".join(prose[start:end].split())
        found.append(TypedFigure(path, line, figure, kind, lines[line - 1]))
    return found


# -- Sphinx --------------------------------------------------------------------------------------------

#: Pages not checked: the changelog is history, and keeps the figures of its day.
EXEMPT = ("changelog",)


def _warn(figure: TypedFigure, location: object) -> None:
    from sphinx.util import logging

    logging.getLogger(__name__).warning(
        "a performance figure typed by hand: %r (%s); quote it as {{ name }} from docs/_ext/figures.py, "
        "computed from the JSON of the benchmark that measures it",
        figure.text,
        figure.kind,
        location=location,
        type="figures",
        subtype="typed",
    )


def _check_source(app: Any, docname: str, source: list[str]) -> None:
    """``source-read``: warn for each figure typed by hand in the page ``docname``."""
    if docname in EXEMPT:
        return
    path = str(Path(app.env.doc2path(docname)).relative_to(Path(app.srcdir).parent))
    if path.startswith("docs/tutorials/"):  # the copies of ../tutorials/*.md, named as those
        path = path.removeprefix("docs/")
    for figure in find_typed_figures(source[0], path):
        _warn(figure, (docname, figure.line))


def _check_include(app: Any, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    """``include-read``: the same for a file a page includes.

    The generated ones (``*.inc``: the command line's help, in text blocks) are read as plain text.
    """
    if parent_docname in EXEMPT:
        return
    path = Path(app.srcdir) / relative_path
    text, markdown = content[0], True
    if path.suffix == ".inc":
        text, markdown = re.sub(r"^```.*$", "", text, flags=re.MULTILINE), False
    for figure in find_typed_figures(text, str(relative_path), markdown=markdown):
        _warn(figure, f"{path}:{figure.line}")


def setup(app: Any) -> dict[str, Any]:
    """Check every page as it is read, and every file a page includes."""
    app.connect("source-read", _check_source)
    app.connect("include-read", _check_include)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
