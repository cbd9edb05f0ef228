"""``import deltacells`` makes ``scanpy.read_deltacells`` and ``AnnData.write_deltacells`` available.

Nothing that already exists is replaced. scanpy is not imported by deltacells: the
function is added when scanpy is imported (or at once if it already is), through
wrapt's post-import hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    import anndata as ad


def _write_deltacells_method(self: ad.AnnData, path: Any, **options: Any) -> None:
    """Write this AnnData as a deltacells dataset (see :func:`deltacells.write_deltacells`)."""
    from deltacells.io._write import write_deltacells

    write_deltacells(self, path, **options)


def _add_to_scanpy(scanpy: ModuleType) -> None:
    from deltacells.io._read import read_deltacells

    if not hasattr(scanpy, "read_deltacells"):
        scanpy.read_deltacells = read_deltacells


def attach() -> None:
    """Add ``AnnData.write_deltacells`` now and ``scanpy.read_deltacells`` when scanpy is imported."""
    import anndata
    import wrapt

    if not hasattr(anndata.AnnData, "write_deltacells"):
        anndata.AnnData.write_deltacells = _write_deltacells_method
    wrapt.register_post_import_hook(_add_to_scanpy, "scanpy")
