"""The order batches reach the training loop: torch's turn-taking over workers' shares, and resuming it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacells.loader._order import epoch_order, part_of_order


def taken_in_turn(parts: list[list[int]]) -> list[int]:
    """What a torch ``DataLoader`` gives from iterable workers: one item of each in turn, skipping the spent ones."""
    given_: list[int] = []
    queues = [list(part) for part in parts]
    while any(queues):
        given_.extend(queue.pop(0) for queue in queues if queue)
    return given_


def test_one_share_is_the_plans_order():
    batches, shares = epoch_order(7, 1)
    assert batches.tolist() == list(range(7)) and shares.tolist() == [0] * 7


def test_shares_are_contiguous_and_taken_in_turn():
    batches, shares = epoch_order(11, 3)  # shares of 4, 4, 3 batches
    assert batches.tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7]
    assert shares.tolist() == [0, 1, 2] * 3 + [0, 1]
    assert taken_in_turn([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]) == batches.tolist()


@settings(max_examples=300, deadline=None)
@given(
    n_batches=st.integers(0, 40),
    n_shares=st.integers(1, 6),
    n_parts=st.integers(1, 6),
    data=st.data(),
)
def test_parts_taken_in_turn_give_the_rest_of_the_order(n_batches, n_shares, n_parts, data):
    start = data.draw(st.integers(0, n_batches))
    order, _ = epoch_order(n_batches, n_shares)
    parts = []
    for part in range(n_parts):
        streams, turns = part_of_order(n_batches, n_shares, start, part, n_parts)
        taken = [0] * len(streams)
        given_ = []
        for turn in turns.tolist():
            stream = streams[turn].batches
            assert np.all(np.diff(stream) > 0)  # each stream is read as one ascending run
            given_.append(int(stream[taken[turn]]))
            taken[turn] += 1
        assert taken == [len(stream.batches) for stream in streams]
        parts.append(given_)
    assert taken_in_turn(parts) == order[start:].tolist()


@settings(max_examples=200, deadline=None)
@given(n_batches=st.integers(0, 40), n_shares=st.integers(1, 6), data=st.data())
def test_as_many_workers_as_shares_each_read_one_run(n_batches, n_shares, data):
    """Resumed with the workers it started with, each worker gives the rest of one share: consecutive batches."""
    start = data.draw(st.integers(0, n_batches))
    for part in range(n_shares):
        streams, _ = part_of_order(n_batches, n_shares, start, part, n_shares)
        assert len(streams) <= 1
        for stream in streams:
            assert stream.end - stream.first == len(stream.batches)
