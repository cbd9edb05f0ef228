"""Every ``>>>`` example of the package's docstrings runs, as written, and prints what it says.

Each module with examples is collected with :mod:`doctest` and run in a fresh temporary directory (examples
write datasets by relative paths), so a docstring that drifts from the API fails here.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import deltacells


def _modules_with_examples() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(deltacells.__path__, "deltacells."):
        if info.name.endswith("_torch"):  # torch is optional: its session runs it
            continue
        source = Path(info.module_finder.path, *info.name.split(".")[-1:])  # type: ignore[union-attr]
        path = source.with_suffix(".py") if not info.ispkg else source / "__init__.py"
        if path.exists() and ">>> " in path.read_text():
            names.append(info.name)
    return sorted(names)


MODULES = _modules_with_examples()


def test_examples_are_found() -> None:
    assert len(MODULES) >= 10  # the examples of the public API (read, write, loader, validate, codec...)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DELTACELLS_CACHE", str(tmp_path / "cache"))
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, name) if t.examples]
    assert tests, f"{name} has no examples"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (output above)"
