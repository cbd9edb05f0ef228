"""The package's architecture: every import goes down the layers, and no imports go round in a cycle.

Every module under ``src/deltacells`` is parsed (not imported): its ``import`` and ``from ... import``
statements, at module level and inside functions, relative ones resolved, those under
``if TYPE_CHECKING:`` left out (they are for type checkers, not for running).
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "deltacells"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / "src" / PACKAGE

#: The layers, lowest first. A module may import from its own layer or any lower one, never a higher one.
#: A name is a subpackage (``deltacells/codec/``) or a top-level module (``deltacells/errors.py``);
#: ``__init__`` is the package root, ``deltacells/__init__.py``.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the base
    (
        "errors",
        "_checks",
        "_jit",
        "_json",
        "_kernel_loading",
        "_lazy",
        "_memory",
        "_parquet",
        "_sparse",
        "_threads",
        "_version",
    ),
    ("codec",),
    ("format",),
    ("storage",),
    ("testing",),  # the shared store test suite (pytest only here)
    ("tiles", "obs"),  # side by side: neither imports the other (see SAME_LAYER_FORBIDDEN)
    ("dataset",),
    ("io", "datasets"),  # datasets (synthetic data) may use io, not the other way round
    ("loader",),  # minibatches for training, from a dataset or an AnnData read by io
    ("validate",),
    ("demo",),
    ("cli",),
    ("__init__",),  # the package root: may import anything
)

#: Imports forbidden between two names of the same layer: importer -> what it must not import.
SAME_LAYER_FORBIDDEN: Mapping[str, frozenset[str]] = {
    "tiles": frozenset({"obs"}),
    "obs": frozenset({"tiles"}),
    "io": frozenset({"datasets"}),
}


# ---------------------------------------------------------------------- the checker


@dataclass(frozen=True)
class Import:
    """One import statement's target: who imports what, where."""

    file: str  # relative to the directory holding the package
    line: int
    importer: str  # dotted module name
    imported: str  # dotted module name (a module of the package, or a name in one when not a module)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: imports {self.imported}"


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """Every module of the package, ``{"pkg.sub.mod": path}`` (an ``__init__.py`` is its package)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return modules


def collect_imports(package_dir: Path, package: str = PACKAGE) -> list[Import]:
    """The imports of the package's modules from the package itself, in file and line order."""
    modules = module_names(package_dir, package)
    found = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(package_dir.parent).as_posix()
        found.extend(
            Import(where, node.lineno, name, target)
            for node in _import_nodes(tree.body)
            for target in _targets(node, name, is_package=is_package, modules=modules)
            if target == package or target.startswith(package + ".")
        )
    return found


def _import_nodes(body: Sequence[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements in ``body``, at any depth, except under ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_nodes(node.orelse)
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _import_nodes(children)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(
    node: ast.Import | ast.ImportFrom, importer: str, *, is_package: bool, modules: Mapping[str, Path]
) -> list[str]:
    """The modules ``node`` imports (``from m import n`` imports ``m.n`` when that is a module, else ``m``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package_parts = importer.split(".") if is_package else importer.split(".")[:-1]
        anchor = package_parts[: len(package_parts) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    targets = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        targets.append(candidate if candidate in modules else base)
    return list(dict.fromkeys(targets))


def unit_of(module: str) -> str:
    """The name a module's layer is looked up by: its subpackage or top-level module, ``__init__`` for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_index(layers: Sequence[Sequence[str]]) -> dict[str, int]:
    """``{name: layer number}`` from a table of layers."""
    return {name: i for i, names in enumerate(layers) for name in names}


def unassigned(modules: Mapping[str, Path], layers: Sequence[Sequence[str]], package_dir: Path) -> list[str]:
    """A message per module whose subpackage or top-level module is in no layer."""
    index = layer_index(layers)
    return [
        f"{path.relative_to(package_dir.parent).as_posix()}: {unit_of(name)!r} is in no layer; assign it one in LAYERS"
        for name, path in modules.items()
        if unit_of(name) not in index
    ]


def layer_violations(
    imports: Sequence[Import],
    layers: Sequence[Sequence[str]],
    same_layer_forbidden: Mapping[str, frozenset[str]] = SAME_LAYER_FORBIDDEN,
) -> list[str]:
    """A message per import that goes up the layers, across a forbidden same-layer pair, or to no layer."""
    index = layer_index(layers)
    problems = []
    for imp in imports:
        src, dst = unit_of(imp.importer), unit_of(imp.imported)
        if src not in index:
            continue  # reported by unassigned()
        if dst not in index:
            problems.append(f"{imp}: {dst!r} is in no layer; assign it one in LAYERS")
        elif index[dst] > index[src]:
            problems.append(f"{imp}: {src!r} (layer {index[src]}) must not import {dst!r} (layer {index[dst]})")
        elif dst in same_layer_forbidden.get(src, ()):
            problems.append(f"{imp}: {src!r} must not import {dst!r} (same layer, kept apart)")
    return problems


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (depth-first search, nodes in sorted order)."""
    visiting, done = set(), set()
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        visiting.add(node)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in visiting:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in done:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        visiting.discard(node)
        done.add(node)
        stack.pop()
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def cycle_report(imports: Sequence[Import], *, by_unit: bool) -> list[str] | None:
    """None without a cycle; else the cycle, then for each of its edges the imports that make it."""
    key = unit_of if by_unit else (lambda module: module)
    graph: dict[str, set[str]] = defaultdict(set)
    witnesses: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for imp in imports:
        src, dst = key(imp.importer), key(imp.imported)
        if src != dst:
            graph[src].add(dst)
            witnesses[src, dst].append(imp)
    cycle = find_cycle(graph)
    if cycle is None:
        return None
    lines = [" -> ".join(cycle)]
    for src, dst in itertools.pairwise(cycle):
        lines.extend(f"  {src} -> {dst}: {imp}" for imp in witnesses[src, dst])
    return lines


# ---------------------------------------------------------------------- the package's architecture


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return collect_imports(PACKAGE_DIR)


def test_every_module_has_a_layer():
    problems = unassigned(module_names(PACKAGE_DIR, PACKAGE), LAYERS, PACKAGE_DIR)
    assert not problems, "modules in no layer:\n" + "\n".join(problems)


def test_imports_go_down_the_layers(imports):
    problems = layer_violations(imports, LAYERS)
    assert not problems, f"{len(problems)} imports break the layers:\n" + "\n".join(problems)


def test_no_cycle_between_subpackages(imports):
    cycle = cycle_report(imports, by_unit=True)
    assert cycle is None, "subpackages import each other in a cycle:\n" + "\n".join(cycle or [])


def test_no_cycle_between_modules(imports):
    cycle = cycle_report(imports, by_unit=False)
    assert cycle is None, "modules import each other in a cycle:\n" + "\n".join(cycle or [])


# ---------------------------------------------------------------------- the checker, on a tree made up here


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


FAKE_LAYERS = (("base",), ("low",), ("high",), ("__init__",))


def test_the_checker_finds_a_cycle_and_an_upward_import(tmp_path):
    package_dir = write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.high import b\n",
            "pkg/base.py": "import os\n",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": (
                "from typing import TYPE_CHECKING\n"
                "from pkg import base\n"
                "if TYPE_CHECKING:\n"
                "    from pkg.stray import nothing\n"  # ignored: for type checkers only
                "def f():\n"
                "    from ..high import b\n"  # line 6: relative, in a function, upward
                "    return b\n"
            ),
            "pkg/high/__init__.py": "from . import b\n",
            "pkg/high/b.py": "from pkg.low.a import f\n",
            "pkg/stray.py": "",
        },
    )
    imports = collect_imports(package_dir, "pkg")
    assert {(i.importer, i.imported, i.line) for i in imports} == {
        ("pkg", "pkg.high.b", 1),
        ("pkg.low.a", "pkg.base", 2),
        ("pkg.low.a", "pkg.high.b", 6),
        ("pkg.high", "pkg.high.b", 1),
        ("pkg.high.b", "pkg.low.a", 1),
    }
    assert layer_violations(imports, FAKE_LAYERS, {}) == [
        "pkg/low/a.py:6: imports pkg.high.b: 'low' (layer 1) must not import 'high' (layer 2)"
    ]
    assert unassigned(module_names(package_dir, "pkg"), FAKE_LAYERS, package_dir) == [
        "pkg/stray.py: 'stray' is in no layer; assign it one in LAYERS"
    ]
    modules = cycle_report(imports, by_unit=False)
    assert modules is not None and modules[0] == "pkg.high.b -> pkg.low.a -> pkg.high.b"
    assert "  pkg.low.a -> pkg.high.b: pkg/low/a.py:6: imports pkg.high.b" in modules
    units = cycle_report(imports, by_unit=True)
    assert units is not None and units[0] == "high -> low -> high"


def test_the_checker_passes_a_clean_tree(tmp_path):
    package_dir = write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.high import b\nfrom pkg import base\n",
            "pkg/base.py": "",
            "pkg/low/__init__.py": "from .a import f\n",
            "pkg/low/a.py": "import pkg.base\n",
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "from ..low import f\nfrom pkg.low import a\n",
        },
    )
    imports = collect_imports(package_dir, "pkg")
    assert ("pkg.high.b", "pkg.low") in {(i.importer, i.imported) for i in imports}  # f is not a module
    assert layer_violations(imports, FAKE_LAYERS, {}) == []
    assert unassigned(module_names(package_dir, "pkg"), FAKE_LAYERS, package_dir) == []
    assert cycle_report(imports, by_unit=False) is None
    assert cycle_report(imports, by_unit=True) is None


def test_the_checker_keeps_same_layer_pairs_apart(tmp_path):
    package_dir = write_tree(
        tmp_path,
        {"pkg/__init__.py": "", "pkg/left.py": "from pkg import right\n", "pkg/right.py": ""},
    )
    imports = collect_imports(package_dir, "pkg")
    layers = (("left", "right"), ("__init__",))
    assert layer_violations(imports, layers, {}) == []
    assert layer_violations(imports, layers, {"left": frozenset({"right"})}) == [
        "pkg/left.py:1: imports pkg.right: 'left' must not import 'right' (same layer, kept apart)"
    ]
