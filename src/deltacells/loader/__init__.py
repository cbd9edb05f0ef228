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

from deltacells._lazy import lazy_names
from deltacells.loader._loader import Batch, CellLoader
from deltacells.loader._output import OUTPUTS

__all__ = ["OUTPUTS", "Batch", "CellLoader"]

#: Names that need torch: their module is imported on first use (and they stay out of ``__all__``, so that
#: ``from deltacells.loader import *`` does not import torch).
_LAZY = {"CellDataset": "deltacells.loader._torch", "CellDataLoader": "deltacells.loader._torch"}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
