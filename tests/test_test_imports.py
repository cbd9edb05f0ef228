"""The tests reach the package through its public names: the facades (``deltacells``, ``deltacells.codec``,
``deltacells.io``...: each ``__init__.py`` with an ``__all__``) and their public modules.

A private module (a dotted name with a part ``_x``, not a dunder: ``deltacells.codec._layout``,
``deltacells._memory``, ``deltacells.io._lazy_obs._backend``) is reached only by the tests of that module's own
contract, which are the test files named after it (:func:`names_module`), or by the pairs listed, with their
reason, in ``PRIVATE_REACHES_ALLOWED``.

Every ``*.py`` under ``tests/`` is parsed (not imported). A test reaches a private module by:

* an import: ``import deltacells.codec._decode``, ``from deltacells.codec._layout import HEADER_SIZE``,
  ``from deltacells.codec import _kernels`` (a module), ``from deltacells.codec import _hidden`` (a private name of a
  public module: reaches ``deltacells.codec._hidden``), at module level or in a function;
* an attribute of the package's name: ``monkeypatch.setattr(deltacells.codec._decode, "WORK_UNIT_NNZ", 1)``
  (after ``import deltacells.codec._decode``, or another import that loads it);
* a dotted string naming a target to patch: ``monkeypatch.setattr("deltacells.loader._loader._worker", ...)``
  (any call of ``setattr``/``delattr`` whose first argument is such a string);
* an import in a string of code run by a subprocess (``subprocess.run([sys.executable, "-c", "import ..."])``):
  a string (an f-string's replacement fields taken as ``None``) that parses as Python, once dedented, and imports
  the package.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "deltacells"
TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = TESTS_DIR.parent / "src" / PACKAGE

#: Test files reaching a private module they are not named after (see :func:`names_module`), all the same:
#: ``(test file, private module): why``. Kept minimal: a test reaches the package through its facades unless it
#: tests the private module itself, or must patch a private seam to inject a fault or watch a call.
PRIVATE_REACHES_ALLOWED: Mapping[tuple[str, str], str] = {
    # ---- a private seam patched: a fault or an interrupt injected, a call watched, or a bound lowered so that a
    # small test reaches it (the facade's name is a copy: patching it changes nothing the package calls)
    ("tests/codec/test_partial.py", "deltacells.codec._decode"): "WORK_UNIT_NNZ set: a task per chunk, or one task",
    ("tests/codec/test_roundtrip.py", "deltacells.codec._decode"): "shared_pool spied on: the parallel decoder ran",
    ("tests/codec/test_roundtrip.py", "deltacells.codec._encode"): "shared_pool spied on: the parallel encoder ran",
    ("tests/codec/test_validation.py", "deltacells.codec._decode"): "HOST_BYTEORDER set: a big-endian host",
    ("tests/codec/test_validation.py", "deltacells.codec._encode"): "exception_limit lifted: a tile past the policy",
    ("tests/codec/test_validation.py", "deltacells._memory"): "_mapping spied on: a huge claim maps nothing",
    ("tests/conftest.py", "deltacells._kernel_loading"): "the compiled_kernels fixture: waits for numba's kernels",
    ("tests/core/test_append.py", "deltacells.core._commit"): "roll_forward interrupted: killed after its commit",
    ("tests/core/test_chunk_starts.py", "deltacells.tiles._chunk_layout"): "read_chunk_starts refused: no tile read",
    ("tests/core/test_reader.py", "deltacells.core._row_gathers"): "select_rows spied on: rows selected per tile",
    ("tests/core/test_reader.py", "deltacells._memory"): "MAPPED_MIN_BYTES lowered: every output mapped",
    ("tests/io/test_anndata_contract.py", "deltacells.io._anndata_hooks"): "DENSE_BLOCK_BYTES lowered: dense blocks",
    ("tests/io/test_dask_write.py", "deltacells.io._extras"): "IN_MEMORY_BYTES lowered: the extras read lazily",
    ("tests/io/test_lazy_obs.py", "deltacells.io._read"): "LAZY_OBS_MIN_CELLS lowered: a small dataset is lazy",
    ("tests/io/test_write_levels.py", "deltacells.tiles._writer"): "kernels_loaded set: permute_columns both ways",
    ("tests/reliability/reliability_lib.py", "deltacells.storage._fsspec"): "open and os.replace: a crash mid-write",
    ("tests/reliability/test_resource_bounds.py", "deltacells.tiles._ranged"): "decode_chunks counted: tiles alive",
    ("tests/reliability/test_resource_bounds.py", "deltacells.tiles._reader"): "decode_chunks counted: tiles alive",
    ("tests/servers/appenders.py", "deltacells.core._commit"): "_check_staged: an appender killed before its commit",
    ("tests/storage/test_append_network.py", "deltacells.core._append"): "_stage delayed: another writer commits",
    ("tests/storage/test_append_network.py", "deltacells.core._commit"): "roll_forward stopped, delayed, run late",
    ("tests/storage/test_dask_network.py", "deltacells.io._dask"): "_open: the datasets a worker's blocks opened",
    ("tests/storage/test_durable_writes.py", "deltacells.core._commit"): "fsync_path spied on: the commit's flushes",
    ("tests/storage/test_loader_network.py", "deltacells.loader._loader"): "DEFAULT_REMOTE_GROUP_BYTES lowered",
    ("tests/storage/test_obs_network.py", "deltacells.obs._ranges"): "VERIFY_BLOCK lowered: blocks verified on S3",
    ("tests/storage/test_stale_staging.py", "deltacells.core._commit"): "_check_staged paused, roll_forward stopped",
    ("tests/storage/test_stale_staging.py", "deltacells.validate._staging"): "LOCK_WAIT lowered: a writer's lock",
    ("tests/test_cli.py", "deltacells.io._write"): "open_store spied on: --io-concurrency reaches the store",
    ("tests/test_cli.py", "deltacells.demo._head_to_head"): "read_deltacells spied on: the reads take turns",
    ("tests/test_cli.py", "deltacells.demo._read"): "same_matrix failed: the demo's mismatch error",
    ("tests/test_cli.py", "deltacells._kernel_loading"): "kernels_to_compile set: the demo announces compiling",
    ("tests/test_cli.py", "deltacells.cli._info"): "dataset_info interrupted: Ctrl-C during info",
    ("tests/test_import.py", "deltacells._kernel_loading"): "_load held: opening does not wait for numba",
    ("tests/test_kernel_loading.py", "deltacells.codec._warm_up"): "warm_up failed: the loading thread survives",
    ("tests/tiles/test_reader.py", "deltacells._threads"): "_lock held across a fork: the child inherits none",
    ("tests/tiles/test_writer_uploads.py", "deltacells.obs._write"): "_shard_bytes spied on: shards built in turn",
    # ---- the module's own contract, tested in a file named after the feature rather than the module
    ("tests/codec/test_sort_rows.py", "deltacells.codec._kernels"): "the sort_rows kernel and its cost model",
    ("tests/core/test_batched_reads.py", "deltacells.codec._batch"): "small chunks decoded in one kernel call",
    ("tests/core/test_batched_reads.py", "deltacells.tiles._into"): "tile_groups: small tiles read in groups",
    ("tests/io/test_extras.py", "deltacells.io._zarr_batch"): "the extras' one-pass store: its sizes and budget",
    ("tests/io/test_scanpy.py", "deltacells.io._scverse"): "attach() run again: the import hook replaces nothing",
    ("tests/obs/test_concurrent_fetch.py", "deltacells.obs._ranges"): "coalesced ranges, footers, KnownRangesFile",
    ("tests/obs/test_concurrent_fetch.py", "deltacells.obs._shards"): "shards fetched in batches, tiles' columns",
    ("tests/test_cli.py", "deltacells.demo._format"): "_comparison: the demo's head-to-head lines",
    ("tests/tiles/test_chunk_decoding.py", "deltacells.tiles._ranged"): "a ranged fetch of a partly held tile",
    # ---- a module that the one under test must agree with, or that holds what it checks
    ("tests/codec/test_vectorised.py", "deltacells.codec._codes"): "the status codes both implementations return",
    ("tests/codec/test_vectorised.py", "deltacells.codec._kernels"): "the compiled kernels the numpy ones must match",
    ("tests/codec/test_kernel_types.py", "deltacells.codec._kernels"): "every kernel's compiled signatures",
    ("tests/codec/test_kernel_types.py", "deltacells.tiles._gather"): "every kernel's compiled signatures",
    ("tests/io/test_dask.py", "deltacells.io._dask_blocks"): "dask X's block classes (block_class): type, sums",
    ("tests/io/test_write_levels.py", "deltacells.io._sources"): "matrix_source: the input gene_totals takes",
    ("tests/loader/test_loader.py", "deltacells.loader._order"): "epoch_order: the order workers must follow",
    ("tests/test_internals.py", "deltacells.io._lazy_obs"): "LazyObs overrides anndata's internals checked",
    ("tests/test_internals.py", "deltacells._jit"): "GuardedCache overrides numba's Cache, checked",
    ("tests/test_internals.py", "deltacells.io._dask_blocks"): "CSRMatrixBlock registers with dask's lookup",
    ("tests/test_jit.py", "deltacells.codec._kernels"): "the guarded cache on every kernel",
    ("tests/test_jit.py", "deltacells.tiles._gather"): "the guarded cache on every kernel; _copy run fresh",
    ("tests/test_jit.py", "deltacells._kernel_loading"): "KERNEL_MODULES checked complete; kernels_to_compile",
    ("tests/test_kernel_loading.py", "deltacells.codec._vectorised"): "the numpy versions, run and spied on",
    ("tests/tiles/test_gather_sorted.py", "deltacells.codec._kernels"): "radix_passes: the radix sort's passes",
    ("tests/tiles/test_gather_sorted.py", "deltacells.tiles._gather_vectorised"): "the numpy version, beside numba's",
}


# ---------------------------------------------------------------------- the checker


@dataclass(frozen=True)
class Reach:
    """One place a test file reaches a private module of the package."""

    file: str  # relative to the directory holding tests/, as posix: "tests/codec/test_layout.py"
    line: int
    module: str  # the private module (or private name of a public module), dotted
    how: str  # "import", "attribute", "patch target" or "code in a string"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: reaches {self.module} ({self.how})"


def module_names(package_dir: Path, package: str) -> frozenset[str]:
    """Every module of the package, dotted (an ``__init__.py`` is its package)."""
    names = set()
    for path in package_dir.rglob("*.py"):
        parts = path.relative_to(package_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.add(".".join((package, *parts)))
    return frozenset(names)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_part(dotted: str) -> int | None:
    """The index of the first private part of a dotted name (``deltacells.codec._layout``: 2), or None."""
    return next((i for i, part in enumerate(dotted.split(".")) if is_private(part)), None)


def _reached(dotted: str, modules: frozenset[str]) -> str | None:
    """The private module a dotted name reaches: its longest prefix that is a module of the package, down to its
    first private part (``deltacells.codec._partial.shared_pool``: ``deltacells.codec._partial``); the first
    private part itself when no such prefix is a module (a private name of a public module). None if public."""
    parts = dotted.split(".")
    first = private_part(dotted)
    if first is None:
        return None
    for end in range(len(parts), first, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return ".".join(parts[: first + 1])


def _import_targets(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    """The dotted names an import statement of the package names (``from a.b import c``: ``a.b.c``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif not node.level and node.module:
        yield from (f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _in_package(dotted: str, package: str) -> bool:
    return dotted == package or dotted.startswith(package + ".")


def _code_imports(text: str, package: str) -> list[ast.Import | ast.ImportFrom]:
    """The import statements in a string, when it is code that imports the package (else none); dedented first."""
    if package not in text or "import" not in text:
        return []
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return []
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _string_text(node: ast.Constant | ast.JoinedStr) -> str:
    """A string's text; an f-string's with ``None`` for each replacement field (which keeps it code, if it was)."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    return "".join(str(part.value) if isinstance(part, ast.Constant) else "None" for part in node.values)


def file_reaches(path: Path, root: Path, modules: frozenset[str], package: str = PACKAGE) -> list[Reach]:
    """The private modules of the package that one file reaches, in line order (see the module's docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(root).as_posix()
    found: list[Reach] = []

    def add(line: int, dotted: str, how: str) -> None:
        if _in_package(dotted, package) and (module := _reached(dotted, modules)) is not None:
            found.append(Reach(where, line, module, how))

    in_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for dotted in _import_targets(node, package):
                add(node.lineno, dotted, "import")
        elif (
            isinstance(node, ast.Call)
            and isinstance(func := node.func, (ast.Attribute, ast.Name))
            and (func.attr if isinstance(func, ast.Attribute) else func.id) in ("setattr", "delattr")
            and node.args
            and isinstance(first := node.args[0], ast.Constant)
            and isinstance(first.value, str)
        ):
            add(node.lineno, first.value, "patch target")
        elif isinstance(node, ast.Attribute) and (dotted := _dotted(node)) is not None:
            add(node.lineno, dotted, "attribute")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_fstrings) or (
            isinstance(node, ast.JoinedStr)
        ):
            for inner in _code_imports(_string_text(node), package):
                for dotted in _import_targets(inner, package):
                    add(node.lineno, dotted, "code in a string")
    return sorted(set(found), key=lambda r: (r.line, r.module, r.how))


def collect_reaches(tests_dir: Path, modules: frozenset[str], package: str = PACKAGE) -> list[Reach]:
    """The private modules every ``*.py`` under ``tests_dir`` reaches, in file and line order."""
    root = tests_dir.parent
    return [reach for path in sorted(tests_dir.rglob("*.py")) for reach in file_reaches(path, root, modules, package)]


def names_module(test_file: str, module: str) -> bool:
    """Whether a test file is named after a private module, so tests that module's own contract.

    The module's public part (the parts before its first private one) is the file's directory under ``tests/``,
    and the file is ``test_<name>.py`` or ``test_<name>_<more>.py``, where ``_<name>`` is the first private part:
    ``deltacells.codec._layout`` (and ``deltacells.codec._layout._more``): ``tests/codec/test_layout.py``,
    ``tests/codec/test_layout_fuzz.py``; ``deltacells._memory``: ``tests/test_memory.py``;
    ``deltacells.io._lazy_obs._backend``: ``tests/io/test_lazy_obs.py``.
    """
    parts = module.split(".")
    first = private_part(module)
    if first is None:
        return False
    path = Path(test_file)
    name = parts[first].lstrip("_")
    directory = ("tests", *parts[1:first])
    return path.parent.parts == directory and (path.stem == f"test_{name}" or path.stem.startswith(f"test_{name}_"))


def reach_violations(
    reaches: list[Reach], allowed: Mapping[tuple[str, str], str] = PRIVATE_REACHES_ALLOWED
) -> list[str]:
    """A message per reach of a private module by a test file neither named after it nor allowed to."""
    return [
        f"{reach}: reach it through a facade (a name in its __all__), or test it in a file named after it "
        f"(tests/.../test_<name>.py), or allow it in PRIVATE_REACHES_ALLOWED, saying why"
        for reach in reaches
        if not names_module(reach.file, reach.module) and (reach.file, reach.module) not in allowed
    ]


def stale_entries(reaches: list[Reach], allowed: Mapping[tuple[str, str], str] = PRIVATE_REACHES_ALLOWED) -> list:
    """The allowed pairs no test file makes, or that need no allowing (the file is named after the module)."""
    made = {(reach.file, reach.module) for reach in reaches}
    return sorted(pair for pair in allowed if pair not in made or names_module(*pair))


# ---------------------------------------------------------------------- the tests


def reaches_of_the_tests() -> list[Reach]:
    return collect_reaches(TESTS_DIR, module_names(PACKAGE_DIR, PACKAGE))


def test_tests_reach_private_modules_only_when_they_test_them():
    problems = reach_violations(reaches_of_the_tests())
    assert not problems, f"{len(problems)} reaches of private modules by tests:\n" + "\n".join(problems)


def test_every_allowed_private_reach_is_made():
    stale = stale_entries(reaches_of_the_tests())
    assert not stale, f"PRIVATE_REACHES_ALLOWED lists pairs no test needs allowed: {stale}"


# ---------------------------------------------------------------------- the checker, on a tree made up here


def write_tree(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


PACKAGE_FILES = {
    "pkg/__init__.py": "",
    "pkg/_base.py": "",
    "pkg/low/__init__.py": "from pkg.low._impl import g\n\n__all__ = ['g']\n",
    "pkg/low/_impl.py": "def g():\n    pass\n",
    "pkg/low/public.py": "def f():\n    pass\n",
    "pkg/low/_sub/__init__.py": "",
    "pkg/low/_sub/_deep.py": "k = 1\n",
}

TEST_A = '''\
import pkg
import pkg.low
from pkg.low import g, public
import pkg.low._impl
from pkg.low._impl import g as h
from pkg.low import _impl
from pkg import _base
from pkg.low import _hidden
from .helpers import x
def test(monkeypatch):
    from pkg.low._sub._deep import k
    monkeypatch.setattr("pkg.low._impl.g", 1)
    monkeypatch.setattr(pkg.low._impl, "g", 2)
    monkeypatch.setattr("pkg.low.public.f", 3)
    monkeypatch.delattr(pkg.low.public, "f")
CODE = """
import sys
from pkg import _base
"""
INDENTED = f"""
    from pkg.low import _impl
    print({1})
    """
TEXT = "not code: import pkg._base"
'''


def test_the_checker_finds_every_way_to_reach_a_private_module(tmp_path):
    write_tree(
        tmp_path,
        {
            **PACKAGE_FILES,
            "tests/test_a.py": TEST_A,
            "tests/low/test_impl_more.py": "from pkg.low._impl import g\n",  # named after it
            "tests/low/test_sub.py": "from pkg.low._sub._deep import k\n",  # named after pkg.low._sub
            "tests/test_base.py": "from pkg import _base\n",  # named after it
            "tests/test_impl.py": "from pkg.low._impl import g\n",  # not in tests/low/
            "tests/low/test_implements.py": "import pkg.low._impl\n",  # test_impl_..., not test_impl...
        },
    )
    modules = module_names(tmp_path / "pkg", "pkg")
    assert "pkg.low._sub._deep" in modules and "pkg.low._hidden" not in modules
    reaches = collect_reaches(tmp_path / "tests", modules, "pkg")
    assert [(r.file, r.line, r.module, r.how) for r in reaches] == [
        ("tests/low/test_impl_more.py", 1, "pkg.low._impl", "import"),
        ("tests/low/test_implements.py", 1, "pkg.low._impl", "import"),
        ("tests/low/test_sub.py", 1, "pkg.low._sub._deep", "import"),
        ("tests/test_a.py", 4, "pkg.low._impl", "import"),
        ("tests/test_a.py", 5, "pkg.low._impl", "import"),
        ("tests/test_a.py", 6, "pkg.low._impl", "import"),
        ("tests/test_a.py", 7, "pkg._base", "import"),
        ("tests/test_a.py", 8, "pkg.low._hidden", "import"),  # a private name of a public module
        ("tests/test_a.py", 11, "pkg.low._sub._deep", "import"),  # in a function
        ("tests/test_a.py", 12, "pkg.low._impl", "patch target"),
        ("tests/test_a.py", 13, "pkg.low._impl", "attribute"),
        ("tests/test_a.py", 16, "pkg._base", "code in a string"),
        ("tests/test_a.py", 20, "pkg.low._impl", "code in a string"),  # an f-string, dedented
        ("tests/test_base.py", 1, "pkg._base", "import"),
        ("tests/test_impl.py", 1, "pkg.low._impl", "import"),
    ]
    assert str(reaches[3]) == "tests/test_a.py:4: reaches pkg.low._impl (import)"
    allowed = {("tests/test_a.py", "pkg.low._impl"): "why", ("tests/test_a.py", "pkg._base"): "why"}
    assert [p.split(": reach it")[0] for p in reach_violations(reaches, allowed)] == [
        "tests/low/test_implements.py:1: reaches pkg.low._impl (import)",
        "tests/test_a.py:8: reaches pkg.low._hidden (import)",
        "tests/test_a.py:11: reaches pkg.low._sub._deep (import)",
        "tests/test_impl.py:1: reaches pkg.low._impl (import)",
    ]
    assert len(reach_violations(reaches, {})) == 12
    stale = {**allowed, ("tests/test_base.py", "pkg._base"): "named after it", ("tests/test_b.py", "pkg._base"): "gone"}
    assert stale_entries(reaches, stale) == [("tests/test_b.py", "pkg._base"), ("tests/test_base.py", "pkg._base")]
    assert stale_entries(reaches, allowed) == []


@pytest.mark.parametrize(
    ("test_file", "module", "named"),
    [
        ("tests/codec/test_layout.py", "deltacells.codec._layout", True),
        ("tests/codec/test_layout_fuzz.py", "deltacells.codec._layout", True),
        ("tests/codec/test_layouts.py", "deltacells.codec._layout", False),
        ("tests/test_layout.py", "deltacells.codec._layout", False),
        ("tests/io/codec/test_layout.py", "deltacells.codec._layout", False),
        ("tests/test_memory.py", "deltacells._memory", True),
        ("tests/core/test_memory.py", "deltacells._memory", False),
        ("tests/io/test_lazy_obs.py", "deltacells.io._lazy_obs._backend", True),
        ("tests/io/test_backend.py", "deltacells.io._lazy_obs._backend", False),
        ("tests/testing/test_store.py", "deltacells.testing.store", False),  # public: nothing to name
    ],
)
def test_which_test_files_are_named_after_a_module(test_file, module, named):
    assert names_module(test_file, module) is named
