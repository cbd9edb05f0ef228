"""Sphinx configuration of the deltacells documentation.

Build with ``nox -s docs`` (``sphinx-build -W -n --keep-going -b html docs docs/_build/html``).
The build needs no network: intersphinx inventories are only fetched when
``DELTACELLS_DOCS_INTERSPHINX=1`` is set, and references to other projects' types are
otherwise listed in ``nitpick_ignore_regex``. The tutorials (``../tutorials/*.md``,
MyST notebooks) are copied into the git-ignored ``docs/tutorials/`` and executed by myst-nb.
"""

from __future__ import annotations

import os
import shutil
import sys
from datetime import date
from importlib.metadata import version as _version
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_ext"))

# -- Project -------------------------------------------------------------------------------------

project = "deltacells"
author = "deltacells developers"
copyright = f"{date.today():%Y}, {author}"
release = _version("deltacells")
version = ".".join(release.split(".")[:2])

# -- Tutorials: ../tutorials/*.md -> docs/tutorials/ (git-ignored), executed by myst-nb ------------


def _copy_tutorials() -> None:
    """Mirror the tutorials into docs/tutorials, touching only files whose content changed."""
    source, target = ROOT / "tutorials", HERE / "tutorials"
    target.mkdir(exist_ok=True)
    wanted = {p.name: p for p in source.glob("*.md") if p.name != "README.md"}
    for stale in target.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    for name, path in wanted.items():
        dest = target / name
        if not dest.exists() or dest.read_bytes() != path.read_bytes():
            shutil.copy2(path, dest)


_copy_tutorials()

# -- The command line reference: every command's --help, generated at each build -----------------


def _write_cli_reference() -> None:
    """Write docs/generated/cli.md.inc (included by cli.md) from the click commands themselves."""
    import click

    from deltacells.cli import main

    sections: list[str] = []

    def walk(command: click.Command, path: list[str], parent: click.Context | None) -> None:
        settings = {**command.context_settings, "terminal_width": 78, "max_content_width": 78}
        ctx = click.Context(command, info_name=path[-1], parent=parent, **settings)
        level = "#" * min(len(path) + 1, 4)
        sections.append(f"{level} `{' '.join(path)}`\n\n```text\n{command.get_help(ctx)}\n```\n")
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, name], ctx)

    walk(main, ["deltacells"], None)
    out = HERE / "generated" / "cli.md.inc"
    out.parent.mkdir(exist_ok=True)
    text = "\n".join(sections)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)


_write_cli_reference()

# -- Extensions ----------------------------------------------------------------------------------

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx_autodoc_typehints",
    "sphinx_copybutton",
    "reexports",  # docs/_ext: resolve references to re-exported names
    "streams",  # docs/_ext: merge chunked stream outputs (e.g. of %%bash) without breaking lines
    "typed_figures",  # docs/_ext: a performance figure typed by hand in a page is an error (figures.py)
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "_data", "_ext"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
master_doc = "index"
nitpicky = True
suppress_warnings = ["config.cache"]  # typehints_formatter (a function) cannot be pickled into the env cache
default_role = "literal"

# MyST and myst-nb
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "attrs_inline", "substitution"]
# The figures pages quote ({{ read_vs_zarr }}...), computed from the benchmark results in docs/_data; a figure
# typed by hand instead fails the build (the extension typed_figures).
myst_substitutions = __import__("figures").figures(HERE / "_data")
myst_heading_anchors = 3
nb_execution_mode = "cache"
nb_execution_raise_on_error = True
nb_execution_timeout = 600  # seconds per cell; every tutorial runs in well under a minute on 2 cores
nb_execution_cache_path = str(HERE / "_build" / ".jupyter_cache")
nb_execution_show_tb = True  # a failing cell prints its traceback in the build log
nb_merge_streams = True
nb_render_markdown_format = "myst"  # Markdown outputs (tables built in the performance page) are MyST
nb_output_stderr = "show"  # warnings stay visible on the page (write with progress=False to avoid bars)

# autodoc, autosummary, napoleon, typehints
autosummary_generate = True
autosummary_imported_members = True
autodoc_member_order = "groupwise"
autodoc_default_options = {
    "members": True,
    "inherited-members": False,
    "show-inheritance": True,
    "special-members": "__getitem__",  # TiledCSRDataset documents its indexing there
}
autodoc_typehints = "description"
autodoc_preserve_defaults = True
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_include_init_with_doc = False
napoleon_use_rtype = True
napoleon_use_param = True
napoleon_custom_sections = [("Params", "Parameters")]
typehints_defaults = "braces"
typehints_document_rtype = True
always_document_param_types = True
typehints_use_signature = False
typehints_use_signature_return = False


def typehints_formatter(annotation: object, config: object) -> str | None:
    """Show numpy's big type aliases by name rather than expanded into their unions."""
    from numpy.typing import ArrayLike, DTypeLike

    for alias, name in ((DTypeLike, "DTypeLike"), (ArrayLike, "ArrayLike")):
        try:
            if annotation == alias:
                return f":py:data:`~numpy.typing.{name}`"
        except TypeError:  # some annotations refuse to be compared
            return None
    return None


# -- Cross-references ----------------------------------------------------------------------------

# Inventories of other projects need the network, which the build machines and CI do not have.
# With DELTACELLS_DOCS_INTERSPHINX=1 (e.g. on a hosted build) they are used; otherwise the types of
# those projects are accepted as plain text through nitpick_ignore_regex below.
_INTERSPHINX = {
    "python": ("https://docs.python.org/3", None),
    "numpy": ("https://numpy.org/doc/stable", None),
    "scipy": ("https://docs.scipy.org/doc/scipy", None),
    "pandas": ("https://pandas.pydata.org/pandas-docs/stable", None),
    "anndata": ("https://anndata.readthedocs.io/en/stable", None),
    "scanpy": ("https://scanpy.readthedocs.io/en/stable", None),
    "fsspec": ("https://filesystem-spec.readthedocs.io/en/latest", None),
    "pyarrow": ("https://arrow.apache.org/docs", None),
    "dask": ("https://docs.dask.org/en/stable", None),
}
intersphinx_mapping = _INTERSPHINX if os.environ.get("DELTACELLS_DOCS_INTERSPHINX") == "1" else {}
intersphinx_disabled_reftypes = ["*"] if not intersphinx_mapping else ["std:doc"]

_EXTERNAL = (
    r"(os|io|typing|collections|pathlib|concurrent|numpy|np|scipy|sparse|pandas|pd|anndata|ad|scanpy|sc"
    r"|fsspec|pyarrow|pa|dask|numba|zstandard|abc|torch|distributed)"
)
nitpick_ignore_regex = [
    # Types of Python and of the projects above (resolved through intersphinx when it is on).
    ("py:.*", rf"{_EXTERNAL}(\..*)?"),
    ("py:class", r"(Any|Callable|Iterator|Iterable|Sequence|Mapping|Path|PathLike|TracebackType|Future)"),
    ("py:class", r"(DTypeLike|ArrayLike|NDArray|AnnData|DataFrame|Series|Index|csr_matrix|spmatrix|CSRDataset)"),
    ("py:class", r"(dtype|ndarray|optional|default|array-like|callable|dict-like|path-like)"),
    ("py:class", r"(None|int|float|str|bytes|bool|dict|list|tuple|type|object|bytearray|memoryview)"),
    ("py:(exc|class)", r"(ValueError|TypeError|KeyError|IndexError|OSError|RuntimeError|FileNotFoundError)"),
    ("py:(exc|class)", r"(FileExistsError|Exception|UserWarning|Warning|BaseException)"),
    ("py:(data|obj)", r"(Ellipsis|NotImplemented|None|True|False)"),
    # Literal values that napoleon reads as types in "x, default ..." descriptions.
    ("py:class", r"[0-9].*|'.*'|\".*\""),
    # Private classes in annotations (deltacells.<package>._<module>.<Name>): not documented, shown as text.
    ("py:class", r"deltacells\.(\w+\.)*_\w+\.\w+"),
]
nitpick_ignore = []

# -- HTML ----------------------------------------------------------------------------------------

html_theme = "sphinx_book_theme"
html_title = "deltacells"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_show_sourcelink = False
html_theme_options = {
    "repository_url": "",
    "use_repository_button": False,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "home_page_in_toc": True,
}
html_context = {"default_mode": "light"}
pygments_style = "default"


# -- Hooks ---------------------------------------------------------------------------------------


def _drop_object_base(app: object, name: str, obj: object, options: object, bases: list) -> None:
    """No "Bases: object" line for plain classes (other bases, e.g. of exceptions, are shown)."""
    if bases == [object]:
        bases.clear()


def setup(app: object) -> None:
    """Connect the hooks above."""
    app.connect("autodoc-process-bases", _drop_object_base)
