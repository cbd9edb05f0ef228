"""``import deltacells`` makes ``scanpy.read_deltacells`` and ``AnnData.write_deltacells`` available.

Nothing that already exists is replaced, with one extension: ``AnnData.to_df`` also loads a lazy deltacells
X (anndata's own passes any matrix that is not scipy's to pandas, which cannot read it); for every other
matrix it is anndata's. scanpy's and fast-array-utils' functions that dispatch on X's type refuse the lazy
X with an error that says to call them on ``.to_memory()``. Neither anndata nor scanpy is imported by
``import deltacells``: each is extended when it is imported (or at once if it already is), through wrapt's
post-import hooks, so that the command line starts fast.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from deltacells.errors import InvalidTypeError

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
        scanpy.read_deltacells = read_deltacells  # type: ignore[attr-defined]  # a name added to scanpy's module
    _refuse_lazy_x(scanpy, SCANPY_DISPATCHERS)


#: Functions of scanpy (and of fast-array-utils, which scanpy 1.12 computes with) that dispatch on X's type
#: (``functools.singledispatch``) and would fail on the lazy X with an error that points nowhere (scanpy's
#: AnnData fallback, or a bare ``NotImplementedError``). ``register`` is a singledispatch function's public API;
#: the functions themselves are the libraries' own (missing ones are skipped: they move between versions).
SCANPY_DISPATCHERS = ("pp.scale", "_utils.check_nonnegative_integers")
FAST_ARRAY_UTILS_DISPATCHERS = (
    "stats._generic_ops.generic_op",
    "stats._is_constant.is_constant_",
    "stats._power._power",
)


def _refuse_lazy_x(module: ModuleType, paths: tuple[str, ...]) -> None:
    """Make each singledispatch function at ``paths`` in ``module`` refuse the lazy X, naming ``.to_memory()``."""
    import importlib

    from deltacells.io._lazy import TiledCSRDataset

    for path in paths:
        parent, _, name = f"{module.__name__}.{path}".rpartition(".")
        try:
            function = getattr(importlib.import_module(parent), name)
        except (ImportError, AttributeError):
            continue
        if getattr(function, "register", None) is not None and TiledCSRDataset not in function.registry:
            function.register(TiledCSRDataset)(_needs_to_memory)


def _needs_to_memory(data: Any, *args: Any, **kwargs: Any) -> Any:
    msg = (
        "this scanpy function needs the matrix in memory, and this X is a lazy deltacells dataset: call it on "
        "adata[cells].to_memory() (or adata.to_memory()), or read with chunks= for a dask X"
    )
    raise InvalidTypeError(msg)


def _add_to_fast_array_utils(fast_array_utils: ModuleType) -> None:
    _refuse_lazy_x(fast_array_utils, FAST_ARRAY_UTILS_DISPATCHERS)


def _add_to_anndata(anndata: ModuleType) -> None:
    if not hasattr(anndata.AnnData, "write_deltacells"):
        anndata.AnnData.write_deltacells = _write_deltacells_method
    to_df = anndata.AnnData.to_df
    if not getattr(to_df, "loads_lazy_deltacells_x", False):
        anndata.AnnData.to_df = _to_df_loading_lazy_x(to_df)


def _to_df_loading_lazy_x(to_df: Any) -> Any:
    """``AnnData.to_df`` that also loads a lazy deltacells X or layer (anndata's own ``to_df`` for anything else)."""

    @functools.wraps(to_df)
    def wrapper(self: ad.AnnData, layer: str | None = None, *args: Any, **kwargs: Any) -> Any:
        from deltacells.io._lazy import TiledCSRDataset

        matrix = self.layers[layer] if layer is not None else (self.X if self._has_X() else None)
        if not isinstance(matrix, TiledCSRDataset):
            return to_df(self, layer, *args, **kwargs)
        import pandas as pd

        return pd.DataFrame(matrix.to_memory().toarray(), index=self.obs_names, columns=self.var_names)

    wrapper.loads_lazy_deltacells_x = True  # type: ignore[attr-defined]
    return wrapper


def attach() -> None:
    """Add ``AnnData.write_deltacells`` and ``scanpy.read_deltacells`` once anndata and scanpy are imported.

    Neither is imported here: the methods are added when they are (at once if they already are).
    """
    import wrapt

    wrapt.register_post_import_hook(_add_to_anndata, "anndata")
    wrapt.register_post_import_hook(_add_to_scanpy, "scanpy")
    wrapt.register_post_import_hook(_add_to_fast_array_utils, "fast_array_utils")
