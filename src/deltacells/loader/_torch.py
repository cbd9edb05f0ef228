"""A :class:`CellLoader` as a torch ``IterableDataset``, for a torch ``DataLoader``.

This module imports torch at its top: it is imported only by :meth:`CellLoader.to_torch` and
:meth:`CellLoader.dataloader`, never by ``import deltacells``. Its classes are defined at module level, so that
the dataset pickles by reference, as a ``DataLoader`` with ``multiprocessing_context="spawn"`` needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch.utils.data

if TYPE_CHECKING:
    from deltacells.loader._loader import Batch, CellLoader

__all__ = ["CellDataset"]


class CellDataset(torch.utils.data.IterableDataset):
    """A :class:`~deltacells.CellLoader` as a torch ``IterableDataset``: it yields the loader's batches.

    torch's ``DataLoader`` takes a dataset that does not subclass ``IterableDataset`` for a map-style one (and
    would index it); this one iterates the loader. Use it with ``batch_size=None``: each item is already a
    :class:`~deltacells.Batch`. In each ``DataLoader`` worker, the loader takes its own share of the batches.

    Parameters
    ----------
    loader
        The loader to iterate. It is shared, not copied: its :meth:`~deltacells.CellLoader.set_epoch` reaches
        the workers, those started after it and those kept between epochs (``persistent_workers``), through
        an epoch number in shared memory that the workers' copies of the loader read as each epoch starts.
    """

    def __init__(self, loader: CellLoader) -> None:
        super().__init__()
        self.loader = loader
        if loader.__dict__.get("_shared_epoch") is None:
            import multiprocessing

            loader._shared_epoch = multiprocessing.RawValue("q", loader.epoch)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.loader)

    def __len__(self) -> int:
        """Batches per epoch (the loader's rank's, over all workers)."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """The loader's :meth:`~deltacells.CellLoader.set_epoch` (called on a dataset by, e.g., accelerate)."""
        self.loader.set_epoch(epoch)

    def __repr__(self) -> str:
        return f"CellDataset({self.loader!r})"
