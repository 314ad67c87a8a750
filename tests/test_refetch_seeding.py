"""MapDataset refetch draws from the sample's own generators (mappers.random_state).

The replacement of a request depends only on (seed, position or index, attempt): not on the
process, the worker, or what failed before (the old per-worker generator and exclusion set
made it depend on all three).
"""

from __future__ import annotations

from torch.utils import data

from mappers.datasets import DatasetFromList, MapDataset
from tests.test_datasets import FailSet, _records


def _calls_per_request(ds: MapDataset, mapper: FailSet, requests: list[int]) -> list[list[int]]:
    out = []
    for i in requests:
        mapper.calls.clear()
        ds[i]
        out.append(list(mapper.calls))
    return out


def test_refetch_depends_only_on_seed_index_and_attempt():
    # Old behaviour (the bug): a per-process generator and an exclusion set made the
    # replacement of a request depend on every failure seen before in that process.
    bad = set(range(0, 30, 3))
    mapper = FailSet(bad)
    ds = MapDataset(DatasetFromList(_records(30)), mapper, seed=4)
    forward = _calls_per_request(ds, mapper, sorted(bad))
    again = _calls_per_request(ds, mapper, sorted(bad))
    fresh_mapper = FailSet(bad)
    fresh = MapDataset(DatasetFromList(_records(30)), fresh_mapper, seed=4)
    backward = _calls_per_request(fresh, fresh_mapper, sorted(bad, reverse=True))
    assert forward == again == backward[::-1]
    assert all(calls[0] == i for calls, i in zip(forward, sorted(bad), strict=True))
    assert all(calls[-1] not in bad and all(c in bad for c in calls[:-1]) for calls in forward)
    assert any(len(calls) > 2 for calls in forward)  # some requests needed several attempts
    other = MapDataset(DatasetFromList(_records(30)), FailSet(bad), seed=5)
    assert [other[i]["id"] for i in sorted(bad)] != [calls[-1] for calls in forward]


def _expected_calls(sample_seed: int, bad: set[int], n: int, requested: int) -> list[int]:
    from mappers.random_state import attempt_generator

    calls = [requested]
    while calls[-1] in bad:
        calls.append(int(attempt_generator(sample_seed, len(calls)).integers(n)))
    return calls


def test_refetch_draws_from_the_sample_scope_when_one_is_active():
    from mappers.random_state import index_sample_seed, sample_scope

    bad = set(range(0, 50, 2))
    mapper = FailSet(bad)
    ds = MapDataset(DatasetFromList(_records(50)), mapper, seed=0)
    for requested, sample in [(0, 77), (2, 78), (0, 79)]:
        mapper.calls.clear()
        with sample_scope(sample, seed_globals=False):
            ds[requested]
        assert mapper.calls == _expected_calls(sample, bad, 50, requested)
    mapper.calls.clear()
    ds[4]  # no scope: the sample seed comes from (MapDataset.seed, index)
    assert mapper.calls == _expected_calls(index_sample_seed(0, 4), bad, 50, 4)


def test_refetch_is_the_same_in_every_worker_and_without_workers():
    # Old behaviour (the bug): each worker drew replacements from its own generator.
    bad = set(range(0, 40, 2))
    ds = MapDataset(DatasetFromList(_records(40)), FailSet(bad), seed=5)
    sampler = [i for i in sorted(bad) for _ in range(2)]  # each worker gets each bad index once

    def run(workers):
        loader = data.DataLoader(
            ds, batch_size=None, sampler=sampler, num_workers=workers, collate_fn=lambda x: x
        )
        return [item["id"] for item in loader]

    first = run(2)
    assert first == run(0)
    worker0, worker1 = first[0::2], first[1::2]  # the DataLoader alternates workers
    assert worker0 == worker1
    assert all(x not in bad for x in first)
