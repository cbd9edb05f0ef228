"""Minibatches for model training, straight from the tiles: :class:`CellLoader` and its :class:`Batch`.

The loader shuffles without a pre-shuffled copy (blocks of tiles in a random order, mixed in a bounded window),
shards by rank and by torch DataLoader worker, reads ahead on background threads, and resumes mid-epoch. Its
plan of batches is computed from ``(seed, epoch)`` alone (``_plan``); ``_order`` says in which order the
batches reach the training loop (and which each DataLoader worker gives); ``_source`` resolves what it reads,
and ``_output`` makes each batch's X into scipy, numpy or torch. ``_torch`` (imported only when asked, as it
imports torch) makes the loader a torch ``IterableDataset`` and its ``DataLoader``: ``CellLoader.to_torch()``
and ``CellLoader.dataloader()``; their classes are ``deltacells.loader.CellDataset`` and
``CellDataLoader``, loaded on first use.
"""

import lazy_loader

#: The public names, each with the module it lives in, are written once, in ``__init__.pyi`` (which type
#: checkers read); each name imports its module on first use, so that importing the package stays cheap.
__getattr__, __dir__, _names = lazy_loader.attach_stub(__name__, __file__)

#: Names that need torch stay out of ``__all__``, so that ``from deltacells.loader import *`` does not import it.
_NEED_TORCH = frozenset({"CellDataset", "CellDataLoader"})
__all__ = [name for name in _names if name not in _NEED_TORCH]
