"""Rate-limited warnings: the first few of a kind across the training process and all of its
DataLoader workers (fork and spawn), then counts and one summary line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from catalog._common import FIRST_PER_KIND, counts, log_summary, shared_counters, warn_limited

log = logging.getLogger("tests.log_limits")


class WarnEveryIndex(Dataset):
    def __init__(self, kind: str, n: int) -> None:
        self.kind, self.n = kind, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> bool:
        return warn_limited(log, self.kind, "record %d is unusable", index)


def test_first_few_then_counted(caplog):
    caplog.set_level(logging.WARNING)
    logged = [warn_limited(log, "test.first_few", "item %d", i) for i in range(10)]
    assert logged == [True] * FIRST_PER_KIND + [False] * (10 - FIRST_PER_KIND)
    lines = [r.getMessage() for r in caplog.records if r.name == "tests.log_limits"]
    assert len(lines) == FIRST_PER_KIND and "summarized at exit" in lines[-1]
    assert counts()["test.first_few"] == 10
    caplog.clear()
    suppressed = log_summary()
    assert suppressed["test.first_few"] == 10 - FIRST_PER_KIND
    assert any("7 more warnings of kind 'test.first_few'" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_limit_holds_across_workers(context):
    shared_counters()  # created in the training process before the workers start
    kind = f"test.workers.{context}"
    loader = DataLoader(WarnEveryIndex(kind, 40), batch_size=4, num_workers=2,
                        multiprocessing_context=context)
    logged = torch.cat([batch for batch in loader])
    assert int(logged.sum()) == FIRST_PER_KIND  # not FIRST_PER_KIND per worker
    assert counts()[kind] == 40  # every warning counted, whichever worker raised it


def test_summary_at_exit_of_the_creating_process():
    code = textwrap.dedent("""
        import logging
        from catalog._common import warn_limited
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        for i in range(50):
            warn_limited(logging.getLogger("x"), "exit.kind", "bad record %d", i)
    """)
    env = {k: v for k, v in os.environ.items() if k != "CATMAP_WARNING_COUNTERS"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True, env=env)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == FIRST_PER_KIND + 1
    assert lines[-1] == f"{50 - FIRST_PER_KIND} more warnings of kind 'exit.kind' were not " \
                        "logged (50 in all)"


def test_map_dataset_refetch_warnings_are_rate_limited(caplog):
    from mappers import DatasetFromList, MapDataset

    records = [{"file_name": f"{i}.jpg", "i": i} for i in range(60)]
    dataset = MapDataset(DatasetFromList(records),
                         lambda r: None if r["i"] % 2 else r["i"], seed=0)
    before = counts().get("MapDataset.refetch", 0)
    assert before == 0  # the conftest resets the counters before each test
    caplog.set_level(logging.WARNING)
    for index in range(1, 60, 2):  # every odd index fails once, then a replacement is used
        assert dataset[index] % 2 == 0
    after = counts()["MapDataset.refetch"]
    assert after - before >= 30  # every failure is counted
    lines = [r for r in caplog.records if "mapped to None" in r.getMessage()]
    assert len(lines) == FIRST_PER_KIND


def test_kinds_whose_hashes_collide_count_apart():
    from catalog._log_limits import _slot, register_kind

    base = "collide.base"
    other = next(f"collide.{i}" for i in range(100_000) if _slot(f"collide.{i}") == _slot(base)
                 and f"collide.{i}" != base)
    assert register_kind(base) != register_kind(other)
    log_ = logging.getLogger("tests.collide")
    warn_limited(log_, base, "a")
    warn_limited(log_, other, "b")
    warn_limited(log_, other, "b")
    assert counts()[base] == 1 and counts()[other] == 2
