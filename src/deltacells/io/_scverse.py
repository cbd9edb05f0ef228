"""``import deltacells`` makes ``scanpy.read_deltacells`` and ``AnnData.write_deltacells`` available.

Nothing that already exists is replaced. Neither anndata nor scanpy is imported by
``import deltacells``: each is extended when it is imported (or at once if it already is),
through wrapt's post-import hooks, so that the command line starts fast.
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
    _refuse_lazy_x(scanpy)


def _refuse_lazy_x(scanpy: ModuleType) -> None:
    """Scanpy functions that dispatch on X's type (``functools.singledispatch``) refuse the lazy X by name.

    Without this they fall through to their AnnData variant and fail with an error that points nowhere;
    ``register`` is the public API of a singledispatch function.
    """
    from deltacells.errors import InvalidTypeError
    from deltacells.io._lazy import TiledCSRDataset

    for name in ("scale",):
        function = getattr(scanpy.pp, name, None)
        register = getattr(function, "register", None)
        if register is None or TiledCSRDataset in function.registry:
            continue

        def needs_to_memory(data: TiledCSRDataset, *args: Any, _name: str = name, **kwargs: Any) -> Any:
            msg = (
                f"scanpy.pp.{_name} needs the matrix in memory, and this X is a lazy deltacells dataset: call it "
                "on adata[cells].to_memory() (or adata.to_memory())"
            )
            raise InvalidTypeError(msg)

        register(TiledCSRDataset)(needs_to_memory)


def _add_to_anndata(anndata: ModuleType) -> None:
    if not hasattr(anndata.AnnData, "write_deltacells"):
        anndata.AnnData.write_deltacells = _write_deltacells_method


def attach() -> None:
    """Add ``AnnData.write_deltacells`` and ``scanpy.read_deltacells`` once anndata and scanpy are imported.

    Neither is imported here: the methods are added when they are (at once if they already are).
    """
    import wrapt

    wrapt.register_post_import_hook(_add_to_anndata, "anndata")
    wrapt.register_post_import_hook(_add_to_scanpy, "scanpy")
