"""The package's architecture: every import goes down the layers, and no imports go round in a cycle;
a package is entered through its facade; an import sits in a function only when that defers something.

Every module under ``src/deltacells`` is parsed (not imported): its ``import`` and ``from ... import``
statements, at module level and inside functions, relative ones resolved, those under
``if TYPE_CHECKING:`` left out (they are for type checkers, not for running) except by the facade rule
(a type is part of what a package offers too).
"""

from __future__ import annotations

import ast
import itertools
import sys
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
        "_internals",
        "_jit",
        "_json",
        "_kernel_loading",
        "_memory",
        "_numbers",
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
    ("core",),  # a dataset (or a collection) as rows of CSR
    ("io", "datasets"),  # datasets (synthetic data) may use io, not the other way round
    ("loader",),  # minibatches for training, from a dataset or an AnnData read by io
    ("validate",),
    ("demo",),
    ("cli",),
    ("__init__", "__main__"),  # the package root: may import anything; python -m deltacells (the command line)
)

#: Imports forbidden between two names of the same layer: importer -> what it must not import.
SAME_LAYER_FORBIDDEN: Mapping[str, frozenset[str]] = {
    "tiles": frozenset({"obs"}),
    "obs": frozenset({"tiles"}),
    "io": frozenset({"datasets"}),
}

#: Imports of another unit's private module (``deltacells.<pkg>._<mod>``, or a ``_name`` of another unit) allowed
#: all the same: ``(importer, imported): why``. Every other import from another unit goes through its facade,
#: ``deltacells/<pkg>/__init__.py``, whose ``__all__`` lists what the other units use. A base module
#: (``deltacells/_jit.py``...) is a unit of its own and its own facade; the root (``deltacells/__init__.py``)
#: may import anything, like the layers say.
PRIVATE_IMPORTS_ALLOWED: Mapping[tuple[str, str], str] = {
    ("deltacells.tiles._gather", "deltacells.codec._kernels"): (
        "numba kernels calling codec's numba kernels (the radix sort); in codec's facade they would make "
        "`import deltacells.codec` import numba"
    ),
}

#: Units whose imports of the package may sit in functions only to keep them out of start-up: the root
#: (``import deltacells``) and the command line (``deltacells --help``).
LAZY_UNITS = frozenset({"__init__", "cli"})

#: Imports of the package inside functions kept although they defer no third-party import: ``(importer, imported):
#: why``. Every other one is at module level, defers a third-party import (numba, anndata, pandas...) that its
#: module does not make (a facade's name standing for the module it lives in), or is in one of ``LAZY_UNITS``.
FUNCTION_IMPORTS_ALLOWED: Mapping[tuple[str, str], str] = {
    ("deltacells.io._write", "deltacells.io._append"): (
        "appends only (append=True): keeps the append machinery (about 4 ms of imports) out of every write"
    ),
}


# ---------------------------------------------------------------------- the checker


@dataclass(frozen=True)
class Import:
    """One import statement's target: who imports what, where."""

    file: str  # relative to the directory holding the package
    line: int
    importer: str  # dotted module name
    imported: str  # dotted module name (a module of the package, or a name in one when not a module)
    in_function: bool = False  # inside a function (run when called), not at module level
    type_only: bool = False  # under ``if TYPE_CHECKING:``
    private_names: tuple[str, ...] = ()  # names ``_x`` imported from ``imported`` that are not modules

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


def collect_imports(package_dir: Path, package: str = PACKAGE, *, type_only: bool = False) -> list[Import]:
    """The imports of the package's modules from the package itself, in file and line order.

    Those under ``if TYPE_CHECKING:`` only when ``type_only`` (marked so).
    """
    modules = module_names(package_dir, package)
    found = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(package_dir.parent).as_posix()
        for node, in_function, for_types in _import_nodes(tree.body):
            if for_types and not type_only:
                continue
            for target in _targets(node, name, is_package=is_package, modules=modules):
                if target == package or target.startswith(package + "."):
                    private = _private_names(node, name, target, is_package=is_package, modules=modules)
                    found.append(Import(where, node.lineno, name, target, in_function, for_types, private))
    return found


def _import_nodes(
    body: Sequence[ast.AST], *, in_function: bool = False, type_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """The import statements in ``body`` at any depth, each with whether it is in a function and for types only."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function, type_only
            continue
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_nodes(node.body, in_function=inner, type_only=True)
            yield from _import_nodes(node.orelse, in_function=inner, type_only=type_only)
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _import_nodes(children, in_function=inner, type_only=type_only)


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
    base = _from_base(node, importer, is_package=is_package)
    targets = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        targets.append(candidate if candidate in modules else base)
    return list(dict.fromkeys(targets))


def _private_names(
    node: ast.Import | ast.ImportFrom, importer: str, target: str, *, is_package: bool, modules: Mapping[str, Path]
) -> tuple[str, ...]:
    """The names ``_x`` (not modules, not dunders) that ``node``, a ``from target import ...``, imports."""
    if not isinstance(node, ast.ImportFrom) or _from_base(node, importer, is_package=is_package) != target:
        return ()
    return tuple(
        alias.name for alias in node.names if _is_private(alias.name) and f"{target}.{alias.name}" not in modules
    )


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _from_base(node: ast.ImportFrom, importer: str, *, is_package: bool) -> str:
    """The module ``node`` imports from (``from ..x import y`` in ``pkg.a.b``: ``pkg.x``)."""
    base = node.module or ""
    if node.level:
        package_parts = importer.split(".") if is_package else importer.split(".")[:-1]
        anchor = package_parts[: len(package_parts) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    return base


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


def is_private_module(module: str) -> bool:
    """Whether ``module`` is private to its unit: ``pkg.sub._mod`` (or below one), not ``pkg.sub`` nor ``pkg._base``."""
    return any(_is_private(part) for part in module.split(".")[2:])


def private_violations(
    imports: Sequence[Import], allowed: Mapping[tuple[str, str], str] = PRIVATE_IMPORTS_ALLOWED
) -> list[str]:
    """A message per import of another unit's private module or name (the root, ``__init__``, may import any)."""
    problems = []
    for imp in imports:
        src, dst = unit_of(imp.importer), unit_of(imp.imported)
        if src in (dst, "__init__") or (imp.importer, imp.imported) in allowed:
            continue
        facade = ".".join(imp.imported.split(".")[:2])
        if is_private_module(imp.imported):
            problems.append(f"{imp}: private to {dst!r}; import it from {facade} (listed in its __all__)")
        else:
            problems.extend(
                f"{imp.file}:{imp.line}: imports {imp.imported}.{name}: private to {dst!r}"
                for name in imp.private_names
            )
    return problems


def lazy_tables(modules: Mapping[str, Path]) -> dict[str, dict[str, str]]:
    """``{package: {name: module}}``: what each facade's stub (``__init__.pyi``, read by lazy_loader) lists.

    Such a facade's names load their module on first use: ``from .mod import name as name`` in the stub.
    """
    tables = {}
    for package, path in modules.items():
        stub = path.with_suffix(".pyi")
        if path.name != "__init__.py" or not stub.exists():
            continue
        tables[package] = {
            alias.name: f"{package}.{node.module}"
            for node in ast.parse(stub.read_text(encoding="utf-8")).body
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
            for alias in node.names
        }
    return tables


def _loads(
    node: ast.Import | ast.ImportFrom,
    importer: str,
    *,
    is_package: bool,
    modules: Mapping[str, Path],
    tables: Mapping[str, Mapping[str, str]],
) -> list[str]:
    """The modules ``node`` loads, of the package or not (a facade's name: the module its stub says it lives in)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level and (node.module or "").split(".")[0] not in modules:
        return [node.module or ""]
    base = _from_base(node, importer, is_package=is_package)
    table = tables.get(base, {})
    loads = []
    for alias in node.names:
        module = f"{base}.{alias.name}"
        loads.append(module if module in modules else table.get(alias.name, base))
    return list(dict.fromkeys(loads))


def _enclosing(module: str) -> list[str]:
    """The packages an import of ``module`` runs first: ``a``, ``a.b`` for ``a.b.c``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def function_import_problems(
    package_dir: Path,
    package: str = PACKAGE,
    *,
    lazy_units: frozenset[str] = LAZY_UNITS,
    allowed: Mapping[tuple[str, str], str] = FUNCTION_IMPORTS_ALLOWED,
) -> list[str]:
    """A message per import of the package in a function that has no reason to be there.

    An import in a function defers loading its module until the call: worth it only when that defers a
    third-party import (numba, anndata, pandas...) its module does not make, or, in ``lazy_units``, for start-up
    time. A facade's name (each loads its module on first use, as its ``__init__.pyi`` stub says) stands for the
    module it lives in. Never when the module is loaded anyway by then: by the module's own
    imports at module level, those of the modules these load, and those of every package enclosing them (an
    import runs the packages' ``__init__`` first). Only plain statements at module level count (not in an
    ``if`` or a ``try``).
    """
    modules = module_names(package_dir, package)
    tables = lazy_tables(modules)
    eager: dict[str, set[str]] = {}
    in_functions: list[tuple[str, str, int, str]] = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(package_dir.parent).as_posix()
        eager[name] = {
            target
            for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for target in _loads(node, name, is_package=is_package, modules=modules, tables=tables)
        }
        in_functions.extend(
            (where, name, node.lineno, target)
            for node, in_function, for_types in _import_nodes(tree.body)
            if in_function and not for_types
            for target in _loads(node, name, is_package=is_package, modules=modules, tables=tables)
            if target in modules
        )

    def loaded(module: str) -> set[str]:
        seen: set[str] = set()
        todo = [module, *_enclosing(module)]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(m for target in eager.get(current, ()) for m in (target, *_enclosing(target)))
        return seen

    def third_party(loaded_modules: set[str]) -> set[str]:
        tops = {m.split(".")[0] for m in loaded_modules}
        return {top for top in tops if top and top != package and top not in sys.stdlib_module_names}

    problems = []
    for where, importer, line, imported in in_functions:
        already = loaded(importer)
        if imported in already:
            problems.append(f"{where}:{line}: imports {imported}, loaded anyway: import it at module level")
        elif (
            unit_of(importer) not in lazy_units
            and (importer, imported) not in allowed
            and not third_party(loaded(imported)) - third_party(already)
        ):
            problems.append(
                f"{where}:{line}: imports {imported} in a function, deferring no third-party import: import it at "
                "module level (or allow it in FUNCTION_IMPORTS_ALLOWED, saying why)"
            )
    return problems


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


def test_packages_are_entered_through_their_facades():
    problems = private_violations(collect_imports(PACKAGE_DIR, type_only=True))
    assert not problems, f"{len(problems)} imports reach into another package's private modules:\n" + "\n".join(
        problems
    )


def test_every_allowed_private_import_is_made():
    made = {(imp.importer, imp.imported) for imp in collect_imports(PACKAGE_DIR, type_only=True)}
    stale = sorted(set(PRIVATE_IMPORTS_ALLOWED) - made)
    assert not stale, f"PRIVATE_IMPORTS_ALLOWED lists imports no module makes: {stale}"


def test_imports_in_functions_defer_something():
    problems = function_import_problems(PACKAGE_DIR)
    assert not problems, f"{len(problems)} imports in functions defer nothing:\n" + "\n".join(problems)


def test_every_allowed_import_in_a_function_is_made(imports):
    made = {(imp.importer, imp.imported) for imp in imports if imp.in_function}
    stale = sorted(set(FUNCTION_IMPORTS_ALLOWED) - made)
    assert not stale, f"FUNCTION_IMPORTS_ALLOWED lists imports no function makes: {stale}"


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


def test_the_checker_finds_imports_of_private_modules(tmp_path):
    package_dir = write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.low._impl import f\n",  # the root may
            "pkg/low/__init__.py": "from pkg.low._impl import f\n\n__all__ = ['f']\n",
            "pkg/low/_impl.py": "from pkg.low import _more\n\ndef f():\n    pass\n\n_hidden = 1\n",
            "pkg/low/_more.py": "",
            "pkg/high/__init__.py": "",
            "pkg/high/a.py": (
                "from pkg.low import f\n"
                "from pkg.low._impl import f as g\n"  # line 2
                "from pkg.low import _impl\n"  # line 3
                "def h():\n"
                "    from pkg.low._impl import _hidden\n"  # line 5: one problem, not two
                "    from pkg.low import _secret\n"  # line 6: a private name, not a module
            ),
            "pkg/high/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low._impl import f\n",
        },
    )
    imports = collect_imports(package_dir, "pkg", type_only=True)
    assert private_violations(imports, {}) == [
        "pkg/high/a.py:2: imports pkg.low._impl: private to 'low'; import it from pkg.low (listed in its __all__)",
        "pkg/high/a.py:3: imports pkg.low._impl: private to 'low'; import it from pkg.low (listed in its __all__)",
        "pkg/high/a.py:5: imports pkg.low._impl: private to 'low'; import it from pkg.low (listed in its __all__)",
        "pkg/high/a.py:6: imports pkg.low._secret: private to 'low'",
        "pkg/high/b.py:3: imports pkg.low._impl: private to 'low'; import it from pkg.low (listed in its __all__)",
    ]
    assert [i.line for i in collect_imports(package_dir, "pkg") if i.importer == "pkg.high.b"] == []  # types only
    allowed = {("pkg.high.b", "pkg.low._impl"): "why"}
    assert not any(p.startswith("pkg/high/b.py") for p in private_violations(imports, allowed))


def test_the_checker_finds_imports_in_functions_that_defer_nothing(tmp_path):
    package_dir = write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/base.py": "import json\n",
            "pkg/low/__init__.py": "from pkg.low.a import f\n",
            "pkg/low/a.py": "import os\n\ndef f():\n    pass\n",
            "pkg/low/heavy.py": "import numpy\n",
            "pkg/lazy/__init__.py": "",
            "pkg/lazy/__init__.pyi": "from ._g import g as g\n",
            "pkg/lazy/_g.py": "def g():\n    pass\n",
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": (
                "from pkg.low import f\n"
                "def one():\n"
                "    from pkg.low.a import f\n"  # line 3: loaded by pkg.low already
                "def two():\n"
                "    from pkg import base\n"  # line 5: defers only the standard library
                "def three():\n"
                "    from pkg.low import heavy\n"  # line 7: defers numpy
                "def four():\n"
                "    from pkg.lazy import g\n"  # line 9: a facade's name, standing for its module: defers nothing
                "def five():\n"
                "    import json\n"  # not of the package: not checked
            ),
        },
    )
    loaded = "pkg/high/b.py:3: imports pkg.low.a, loaded anyway: import it at module level"
    needless = (
        "pkg/high/b.py:5: imports pkg.base in a function, deferring no third-party import: import it at module "
        "level (or allow it in FUNCTION_IMPORTS_ALLOWED, saying why)"
    )
    facade_name = (
        "pkg/high/b.py:9: imports pkg.lazy._g in a function, deferring no third-party import: import it at module "
        "level (or allow it in FUNCTION_IMPORTS_ALLOWED, saying why)"
    )
    found = function_import_problems(package_dir, "pkg", lazy_units=frozenset(), allowed={})
    assert found == [loaded, needless, facade_name]
    allowed = {("pkg.high.b", "pkg.base"): "why", ("pkg.high.b", "pkg.lazy._g"): "why"}
    assert function_import_problems(package_dir, "pkg", lazy_units=frozenset(), allowed=allowed) == [loaded]
    assert function_import_problems(package_dir, "pkg", lazy_units=frozenset({"high"}), allowed={}) == [loaded]
