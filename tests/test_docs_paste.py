"""The pages' code runs as a reader pastes it: in order, into a fresh Python, in an empty directory.

Each page of the user guide (and the getting-started page, the front page, and the README's Python) is run as
someone who knows only the page would run it: its visible code, block after block, in one fresh interpreter
(``sys.executable``), in an empty working directory, with an obs cache of its own (``DELTACELLS_CACHE``). What
the documentation build runs but a reader does not see is left out: cells tagged ``remove-cell`` (the build's
working directory, its cleaning up) and ``remove-input`` (tables drawn from the benchmarks' results). So data a
page uses must be made by code it shows, and a page fails here, naming the page and the block, when it is not.

What is run, in the page's order:

- every ``{code-cell}`` and every ````` ```python ````` block, in one interpreter, as a pasted session: the
  blocks share their names, and ``__main__`` is the session's (functions defined there pickle, as in a pasted
  session). IPython's syntax (``!command``, ``%magic``) is not Python, and fails;
- every ````` ```bash ````` block of ``deltacells`` commands, in a shell in the same directory, between the Python
  blocks around it, with this environment's scripts first on ``PATH`` (an activated environment, as the pages
  say). Other shell blocks (installing, benchmarks) set up the reader's environment, and are not run.

A block whose first line is ``# not runnable as is: <what is yours>`` needs what the reader must bring (a bucket,
credentials, a cluster, their training loop): it is compiled, not run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: The pages whose code must paste, and whether their shell blocks are checked too (the README's are the
#: repository's own setup: installing, running the tests).
PAGES: dict[str, bool] = {
    "README.md": False,
    "docs/index.md": True,
    "docs/getting-started.md": True,
    **{path.relative_to(ROOT).as_posix(): True for path in sorted((DOCS / "user-guide").glob("*.md"))},
}

#: Pages that take long to run (a dask cluster, a training loop...): marked slow.
SLOW_PAGES = frozenset({"docs/user-guide/reading.md"})

#: The first line of a block that needs what the reader brings: compiled, not run.
NOT_RUNNABLE = "# not runnable as is: "

#: Cell tags of code the documentation build runs but does not show.
HIDDEN_TAGS = frozenset({"remove-cell", "remove-input"})

_FENCE = re.compile(r"^(`{3,})(.*)$")
_TAGS = re.compile(r"^:tags:\s*\[(.*)\]\s*$")


@dataclass(frozen=True)
class Block:
    """A block of code of a page: Python or a shell's, where it starts, and whether it is run."""

    kind: str  # "python" or "shell"
    source: str
    page: str
    line: int  # of the block's first line of code, 1-based
    run: bool = True


def blocks_of(page: str, *, root: Path = ROOT, shell: bool = True) -> list[Block]:
    """The code a reader of ``page`` (a path under ``root``) sees, in order (see the module docstring)."""
    lines = (root / page).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        ticks, info = fence.group(1), fence.group(2).strip()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks)
        body = lines[i + 1 : end]
        start = i + 2  # the line after the fence, 1-based
        kind, hidden = None, False
        if info.startswith("{code-cell}"):
            kind = "python"
            while body and body[0].startswith(":"):  # the directive's options
                tags = _TAGS.match(body[0])
                if tags is not None:
                    hidden = bool(HIDDEN_TAGS & {t.strip() for t in tags.group(1).split(",")})
                body, start = body[1:], start + 1
        elif info == "python":
            kind = "python"
        elif info in {"bash", "console", "sh", "shell"} and shell:
            commands = [line for line in body if line.strip() and not line.lstrip().startswith("#")]
            if commands and all(line.startswith("deltacells ") for line in commands):
                kind = "shell"
        if kind is not None and not hidden:
            runnable = not (body and body[0].startswith(NOT_RUNNABLE))
            blocks.append(Block(kind, "\n".join(body), page, start, runnable))
        i = end + 1
    return blocks


#: Runs a page's blocks (a JSON file, argv[1]) as a pasted session; a failure names the page and the block.
RUNNER = textwrap.dedent(
    """
    import json, subprocess, sys, traceback
    session = sys.modules["__main__"].__dict__
    for number, block in enumerate(json.load(open(sys.argv[1], encoding="utf-8")), start=1):
        where = f"{block['page']}, block {number} (line {block['line']}, {block['kind']})"
        try:
            if block["kind"] == "python":
                code = compile("\\n" * (block["line"] - 1) + block["source"], block["page"], "exec")
                if block["run"]:
                    exec(code, session)
            elif block["run"]:
                subprocess.run(block["source"], shell=True, check=True, executable="/bin/bash")
        except BaseException:
            traceback.print_exc()
            print(f"FAILED: {where}", file=sys.stderr, flush=True)
            sys.exit(1)
    """
)


@pytest.mark.parametrize(
    "page", [pytest.param(page, marks=pytest.mark.slow) if page in SLOW_PAGES else page for page in PAGES]
)
def test_a_page_runs_as_pasted(page: str, tmp_path: Path) -> None:
    blocks = blocks_of(page, shell=PAGES[page])
    assert any(block.run for block in blocks) or page == "docs/user-guide/index.md", f"{page}: no code found"
    work = tmp_path / "work"
    work.mkdir()
    plan = tmp_path / "blocks.json"
    plan.write_text(json.dumps([asdict(block) for block in blocks]), encoding="utf-8")
    env = {
        **os.environ,
        "DELTACELLS_CACHE": str(tmp_path / "cache"),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]),
        "MPLBACKEND": "Agg",
    }
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, plan], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"{page} does not run as pasted:\n{proc.stderr[-6000:]}"


# ---------------------------------------------------------------------- what is taken from a page


def test_blocks_are_taken_as_a_reader_sees_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent(
            """\
            # A page

            ```{code-cell} ipython3
            :tags: [remove-cell]

            hidden = 1
            ```

            ```{code-cell} ipython3
            shown = 2
            ```

            ```{code-cell} ipython3
            :tags: [remove-input]

            table = 3
            ```

            ```python
            pasted = 4
            ```

            ```python
            # not runnable as is: your bucket
            remote = 5
            ```

            ```bash
            deltacells info cells.deltacells
            ```

            ```bash
            pip install deltacells
            ```

            ```{toctree}
            other
            ```
            """
        ),
        encoding="utf-8",
    )
    blocks = blocks_of("page.md", root=tmp_path)
    assert [(b.kind, b.source.splitlines()[-1], b.line, b.run) for b in blocks] == [
        ("python", "shown = 2", 10, True),
        ("python", "pasted = 4", 20, True),
        ("python", "remote = 5", 24, False),
        ("shell", "deltacells info cells.deltacells", 29, True),
    ]
    assert [b.kind for b in blocks_of("page.md", root=tmp_path, shell=False)] == ["python", "python", "python"]


def test_a_failing_block_is_named(tmp_path: Path) -> None:
    """The runner stops at the first failing block and names the page, the block and its line."""
    blocks = [
        Block("python", "x = 1", "page.md", 3),
        Block("python", "import nothing_of_that_name", "page.md", 7, run=False),  # compiled only
        Block("python", "y = x + undefined_name", "page.md", 12),
    ]
    plan = tmp_path / "blocks.json"
    plan.write_text(json.dumps([asdict(block) for block in blocks]), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", RUNNER, plan], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1
    assert 'File "page.md", line 12' in proc.stderr
    assert "NameError: name 'undefined_name' is not defined" in proc.stderr
    assert proc.stderr.rstrip().endswith("FAILED: page.md, block 3 (line 12, python)")
    ipython = [Block("python", "!deltacells info cells.deltacells", "page.md", 5)]
    plan.write_text(json.dumps([asdict(block) for block in ipython]), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", RUNNER, plan], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "SyntaxError" in proc.stderr
