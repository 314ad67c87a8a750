"""Why ResumableLoader is not built on torchdata's StatefulDataLoader (issue 15, item 4).

The module docstring of :mod:`samplers.loader` gives the reasons; these tests keep
them observed. A failure here means torchdata lifted a limitation: re-evaluate the choice.
"""

from __future__ import annotations

import pytest

from samplers import ResumableBatchSampler, ResumableLoader, TrainingSampler
from tests.optional_imports import import_or_skip

stateful_dataloader = import_or_skip("torchdata.stateful_dataloader")


def _batches() -> ResumableBatchSampler:
    return ResumableBatchSampler(TrainingSampler(200, seed=0, rank=0, world_size=1), 4)


def _stateful(num_workers: int, every: int = 1) -> object:
    kwargs: dict = {"num_workers": num_workers, "collate_fn": list, "snapshot_every_n_steps": every}
    if num_workers:
        kwargs["multiprocessing_context"] = "fork"
    return stateful_dataloader.StatefulDataLoader(
        list(range(200)), batch_sampler=_batches(), **kwargs
    )


def _catmap(num_workers: int) -> ResumableLoader:
    return ResumableLoader(
        list(range(200)), _batches(), num_workers=num_workers, collate_fn=list, seed=0,
        multiprocessing_context="fork" if num_workers else None, transport="dataloader",
    )


def _take(loader: object, n: int) -> tuple[list, object]:
    it = iter(loader)
    return [next(it) for _ in range(n)], it


def _state_and_next_two(loader: object) -> tuple[dict, list]:
    """The loader's state after 3 batches and the 2 batches it yields next."""
    _, it = _take(loader, 3)
    state = loader.state_dict()
    return state, [next(it) for _ in range(2)]


def test_stateful_dataloader_state_is_tied_to_num_workers() -> None:
    state, expected = _state_and_next_two(_stateful(2))
    same = _stateful(2)
    same.load_state_dict(state)
    assert _take(same, 2)[0] == expected
    for workers in (0, 3):
        other = _stateful(workers)
        with pytest.raises((AssertionError, KeyError)):
            other.load_state_dict(state)
            _take(other, 1)


def test_stateful_dataloader_replays_batches_between_snapshots() -> None:
    source = _stateful(2, every=50)
    _, it = _take(source, 40)
    state = source.state_dict()
    del it
    assert state["_steps_since_snapshot"] == 40  # mapped again on load


def test_resumable_loader_state_loads_with_any_num_workers() -> None:
    state, expected = _state_and_next_two(_catmap(2))
    for workers in (0, 3):
        other = _catmap(workers)
        other.load_state_dict(state)
        assert _take(other, 2)[0] == expected
