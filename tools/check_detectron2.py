"""Train detectron2's own Mask R-CNN R50-FPN on catmap's loader, unchanged, and evaluate it.

A check with a client nobody here wrote: detectron2's model, ``SimpleTrainer``,
``inference_on_dataset`` and ``COCOEvaluator`` take the batches of catmap's
``build_detection_train_loader(cfg, mapper=DatasetMapper(cfg, is_train=True))`` and
``build_detection_test_loader`` as they come. The model is detectron2's
``COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml`` on the CPU, without weights, on a small
generated shapes dataset (tiny images). detectron2 need not be built: its source tree works
(the R50-FPN ops come from torchvision).

Usage (detectron2 is not on the package index; put a checkout on PYTHONPATH after this
repository, whose ``tools`` package would otherwise be shadowed by detectron2's)::

    PYTHONPATH=.:/path/to/detectron2 python -m tools.check_detectron2 --iters 20

Prints the total loss of the first and last iterations and the COCO bbox/segm results; exits 1
when the loss did not fall.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from catalog import MetadataCatalog
from mappers import DatasetMapper
from samplers import build_detection_test_loader, build_detection_train_loader
from tools.shapes_render import SHAPE_CLASSES
from tools.shapes_dataset import generate_shapes_dataset, register_shapes_dataset

_CONFIG = "COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml"


def _config(train: str, test: str, workers: int):
    """detectron2's Mask R-CNN config, shrunk to tiny images on the CPU."""
    from detectron2.config import get_cfg

    cfg = get_cfg()
    package = Path(sys.modules["detectron2"].__file__).parent  # a source tree or an install
    source_tree = package.parent / "configs" / _CONFIG
    cfg.merge_from_file(str(source_tree if source_tree.is_file()
                            else package / "model_zoo" / "configs" / _CONFIG))
    cfg.MODEL.DEVICE = "cpu"
    cfg.MODEL.WEIGHTS = ""  # from scratch: trainable BatchNorm keeps the untrained net stable
    cfg.MODEL.RESNETS.NORM, cfg.MODEL.BACKBONE.FREEZE_AT = "BN", 0
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = len(SHAPE_CLASSES)
    cfg.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE = 64
    cfg.DATASETS.TRAIN, cfg.DATASETS.TEST = (train,), (test,)
    cfg.INPUT.MIN_SIZE_TRAIN, cfg.INPUT.MAX_SIZE_TRAIN = (96, 128), 160
    cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST = 128, 160
    cfg.SOLVER.IMS_PER_BATCH, cfg.SOLVER.BASE_LR = 2, 0.002
    cfg.SOLVER.CLIP_GRADIENTS.ENABLED = True  # no pretrained weights: keep the start stable
    cfg.DATALOADER.NUM_WORKERS = workers
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default=None, help="dataset directory (default: a temp dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from detectron2.data import MetadataCatalog as D2MetadataCatalog
    from detectron2.engine import SimpleTrainer
    from detectron2.evaluation import COCOEvaluator, inference_on_dataset
    from detectron2.modeling import build_model
    from detectron2.solver import build_optimizer

    torch.manual_seed(0)
    root = Path(args.out or tempfile.mkdtemp(prefix="catmap_d2_"))
    train = register_shapes_dataset("d2check_train", generate_shapes_dataset(
        root / "train", num_images=args.images, seed=0, image_sizes=[(128, 96), (96, 128)]))
    test = register_shapes_dataset("d2check_test", generate_shapes_dataset(
        root / "test", num_images=max(4, args.images // 4), seed=1,
        image_sizes=[(128, 96), (96, 128)]))
    cfg = _config(train, test, args.workers)
    model = build_model(cfg)
    loader = build_detection_train_loader(cfg, mapper=DatasetMapper(cfg, is_train=True))
    first = next(iter(loader))[0]["instances"]
    print(f"batch instances: {type(first).__module__}.{type(first).__name__}, "
          f"gt_boxes: {type(first.gt_boxes).__module__}.{type(first.gt_boxes).__name__}")
    trainer = SimpleTrainer(model, loader, build_optimizer(cfg, model))
    trainer.train(0, args.iters)
    losses = [value for value, _ in trainer.storage.history("total_loss").values()]
    print(f"total_loss: iteration 1 {losses[0]:.3f}, iteration {len(losses)} {losses[-1]:.3f}; "
          f"mean of first 5 {sum(losses[:5]) / 5:.3f}, last 5 {sum(losses[-5:]) / 5:.3f}")

    test_loader = build_detection_test_loader(cfg, test)
    # COCOEvaluator reads the annotation file from detectron2's own metadata catalog.
    meta = MetadataCatalog.get(test)
    D2MetadataCatalog.get(test).set(
        json_file=meta.json_file, thing_classes=list(meta.thing_classes),
        thing_dataset_id_to_contiguous_id=dict(meta.thing_dataset_id_to_contiguous_id))
    evaluator = COCOEvaluator(test, tasks=("bbox", "segm"), distributed=False,
                              output_dir=str(root / "eval"))
    results = inference_on_dataset(model, test_loader, evaluator)
    print("inference_on_dataset:", {task: round(r["AP"], 3) for task, r in results.items()})
    return 0 if sum(losses[-5:]) < sum(losses[:5]) else 1


if __name__ == "__main__":
    sys.exit(main())
