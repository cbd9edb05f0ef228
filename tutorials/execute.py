"""Execute tutorials top to bottom, outside Sphinx, and save the executed notebooks.

Usage: ``python tutorials/execute.py [--out DIR] [NOTEBOOK.md ...]`` (default: every tutorial).
``nox -s tutorials`` runs it. Each notebook runs in a fresh ``python3`` kernel started in the
notebook's own directory, as the documentation build does; a failing cell fails the run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent


def execute(source: Path, out_dir: Path) -> Path:
    """Run one MyST notebook and write the executed ``.ipynb`` to ``out_dir``."""
    notebook = jupytext.read(source)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(source.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    target = out_dir / source.with_suffix(".ipynb").name
    nbformat.write(notebook, target)
    print(f"{source}: executed in {time.perf_counter() - start:.1f} s -> {target}", flush=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="MyST notebooks (default: all tutorials)")
    parser.add_argument("--out", type=Path, default=None, help="where executed notebooks go (default: a temp dir)")
    args = parser.parse_args()
    notebooks = args.notebooks or sorted(p for p in HERE.glob("*.md") if p.name != "README.md")
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="deltacells-tutorials-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for notebook in notebooks:
        execute(notebook, out_dir)


if __name__ == "__main__":
    main()
