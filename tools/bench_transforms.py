"""Benchmark the transform layer on one core: image resize/flip backends and annotation paths.

Compares, side by side in one run and on the same generated inputs:

1. resize 480x640 -> 800x1067 (ResizeShortestEdge(800, 1333)): OpenCV backend vs the Pillow
   backend (what detectron2 uses for uint8 images);
2. a flip before a resize: catmap's flipped view made contiguous with ``cv2.flip`` inside
   ResizeTransform vs ``np.ascontiguousarray`` of the view (a strided copy) then resize;
3. transforming the annotations of one image (boxes + polygons, resize + flip) and building
   Instances: one ``transform_instance_annotations`` call per annotation (detectron2's way)
   vs one batched ``transform_annotations`` call.

Usage:
    python -m tools.bench_transforms --repeats 200 --annotations 7 30

Prints one line per case with milliseconds per image and the speed-up ratio.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable

import numpy as np

from catalog.box_mode import BoxMode
from mappers import (
    annotations_to_instances,
    filter_empty_instances,
    transform_instance_annotations,
)
from mappers.annotations import transform_annotations
from mappers.transforms import (
    HFlipTransform,
    ResizeShortestEdge,
    TransformList,
    resample as _backend,
)
from tools._bench_common import HelpFormatter

__all__ = ["main"]


def _single_thread() -> None:
    cv2 = _backend.get_cv2()
    if cv2 is not None:
        cv2.setNumThreads(1)
    import torch

    torch.set_num_threads(1)


def _time_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of ``fn`` over ``repeats`` runs split into 5 batches."""
    fn()
    batch = max(1, repeats // 5)
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - start) / batch * 1000.0)
    return float(np.median(samples))


def _annotations(count: int, rng: np.random.Generator) -> list[dict]:
    annos = []
    for _ in range(count):
        x, y = rng.uniform(0, 500), rng.uniform(0, 380)
        w, h = rng.uniform(10, 140), rng.uniform(10, 100)
        angles = np.sort(rng.uniform(0, 2 * np.pi, 12))
        poly = np.stack(
            [x + w / 2 + w / 2 * np.cos(angles), y + h / 2 + h / 2 * np.sin(angles)], axis=1
        )
        annos.append(
            {
                "bbox": [x, y, w, h],
                "bbox_mode": BoxMode.XYWH_ABS,
                "category_id": int(rng.integers(80)),
                "iscrowd": 0,
                "segmentation": [poly.reshape(-1).tolist()],
            }
        )
    return annos


def _report(name: str, ours: float, baseline: float, ours_label: str, base_label: str) -> None:
    print(
        f"{name:<34} {ours_label} {ours:7.3f} ms | {base_label} {baseline:7.3f} ms | "
        f"speed-up x{baseline / ours:5.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter, description=__doc__.split("\n")[0]
    )
    parser.add_argument("--repeats", type=int, default=200, help="timed runs per case")
    parser.add_argument(
        "--annotations", type=int, nargs="+", default=[7, 30], help="annotations per image"
    )
    args = parser.parse_args(argv)
    _single_thread()
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(480, 640, 3), dtype=np.uint8)
    resize = ResizeShortestEdge(800, 1333).get_transform(image)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, one thread per library")

    # 1. resize backends
    cv2 = _backend.get_cv2()
    if cv2 is None:
        print("OpenCV not installed: resize and flip comparisons skipped")
    else:
        ours = _time_ms(lambda: resize.apply_image(image), args.repeats)
        saved = _backend.get_cv2
        _backend.get_cv2 = lambda: None  # type: ignore[assignment]
        try:
            pil = _time_ms(lambda: resize.apply_image(image), args.repeats)
        finally:
            _backend.get_cv2 = saved  # type: ignore[assignment]
        _report("resize 480x640->800x1067", ours, pil, "opencv", "pillow")

        # 2. flip (a view) followed by a resize
        flip = HFlipTransform(image.shape[1])
        ours = _time_ms(lambda: resize.apply_image(flip.apply_image(image)), args.repeats)
        naive = _time_ms(
            lambda: cv2.resize(
                np.ascontiguousarray(image[:, ::-1]),
                (resize.new_w, resize.new_h),
                interpolation=cv2.INTER_LINEAR,
            ),
            args.repeats,
        )
        _report("hflip view -> resize", ours, naive, "catmap", "strided copy")

    # 3. annotations
    tfms = TransformList([resize, HFlipTransform(resize.new_w)])
    size = (resize.new_h, resize.new_w)
    for count in args.annotations:
        annos = _annotations(count, rng)

        def per_annotation(annos: list[dict] = annos) -> object:
            done = [transform_instance_annotations(copy.copy(a), tfms, size) for a in annos]
            return filter_empty_instances(annotations_to_instances(done, size))

        def batched(annos: list[dict] = annos) -> object:
            done = transform_annotations([copy.copy(a) for a in annos], tfms, size)
            return filter_empty_instances(annotations_to_instances(done, size))

        ours = _time_ms(batched, args.repeats)
        base = _time_ms(per_annotation, args.repeats)
        _report(f"{count} annotations -> Instances", ours, base, "batched", "per-anno")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
