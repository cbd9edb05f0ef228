"""``import deltacells`` makes ``scanpy.read_deltacells`` and ``AnnData.write_deltacells`` available.

Nothing that already exists is replaced, with these extensions (for every other matrix, anndata's own):

- ``AnnData.to_df`` also loads a lazy deltacells X (anndata's own passes any matrix that is not scipy's to
  pandas, which cannot read it);
- ``anndata.io.write_h5ad`` (which ``AnnData.write_h5ad`` calls) notes its ``as_dense``, so that a lazy X asked
  dense is written dense, and ``AnnData.__sizeof__`` tells the lazy X when it is asked ``with_disk=True``, so
  that the tiles' bytes on disk are counted (see :mod:`deltacells._internals`);
- ``anndata.tests.helpers.assert_equal`` (anndata's test helpers, imported by tests only) compares a lazy X
  by its values, as it compares anndata's own backed datasets.

scanpy's and fast-array-utils' functions that dispatch on X's type refuse the lazy X with an error that says
to call them on ``.to_memory()``. Neither anndata nor scanpy is imported by ``import deltacells``: each is
extended when it is imported (or at once if it already is), through wrapt's post-import hooks, so that the
command line starts fast.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from deltacells import _internals
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
    _refuse_lazy_x("scanpy")


def _refuse_lazy_x(library: str) -> None:
    """Make ``library``'s functions that dispatch on X's type refuse the lazy X, naming ``.to_memory()``.

    They are scanpy's and fast-array-utils' (which scanpy 1.12 computes with) singledispatch functions that would
    fail on the lazy X with an error that points nowhere (scanpy's AnnData fallback, or a bare
    ``NotImplementedError``), listed in :data:`deltacells._internals.SINGLEDISPATCH_ON_X`; ``register`` is a
    singledispatch function's public API, the functions themselves are the libraries' own.
    """
    from deltacells.io._lazy import TiledCSRDataset

    for function in _internals.singledispatch_on_x(library):
        if TiledCSRDataset not in function.registry:
            function.register(TiledCSRDataset)(_needs_to_memory)


def _needs_to_memory(data: Any, *args: Any, **kwargs: Any) -> Any:
    msg = (
        "this scanpy function needs the matrix in memory, and this X is a lazy deltacells dataset: call it on "
        "adata[cells].to_memory() (or adata.to_memory()), or read with chunks= for a dask X"
    )
    raise InvalidTypeError(msg)


def _add_to_fast_array_utils(fast_array_utils: ModuleType) -> None:
    _refuse_lazy_x("fast_array_utils")


def _add_to_anndata(anndata: ModuleType) -> None:
    import importlib

    if not hasattr(anndata.AnnData, "write_deltacells"):
        anndata.AnnData.write_deltacells = _write_deltacells_method
    to_df = anndata.AnnData.to_df
    if not getattr(to_df, "loads_lazy_deltacells_x", False):
        anndata.AnnData.to_df = _to_df_loading_lazy_x(to_df)
    # write_h5ad(as_dense=("X",)) writes a lazy X dense, and __sizeof__(with_disk=True) counts its tiles.
    _internals.note_h5ad_as_dense(importlib.import_module("anndata.io"))
    _internals.note_sizeof_with_disk(anndata.AnnData)


def _add_to_anndata_test_helpers(helpers: ModuleType) -> None:
    """Make ``anndata.tests.helpers.assert_equal`` compare a lazy X, as it compares anndata's backed datasets."""
    from deltacells.io._lazy import TiledCSRDataset

    _internals.register_assert_equal(TiledCSRDataset, _assert_equal_lazy_x)


def _assert_equal_lazy_x(a: Any, b: object, *, exact: bool = False, elem_name: str | None = None) -> None:
    """The ``assert_equal`` of anndata's test helpers for a lazy X: its values, densified, against ``b``.

    As anndata compares its own backed datasets (``anndata.utils.asarray``, then ``assert_equal(b, dense)``).
    """
    _internals.anndata_assert_equal()(b, a.to_memory().toarray(), exact=exact, elem_name=elem_name)


def _to_df_loading_lazy_x(to_df: Any) -> Any:
    """``AnnData.to_df`` that also loads a lazy deltacells X or layer (anndata's own ``to_df`` for anything else)."""

    @functools.wraps(to_df)
    def wrapper(self: ad.AnnData, layer: str | None = None, *args: Any, **kwargs: Any) -> Any:
        from deltacells.io._lazy import TiledCSRDataset

        if layer is None and self.isbacked:  # anndata's own backed X (a deltacells X is never backed)
            return to_df(self, layer, *args, **kwargs)
        matrix = self.layers[layer] if layer is not None else self.X
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
    wrapt.register_post_import_hook(_add_to_anndata_test_helpers, "anndata.tests.helpers")
