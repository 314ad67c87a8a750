"""samplers.lightning_datamodule: Lightning checkpoints hold the catmap loader position.

Train N steps, checkpoint (by ModelCheckpoint mid-run and by ``trainer.save_checkpoint`` after
``fit``), resume in a new Trainer with ``ckpt_path``: the batches (records and random
features from each sample's generator) after the resume equal those of an uninterrupted run
at the same steps. On 1 process in this process; on 2 DDP processes (gloo, Lightning's own
launcher) in ``slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

from samplers import SamplerStateError  # noqa: E402
from samplers.lightning_datamodule import CatmapDataModule  # noqa: E402
from tests import lightning_resume_run as toy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _ids(batches):
    return [[row[0] for row in batch] for batch in batches]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_on_one_process_continues_with_the_untrained_batches(tmp_path, num_workers):
    full = toy.run(tmp_path, "full", 1, num_workers)
    first = toy.run(tmp_path, "first", 1, num_workers)
    after_end = toy.run(tmp_path, "resume_end", 1, num_workers)
    after_mid = toy.run(tmp_path, "resume_mid", 1, num_workers)
    assert len(full) == toy.STEPS and len({json.dumps(b) for b in full}) == toy.STEPS
    assert first == full[: toy.FIRST]
    # after fit: Lightning had fetched batch FIRST + 1 already; it is trained after resume
    assert after_end == full[toy.FIRST :]
    # the ModelCheckpoint of step MID, saved while the next batch was prefetched
    assert after_mid == full[toy.MID :]
    assert all(row[0] % 7 != 5 for batch in full for row in batch)  # rejections replaced


def test_state_before_training_and_state_checks():
    datamodule = toy.make_datamodule(0)
    assert datamodule.state_dict() == {}
    datamodule.load_state_dict({})  # nothing saved: nothing to do
    for bad in (
        {"format": "other"},
        {"format": "catmap.CatmapDataModule/1", "world_size": 0, "per_rank": []},
        {"format": "catmap.CatmapDataModule/1", "world_size": 2, "per_rank": [None]},
        {"format": "catmap.CatmapDataModule/1", "world_size": 1, "per_rank": ["x"]},
        ["not", "a", "dict"],
    ):
        with pytest.raises(SamplerStateError):
            datamodule.load_state_dict(bad)


def test_a_state_that_does_not_fit_the_loader_is_rejected(tmp_path):
    toy.run(tmp_path, "first", 1, 0)
    import torch

    state = torch.load(tmp_path / "end.ckpt", weights_only=False)["ToyDataModule"]
    other = CatmapDataModule(toy.records(), mapper=toy.features, total_batch_size=6, seed=7)
    other.load_state_dict(state)
    with pytest.raises(SamplerStateError):  # a StateMismatchError: the batch size differs
        other.train_dataloader()


def test_prepare_data_loads_on_this_rank_only_and_keeps_nothing():
    from catalog import DatasetCatalog

    datamodule = toy.make_datamodule(0)
    datamodule.prepare_data()
    assert datamodule.prepared == len(toy.records())
    assert not DatasetCatalog.is_loaded("lightning_toy")  # shared later, on every rank


def test_sampler_config_and_names_as_a_listconfig():
    omegaconf = pytest.importorskip("omegaconf")
    from catalog import DatasetCatalog

    DatasetCatalog.register("lightning_a", toy.records)
    DatasetCatalog.register("lightning_b", toy.records)
    datamodule = CatmapDataModule(
        omegaconf.OmegaConf.create(["lightning_a", "lightning_b"]),
        mapper=toy.features,
        total_batch_size=4,
        seed=1,
        sampler=omegaconf.OmegaConf.create(
            {"name": "RepeatFactorTrainingSampler", "repeat_threshold": 0.6}
        ),
        aspect_ratio_grouping=False,
    )
    batch = next(iter(datamodule.train_dataloader()))
    assert len(batch) == 4
    assert type(datamodule._loader.batch_sampler.sampler).__name__ == "RepeatFactorTrainingSampler"
    assert datamodule._loader.batch_sampler.sampler.dataset_size == 2 * len(toy.records())


README_LIGHTNING_SNIPPET = """
import lightning as L
from samplers.lightning_datamodule import CatmapDataModule

def datamodule():
    return CatmapDataModule(dataset_name, mapper=mapper, total_batch_size=4, seed=7)

trainer = L.Trainer(max_steps=5, accelerator="cpu", logger=False, enable_checkpointing=False)
trainer.fit(model, datamodule=datamodule())
trainer.save_checkpoint(checkpoint)       # holds the loader position (all ranks under DDP)

# a new process, after a crash: the first batch is the one the first run did not train on
resumed = L.Trainer(max_steps=10, accelerator="cpu", logger=False, enable_checkpointing=False)
resumed.fit(model, datamodule=datamodule(), ckpt_path=checkpoint)
"""


def test_readme_lightning_snippet(tmp_path):
    import torch

    reference = toy.run(tmp_path, "full", 1, 0)
    toy.make_datamodule(0)  # registers the dataset
    torch.manual_seed(0)
    model = toy.Tiny()
    scope = {"dataset_name": "lightning_toy", "mapper": toy.features, "model": model,
             "checkpoint": tmp_path / "readme.ckpt"}
    exec(README_LIGHTNING_SNIPPET, scope)  # noqa: S102 - the README text, verbatim
    assert model.seen == reference


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="DDP on CPU with gloo, tested on Linux")
def test_resume_on_two_ddp_processes(tmp_path):
    """Lightning's DDP launcher (2 CPU processes, gloo): every rank resumes its own position,
    and a prepare_data that reads the catalog on local rank 0 does not hang."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), CATMAP_NODE_ID="lightning-test")
    env.pop("LOCAL_RANK", None)
    script = str(ROOT / "tests" / "lightning_resume_run.py")
    for phase in ("full", "first", "resume_end", "resume_mid"):
        try:
            done = subprocess.run(
                [sys.executable, script, str(tmp_path), phase, "2"], cwd=tmp_path, env=env,
                capture_output=True, text=True, timeout=240,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"phase {phase} on 2 DDP processes did not finish in 240 s (a hang?)")
        assert done.returncode == 0, done.stderr[-4000:]
    for rank in (0, 1):
        def seen(phase, rank=rank):
            return json.loads((tmp_path / f"{phase}_rank{rank}.json").read_text())

        full = seen("full")
        assert len(full) == toy.STEPS
        assert seen("first") == full[: toy.FIRST]
        assert seen("resume_end") == full[toy.FIRST :]
        assert seen("resume_mid") == full[toy.MID :]
    # the two ranks trained on different samples (sharded), not on copies
    rank0 = json.loads((tmp_path / "full_rank0.json").read_text())
    rank1 = json.loads((tmp_path / "full_rank1.json").read_text())
    assert _ids(rank0) != _ids(rank1)
    # prepare_data ran on local rank 0 only, and read the whole catalog dataset there
    prepared = json.loads((tmp_path / "first_prepared_rank0.json").read_text())
    assert prepared == len(toy.records())
    assert json.loads((tmp_path / "first_prepared_rank1.json").read_text()) == -1


def test_this_rank_only_loads_without_a_collective_on_two_ranks():
    from tests.dist_helpers import run_distributed
    from tests.this_rank_only_worker import prepare_then_share

    results = run_distributed(prepare_then_share, 2, env={"CATMAP_NODE_ID": "one-node"},
                              deadline=120)
    assert results == [(9, 9, True), (-1, 9, True)]
