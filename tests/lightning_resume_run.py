"""One phase of the Lightning resume tests (run by tests/test_lightning.py, also under DDP).

``python tests/lightning_resume_run.py OUT PHASE [DEVICES]`` trains a tiny linear model on
catmap batches and writes, per rank, the batches its training steps saw to
``OUT/<PHASE>_rank<R>.json``. Phases: ``full`` (10 steps), ``first`` (5 steps, ModelCheckpoint
every 3 steps, then ``trainer.save_checkpoint(OUT/end.ckpt)``), ``resume_end`` (from
``end.ckpt`` to 10 steps), ``resume_mid`` (from the step-3 checkpoint to 10 steps). The
datamodule's ``prepare_data`` reads the catalog (``DatasetCatalog.get``); what it read is
written to ``OUT/<PHASE>_prepared_rank<R>.json`` (-1 where Lightning did not run it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lightning as L  # noqa: E402

from catalog import DatasetCatalog  # noqa: E402
from mappers.random_state import get_generator  # noqa: E402
from samplers.lightning_datamodule import CatmapDataModule  # noqa: E402

STEPS = 10
FIRST = 5
MID = 3


def records() -> list[dict]:
    return [
        {"file_name": f"{i}.jpg", "image_id": i, "height": 4, "width": 6 if i % 3 else 3,
         "annotations": [{"bbox": [0, 0, 2, 2], "bbox_mode": 1, "category_id": i % 2}]}
        for i in range(23)
    ]


def features(record: dict) -> dict | None:
    """A sample: 4 random features from the sample's generator; every 7th record rejected."""
    if record["image_id"] % 7 == 5:
        return None
    values = get_generator().random(4)
    return {"image_id": record["image_id"], "x": torch.as_tensor(values, dtype=torch.float32)}


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list[list[list[float]]] = []

    def training_step(self, batch: list[dict], batch_idx: int) -> torch.Tensor:
        self.seen.append([[s["image_id"], *s["x"].tolist()] for s in batch])
        x = torch.stack([s["x"] for s in batch])
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class ToyDataModule(CatmapDataModule):
    """A user's datamodule whose prepare_data reads the catalog (Lightning runs it on local
    rank 0 only, while the other ranks wait: a collective there would hang)."""

    prepared = -1

    def prepare_data(self) -> None:
        super().prepare_data()
        self.prepared = len(DatasetCatalog.get("lightning_toy"))


def make_datamodule(num_workers: int) -> CatmapDataModule:
    if "lightning_toy" not in DatasetCatalog:
        DatasetCatalog.register("lightning_toy", records)
    return ToyDataModule("lightning_toy", mapper=features, total_batch_size=4, seed=7,
                         num_workers=num_workers)


def trainer(out: Path, steps: int, devices: int, checkpoints: bool) -> L.Trainer:
    callbacks = []
    if checkpoints:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(
            dirpath=out, filename="step{step}", every_n_train_steps=MID, save_top_k=-1,
            auto_insert_metric_name=False))
    return L.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
        max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=checkpoints, callbacks=callbacks, num_sanity_val_steps=0,
    )


def run(out: Path, phase: str, devices: int = 1, num_workers: int = 0) -> list:
    torch.manual_seed(0)
    model = Tiny()
    datamodule = make_datamodule(num_workers)
    if phase == "full":
        fit = trainer(out, STEPS, devices, False)
        fit.fit(model, datamodule=datamodule)
    elif phase == "first":
        fit = trainer(out, FIRST, devices, True)
        fit.fit(model, datamodule=datamodule)
        fit.save_checkpoint(out / "end.ckpt")
    else:
        path = out / ("end.ckpt" if phase == "resume_end" else f"step{MID}.ckpt")
        fit = trainer(out, STEPS, devices, False)
        fit.fit(model, datamodule=datamodule, ckpt_path=path)
    (out / f"{phase}_rank{fit.global_rank}.json").write_text(json.dumps(model.seen))
    (out / f"{phase}_prepared_rank{fit.global_rank}.json").write_text(
        json.dumps(datamodule.prepared))
    return model.seen


if __name__ == "__main__":
    run(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1,
        int(sys.argv[4]) if len(sys.argv) > 4 else 0)
