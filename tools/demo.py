"""catmap demo: from an annotation file to resumable, class-balanced training batches.

Run it with no arguments::

    python -m tools.demo                      # defaults: 300 batches of 8, 2 workers
    python -m tools.demo --batches 50 --workers 0 --out /tmp/demo --seed 1

What it does, step by step:

1. generates (first run) or reuses a small COCO dataset of coloured shapes with deliberately
   unbalanced classes, in ``$CATMAP_DEMO_DIR`` or ``~/.cache/catmap-demo``;
2. registers it by name and prints its metadata and class histogram;
3. builds a train loader: ``DatasetMapper`` (ResizeShortestEdge + RandomFlip),
   ``RepeatFactorTrainingSampler``, aspect-ratio grouping, DataLoader workers;
4. iterates the batches with a samples/s progress bar and compares how often each class was
   drawn with a plain ``TrainingSampler`` and with repeat-factor sampling;
5. saves the loader state, builds a fresh loader from it and checks that its next batch is the
   one the first loader produces next: the same records with identical augmented image tensors,
   boxes, classes and polygons (each sample's augmentations are seeded from its position in
   the sampler's stream, so they do not depend on workers or restarts);
6. writes a PNG grid of augmented samples with boxes, polygons and class names.

The exit status is 0 when everything, the resume check included, succeeded.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from ._bench_common import HelpFormatter
from .demo_resume import batch_signature, samples_equal
from .demo_stats import (
    class_counts_of_indices,
    format_table,
    per_record_class_counts,
    text_bar,
    to_numpy,
)
from .draw import draw_sample, make_grid
from .shapes_dataset import (
    default_demo_dir,
    generate_shapes_dataset,
    register_shapes_dataset,
)

__all__ = [
    "DemoResult",
    "build_train_loader",
    "class_counts_of_indices",
    "format_table",
    "main",
    "per_record_class_counts",
    "run_demo",
]

DATASET_NAME = "shapes_train"
GRID_SAMPLES = 12


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 74 - len(title)), flush=True)


def build_train_loader(
    dataset_dicts: Any,
    repeat_factors: Any,
    *,
    batch_size: int,
    num_workers: int,
    seed: int,
    short_edges: Sequence[int] = (224, 256, 288),
    max_size: int = 480,
):
    """Build the demo's train loader: DatasetMapper(ResizeShortestEdge, RandomFlip) with a
    RepeatFactorTrainingSampler and aspect-ratio grouping.

    Example:
        >>> loader = build_train_loader(dicts, factors, batch_size=8, num_workers=2, seed=0)  # doctest: +SKIP
    """
    from mappers import DatasetMapper
    from mappers.transforms import RandomFlip, ResizeShortestEdge
    from samplers import RepeatFactorTrainingSampler, build_detection_train_loader

    mapper = DatasetMapper(
        is_train=True,
        augmentations=[
            ResizeShortestEdge(tuple(short_edges), max_size=max_size, sample_style="choice"),
            RandomFlip(prob=0.5, horizontal=True),
        ],
        image_format="RGB",
        use_instance_mask=True,
    )
    sampler = RepeatFactorTrainingSampler(repeat_factors, shuffle=True, seed=seed)
    return build_detection_train_loader(
        dataset_dicts,
        mapper=mapper,
        sampler=sampler,
        total_batch_size=batch_size,
        aspect_ratio_grouping=True,
        num_workers=num_workers,
        seed=seed,
    )


class DemoResult:
    """What a demo run produced (returned by :func:`run_demo` for tests and notebooks).

    Attributes:
        samples_per_second: loader throughput over the timed batches.
        drawn_uniform: instances per class drawn by a plain TrainingSampler.
        drawn_repeat: instances per class in the batches the repeat-factor loader produced.
        resume_ok: whether the restored loader's next batch matched.
        grid_path: the PNG written.
        state_path: the saved loader state.
    """

    def __init__(self) -> None:
        self.samples_per_second = 0.0
        self.drawn_uniform = np.zeros(0, dtype=np.int64)
        self.drawn_repeat = np.zeros(0, dtype=np.int64)
        self.resume_ok = False
        self.grid_path: Path | None = None
        self.state_path: Path | None = None


def run_demo(
    *,
    batches: int = 300,
    workers: int = 2,
    out: Path | None = None,
    seed: int = 0,
    batch_size: int = 8,
    num_images: int = 300,
    data_dir: Path | None = None,
    repeat_thresh: float = 0.5,
    progress: bool = True,
) -> DemoResult:
    """Run the whole demo, printing as it goes; see the module docstring.

    Raises:
        ValueError: a setting is out of range.
    """
    if batches < 1:
        raise ValueError(f"--batches must be at least 1, got {batches}")
    if workers < 0:
        raise ValueError(f"--workers must be >= 0, got {workers}")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {batch_size}")
    import torch

    from catalog import DatasetCatalog, MetadataCatalog, get_detection_dataset_dicts
    from samplers import TrainingSampler, repeat_factors_from_category_frequency

    result = DemoResult()
    demo_dir = default_demo_dir()
    out = Path(out) if out is not None else demo_dir / "output"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    # 1. dataset -------------------------------------------------------------------------
    _section("1. Dataset")
    t0 = time.perf_counter()
    shapes = generate_shapes_dataset(data_dir or demo_dir / "shapes", num_images=num_images, progress=progress)
    action = "generated" if shapes.generated else "reused"
    print(f"{action} {shapes.num_images} images / {shapes.num_annotations} shapes "
          f"in {time.perf_counter() - t0:.1f}s: {shapes.root}")  # fmt: skip
    if DATASET_NAME in DatasetCatalog:  # run_demo called twice in one process
        DatasetCatalog.remove(DATASET_NAME)
        MetadataCatalog.remove(DATASET_NAME)
    register_shapes_dataset(DATASET_NAME, shapes)
    dataset_dicts = get_detection_dataset_dicts(DATASET_NAME)
    meta = MetadataCatalog.get(DATASET_NAME)
    classes = list(meta.thing_classes)
    num_classes = len(classes)
    print(f"registered {DATASET_NAME!r}: {len(dataset_dicts)} records, "
          f"{dataset_dicts.nbytes / 2**10:.0f} KiB serialized in one shared buffer")  # fmt: skip
    print("metadata:")
    for key, value in sorted(meta.as_dict().items()):
        print(f"  {key:<36} {value}")

    per_record = per_record_class_counts(dataset_dicts.columns, num_classes)
    per_class = per_record.sum(axis=0)
    images_per_class = (per_record > 0).sum(axis=0)
    total = max(int(per_class.sum()), 1)
    rows = [
        [classes[c], int(images_per_class[c]), int(per_class[c]), f"{100 * per_class[c] / total:5.1f}%",
         text_bar(per_class[c] / max(per_class.max(), 1))]
        for c in range(num_classes)
    ]  # fmt: skip
    print("\nclass histogram:")
    print(format_table(["class", "images", "instances", "share", ""], rows))

    # 2. sampler and loader ---------------------------------------------------------------
    _section("2. Train loader")
    repeat_factors = to_numpy(repeat_factors_from_category_frequency(dataset_dicts, repeat_thresh))
    print(f"repeat factors at threshold {repeat_thresh}: min {repeat_factors.min():.2f}, "
          f"mean {repeat_factors.mean():.2f}, max {repeat_factors.max():.2f} "
          f"(an epoch grows from {len(repeat_factors)} to ~{repeat_factors.sum():.0f} images)")  # fmt: skip
    loader = build_train_loader(
        dataset_dicts, repeat_factors, batch_size=batch_size, num_workers=workers, seed=seed
    )
    print("DatasetMapper(ResizeShortestEdge((224, 256, 288), max_size=480), RandomFlip(prob=0.5))")
    print(f"RepeatFactorTrainingSampler(seed={seed}), aspect-ratio grouping, "
          f"batch size {batch_size}, {workers} DataLoader worker(s)")  # fmt: skip

    # 3. iterate ---------------------------------------------------------------------------
    _section(f"3. Iterating {batches} batches")
    drawn_repeat = np.zeros(num_classes, dtype=np.int64)
    grid_samples: list[dict] = []
    grid_ids: set[Any] = set()
    iterator = iter(loader)
    bar = None
    if progress:
        try:
            from tqdm import tqdm
        except ImportError:
            print("(tqdm is not installed: no progress bar; pip install tqdm)")
        else:
            bar = tqdm(total=batches * batch_size, unit="img", desc="loading", dynamic_ncols=True,
                       file=sys.stdout)  # fmt: skip
    t_first = None
    t_start = time.perf_counter()
    for _ in range(batches):
        batch = next(iterator)
        if t_first is None:
            t_first = time.perf_counter()
        for sample in batch:
            instances = sample.get("instances")
            if instances is not None and len(instances):
                cls = to_numpy(instances.gt_classes).astype(np.int64)
                drawn_repeat += np.bincount(cls, minlength=num_classes)[:num_classes]
            if len(grid_samples) < GRID_SAMPLES and sample.get("image_id") not in grid_ids:
                grid_samples.append(sample)
                grid_ids.add(sample.get("image_id"))
        if bar is not None:
            bar.update(len(batch))
    t_end = time.perf_counter()
    elapsed = t_end - t_start
    if bar is not None:
        bar.close()
    steady = t_end - t_first if batches > 1 else elapsed
    result.samples_per_second = (batches - 1) * batch_size / steady if batches > 1 else batch_size / elapsed
    print(f"{batches * batch_size} samples in {elapsed:.1f}s: "
          f"{result.samples_per_second:.0f} samples/s after the first batch "
          f"(first batch {t_first - t_start:.2f}s, worker start-up included)")  # fmt: skip

    # class draws: plain TrainingSampler (index space, no loading) vs the loaded batches
    uniform = TrainingSampler(len(dataset_dicts), shuffle=True, seed=seed)
    uniform_indices = np.fromiter(islice(iter(uniform), batches * batch_size), dtype=np.int64)
    drawn_uniform = class_counts_of_indices(per_record, uniform_indices)
    result.drawn_uniform, result.drawn_repeat = drawn_uniform, drawn_repeat
    tot_u, tot_r = max(int(drawn_uniform.sum()), 1), max(int(drawn_repeat.sum()), 1)
    rows = []
    for c in range(num_classes):
        share_u, share_r = drawn_uniform[c] / tot_u, drawn_repeat[c] / tot_r
        change = f"x{share_r / share_u:.2f}" if share_u > 0 else "n/a"
        rows.append([classes[c], int(drawn_uniform[c]), f"{100 * share_u:5.1f}%",
                     int(drawn_repeat[c]), f"{100 * share_r:5.1f}%", change])  # fmt: skip
    print(f"\ninstances drawn per class over {batches * batch_size} samples:")
    print(format_table(
        ["class", "TrainingSampler", "share", "RepeatFactor", "share", "change"], rows
    ))  # fmt: skip
    rare = int(np.argmin(per_class))
    print(f"rarest class {classes[rare]!r}: "
          f"{100 * drawn_uniform[rare] / tot_u:.1f}% of draws without repeat factors, "
          f"{100 * drawn_repeat[rare] / tot_r:.1f}% with them")  # fmt: skip

    # 4. resume ----------------------------------------------------------------------------
    _section("4. Save and resume")
    state = loader.state_dict()
    result.state_path = out / "loader_state.pt"
    torch.save(state, result.state_path)
    expected = next(iterator)  # what the first loader produces next
    del iterator, loader
    restored_state = torch.load(result.state_path, weights_only=True)  # plain data, no code
    fresh = build_train_loader(
        dataset_dicts, repeat_factors, batch_size=batch_size, num_workers=workers, seed=seed + 1
    )  # a different constructor seed on purpose: the loaded state's seed wins
    fresh.load_state_dict(restored_state)
    fresh_iterator = iter(fresh)
    got = next(fresh_iterator)
    del fresh_iterator, fresh
    same_records = batch_signature(got) == batch_signature(expected)
    same_samples = same_records and samples_equal(got, expected)
    result.resume_ok = same_samples
    print(f"state saved after {batches} batches to {result.state_path} "
          f"({result.state_path.stat().st_size} bytes)")  # fmt: skip
    ids = [s.get("image_id") for s in expected]
    print(f"next batch of the original loader: image ids {ids}")
    print(f"first batch of the restored loader: image ids {[s.get('image_id') for s in got]}")
    if same_samples:
        sizes = sorted({f"{s['image'].shape[2]}x{s['image'].shape[1]}" for s in got})
        boxes = sum(len(s["instances"]) for s in got if s.get("instances") is not None)
        print(f"augmentations match too: {len(got)} identical image tensors ({', '.join(sizes)}) "
              f"and {boxes} identical boxes, classes and polygons (each sample's augmentations "
              "are seeded from its position in the sampler's stream)")  # fmt: skip
        print(f"resume check: PASSED: the restored loader continues with the same {len(got)} "
              f"records in the same order, with the same augmented images and boxes")  # fmt: skip
    elif same_records:
        print("resume check: FAILED: the same records, but the augmented images or boxes differ")
    else:
        print("resume check: FAILED (the restored loader produced a different batch)")

    # 5. picture ---------------------------------------------------------------------------
    _section("5. Augmented samples")
    tiles = [draw_sample(s, class_names=classes, fit=(300, 300)) for s in grid_samples]
    captions = []
    for s in grid_samples:
        count = len(s["instances"]) if s.get("instances") is not None else 0
        captions.append(f"image {s.get('image_id')}: {s['image'].shape[2]}x{s['image'].shape[1]}, "
                        f"{count} shape{'s' if count != 1 else ''}")  # fmt: skip
    grid = make_grid(
        tiles,
        columns=4,
        tile_size=(300, 300),
        captions=captions,
        title="catmap demo: training samples after ResizeShortestEdge + RandomFlip (boxes, polygons, classes)",
    )
    result.grid_path = out / "demo_samples.png"
    grid.save(result.grid_path)
    print(f"wrote {len(tiles)} samples to {result.grid_path}")
    print(f"\ndone in {time.perf_counter() - started:.1f}s")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (1 when the resume check failed)."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        description="catmap demo: dataset → mapper → repeat-factor sampler → resumable loader.",
    )
    parser.add_argument("--batches", type=int, default=300, help="batches to iterate")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory for the PNG and the loader state "
                             "(default: <demo dir>/output)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampler and loader")
    parser.add_argument("--batch-size", type=int, default=8, help="images per batch")
    parser.add_argument("--num-images", type=int, default=300, help="images in the generated dataset")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="dataset directory (default: $CATMAP_DEMO_DIR/shapes or "
                             "~/.cache/catmap-demo/shapes)")  # fmt: skip
    parser.add_argument("--repeat-thresh", type=float, default=0.5,
                        help="repeat-factor threshold")  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    args = parser.parse_args(argv)
    for name in ("batches", "batch_size", "num_images"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0:
        parser.error("--workers must be >= 0")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result = run_demo(
        batches=args.batches,
        workers=args.workers,
        out=args.out,
        seed=args.seed,
        batch_size=args.batch_size,
        num_images=args.num_images,
        data_dir=args.data_dir,
        repeat_thresh=args.repeat_thresh,
        progress=not args.no_progress,
    )
    return 0 if result.resume_ok else 1


if __name__ == "__main__":
    sys.exit(main())
