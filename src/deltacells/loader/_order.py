"""The order in which an epoch's batches reach the training loop, with or without ``DataLoader`` workers.

A torch ``DataLoader`` over an iterable dataset takes one item from each worker in turn (worker 0, 1, ...,
skipping a worker once it has no more). The loader gives worker ``w`` of ``n`` a contiguous *share* of the
epoch's batches, the first shares one batch longer when they cannot all be equal, so what the training loop
sees is fixed by the number of shares alone: position ``i`` of the epoch is batch ``i // n`` of share
``i % n``. Without workers there is one share, and the order is the plan's.

That order is what a state counts in (:meth:`~deltacells.CellLoader.state_dict`: ``batches_done`` positions
given, in an order of ``workers`` shares), so a run can resume mid-epoch with or without workers: each
iterating process (the loader itself, or each of a ``DataLoader``'s workers) takes every ``n``-th position
left, which the ``DataLoader`` interleaves back into the same order. With as many workers as shares, each
worker's positions are the rest of one share (contiguous batches); otherwise a process reads from several
shares at once, each a run of batches read ahead on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Stream", "epoch_order", "part_of_order"]


def epoch_order(n_batches: int, n_shares: int) -> tuple[np.ndarray, np.ndarray]:
    """The epoch's batches in the order they are given, and the share each comes from.

    Parameters
    ----------
    n_batches
        Batches in the epoch (the rank's).
    n_shares
        Contiguous shares of the batches, given in turn (``DataLoader`` workers; 1 without them).
    """
    n_shares = max(1, int(n_shares))
    base, extra = divmod(n_batches, n_shares)
    sizes = np.full(n_shares, base, dtype=np.int64)
    sizes[:extra] += 1  # the first shares are the longer ones: taken in turn, they are taken in position order
    starts = np.cumsum(sizes) - sizes
    position = np.arange(n_batches, dtype=np.int64)
    share = position % n_shares
    return starts[share] + position // n_shares, share


@dataclass(frozen=True)
class Stream:
    """Batches of one share that one process gives, ascending: read as one run ``[first, end)``."""

    batches: np.ndarray

    @property
    def first(self) -> int:
        return int(self.batches[0])

    @property
    def end(self) -> int:
        return int(self.batches[-1]) + 1


def part_of_order(
    n_batches: int, n_shares: int, start: int, part: int = 0, n_parts: int = 1
) -> tuple[list[Stream], np.ndarray]:
    """What one process gives of an epoch's order from position ``start`` on: every ``n_parts``-th position.

    Parameters
    ----------
    n_batches, n_shares
        The epoch's order (:func:`epoch_order`).
    start
        Positions already given.
    part, n_parts
        This process among those giving the rest in turn (a ``DataLoader`` worker's id and the number of
        workers; ``0, 1`` for the loader iterated itself).

    Returns
    -------
    streams
        The batches this process gives, one stream per share they come from.
    turns
        For each batch given, in order, the stream it is taken from (each stream's batches come in its order).
    """
    batches, share = epoch_order(n_batches, n_shares)
    positions = np.arange(start + part, n_batches, max(1, n_parts), dtype=np.int64)
    shares, turns = np.unique(share[positions], return_inverse=True)
    streams = [Stream(batches[positions[turns == k]]) for k in range(shares.shape[0])]
    return streams, turns.astype(np.int64, copy=False)
