"""Minibatches for model training, straight from the tiles: :class:`CellLoader` and its :class:`Batch`.

The loader shuffles without a pre-shuffled copy (blocks of tiles in a random order, mixed in a bounded window),
shards by rank and by torch DataLoader worker, reads ahead on background threads, and resumes mid-epoch. Its
plan of batches is computed from ``(seed, epoch)`` alone (``_plan``); ``_source`` resolves what it reads, and
``_output`` makes each batch's X into scipy, numpy or torch.
"""

from deltacells.loader._loader import Batch, CellLoader
from deltacells.loader._output import OUTPUTS

__all__ = ["OUTPUTS", "Batch", "CellLoader"]
