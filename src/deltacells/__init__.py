"""deltacells: tiled, delta-coded single-cell count matrices for the scverse ecosystem.

``import deltacells`` also makes ``scanpy.read_deltacells`` and ``anndata.AnnData.write_deltacells``
available (nothing that exists is replaced). It imports neither them nor numba: the names below load
their modules on first use, so that ``import deltacells`` and the command line start fast.
"""

from typing import Any

import lazy_loader

from deltacells.io._scverse import attach as _attach

#: The public names, each with the module it lives in, are written once, in ``__init__.pyi`` (which type
#: checkers read); each name imports its module on first use.
_load, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

#: The names whose first use means cells are about to be read: numba's kernels start loading in the background
#: then, while their module (and anndata) is imported (see ``deltacells._kernel_loading``).
_READING = frozenset({"CellLoader", "Dataset", "TiledCSRDataset", "decode_tile", "open_dataset", "read_deltacells"})


def __getattr__(name: str) -> Any:
    if name in _READING:
        from deltacells._kernel_loading import prepare_kernels

        prepare_kernels()
    return _load(name)


_attach()
