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

__all__ = ["CellDataLoader", "CellDataset"]


class CellDataset(torch.utils.data.IterableDataset):
    """A :class:`~deltacells.CellLoader` as a torch ``IterableDataset``: it yields the loader's batches.

    torch's ``DataLoader`` takes a dataset that does not subclass ``IterableDataset`` for a map-style one (and
    would index it); this one iterates the loader. Use it with ``batch_size=None``: each item is already a
    :class:`~deltacells.Batch`. In each ``DataLoader`` worker, the loader takes its own share of the batches.

    Parameters
    ----------
    loader
        The loader to iterate. It is shared, not copied: its :meth:`~deltacells.CellLoader.set_epoch` and
        :meth:`~deltacells.CellLoader.load_state_dict` reach the workers, those started after them and those
        kept between epochs (``persistent_workers``), through the epoch and the position to start from in
        shared memory, which the workers' copies of the loader read as each iteration starts.
    """

    def __init__(self, loader: CellLoader) -> None:
        super().__init__()
        self.loader = loader
        if loader.__dict__.get("_shared") is None:
            import multiprocessing

            loader._shared = multiprocessing.RawArray("q", 3)
            loader._publish()

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


class CellDataLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` over a :class:`CellDataset` (``batch_size=None``) that keeps the loader's place.

    As the training loop gets each batch, the loader in this process counts it, so that its
    :meth:`~deltacells.CellLoader.state_dict` says where the epoch is, workers or not: torch takes one batch
    from each worker in turn, in an order the loader knows (see ``deltacells.loader._order``). Made by
    :meth:`deltacells.CellLoader.dataloader`.
    """

    dataset: CellDataset

    def __iter__(self) -> Iterator[Batch]:
        if self.num_workers == 0:  # the loader is iterated here, and counts its batches itself
            batches: Iterator[Batch] = super().__iter__()
            return batches
        loader = self.dataset.loader
        loader._begin(self.num_workers)  # published before the workers start, or resume, their iteration
        return _Counted(super().__iter__(), loader)


class _Counted:
    """A ``DataLoader``'s iterator whose batches are counted by the loader as they are given."""

    def __init__(self, batches: Iterator[Batch], loader: CellLoader) -> None:
        self._batches = batches
        self._loader = loader

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> Batch:
        batch = next(self._batches)
        self._loader._batches_done += 1
        return batch

    def __len__(self) -> int:
        return len(self._batches)  # type: ignore[arg-type]
