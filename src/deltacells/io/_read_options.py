"""What ``read_deltacells`` was given that later reads of the same AnnData use, kept on its matrix, not in its uns.

:func:`~deltacells.read_obs` on an AnnData reads more obs columns into the obs cache it was read with, and a
:class:`~deltacells.CellLoader` over it reads a collection's ``label`` column: both find what they need on the
tiles' matrix (the lazy X, or each block of a dask X), which views, copies and ``adata.X = ...`` of scanpy's
keep. Nothing of it is in the AnnData's ``uns``, so nothing of it (a local cache directory) is ever written out
with the AnnData (docs/format.md, decision 13: a round trip gives back the AnnData that was written).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_READ_OPTIONS", "ReadOptions"]


@dataclass(frozen=True)
class ReadOptions:
    """The options of a read that later reads of the same AnnData reuse.

    Attributes
    ----------
    cache_dir
        The obs cache's root given to ``read_deltacells`` (``None``: the default one).
    keys
        A collection's dataset names, in order (the ``label`` column's categories); empty for one dataset.
    label
        A collection's obs column saying which dataset each cell came from (``None``: none).
    """

    cache_dir: str | None = None
    keys: tuple[str, ...] = ()
    label: str | None = None


#: The options of a read given none (and of a matrix no read made).
DEFAULT_READ_OPTIONS = ReadOptions()
