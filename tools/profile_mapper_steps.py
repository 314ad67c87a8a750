"""Per-step profile of DatasetMapper on one core: where the time of one image goes.

Runs the steps of ``DatasetMapper.__call__`` one by one on photo-like JPEGs (see
``tools/bench_photos.py``) and times each in CPU time of the thread (``time.thread_time``:
time other processes of a shared machine take is not counted), reporting the median over
rounds of the mean per image; also the whole mapper call and bare decode +
resize (the same decoder, ``cv2.resize`` INTER_LINEAR to the same output size), so that the
steps can be compared with the floor.

Usage:
    python -m tools.profile_mapper_steps --images 64 --rounds 5
    python -m tools.profile_mapper_steps --cprofile 20   # also the top 20 cProfile entries
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tools._bench_common import HelpFormatter

__all__ = ["main"]

SHORT_EDGES = (640, 672, 704, 736, 768, 800)
MAX_SIZE = 1333


def _build_mapper() -> Any:
    from mappers import transforms as T
    from mappers.dataset_mapper import DatasetMapper

    logging.getLogger("mappers.dataset_mapper").setLevel(logging.WARNING)
    return DatasetMapper(
        True,
        augmentations=[T.ResizeShortestEdge(SHORT_EDGES, MAX_SIZE, "choice"), T.RandomFlip()],
    )


def _steps(mapper: Any, serialized: Any) -> dict[str, Callable[[int, dict[str, Any]], Any]]:
    """Step name -> fn(index, state); each step reads and writes ``state``."""
    from mappers.annotations import annotations_to_training_instances
    from mappers.image_io import decode_image, image_to_tensor, record_image_size
    from mappers.dataset_mapper import apply_planned_image

    def unpickle(i: int, s: dict[str, Any]) -> None:
        s["raw"] = serialized[i]

    def copy(i: int, s: dict[str, Any]) -> None:
        record = dict(s["raw"])  # what the mapper copies: the record and its annotation dicts
        record["annotations"] = [dict(a) for a in record.get("annotations", [])]
        s["record"] = record

    def plan(i: int, s: dict[str, Any]) -> None:
        size = record_image_size(s["record"])
        s["size"] = size
        s["plan"] = mapper.augmentations.plan((size[0], size[1], 3))

    def read(i: int, s: dict[str, Any]) -> None:
        with open(s["record"]["file_name"], "rb") as f:
            s["data"] = f.read()

    def decode(i: int, s: dict[str, Any]) -> None:
        s["image"] = decode_image(
            s["data"], "RGB", source=s["record"]["file_name"], expected_size=s["size"]
        )

    def flip_resize(i: int, s: dict[str, Any]) -> None:
        s["out"] = apply_planned_image(s["image"], s["plan"])

    def to_tensor(i: int, s: dict[str, Any]) -> None:
        s["record"]["image"] = image_to_tensor(s["out"])

    def instances(i: int, s: dict[str, Any]) -> None:
        rec = s["record"]
        rec["instances"] = annotations_to_training_instances(
            rec.pop("annotations"), s["plan"], s["out"].shape[:2], file_name=rec.get("file_name")
        )

    return {
        "unpickle record": unpickle,
        "copy record": copy,
        "plan transforms": plan,
        "read file": read,
        "decode (header+jpeg)": decode,
        "flip + resize": flip_resize,
        "to tensor": to_tensor,
        "instances": instances,
    }


def _bare(decoder: str, sizes: list[tuple[int, int]]) -> Callable[[int, dict[str, Any]], Any]:
    import cv2

    from mappers.image_io import decode_image

    def run(i: int, s: dict[str, Any]) -> None:
        with open(s["raw"]["file_name"], "rb") as f:
            image = decode_image(f.read(), "RGB", decoder=decoder)
        h, w = sizes[i % len(sizes)]
        cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR)

    return run


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Print the per-step table; return the median microseconds per image of each row."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cprofile", type=int, default=0, help="print N cProfile entries")
    parser.add_argument("--source", choices=("photos", "synthetic"), default=None)
    args = parser.parse_args(argv)

    import cv2
    import torch

    from mappers.datasets import DatasetFromList
    from mappers.image_io import default_jpeg_decoder
    from mappers.random_state import seed_generator
    from tools.bench_mapper import _pin_to_one_core
    from tools.bench_photos import make_records

    _pin_to_one_core()
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    seed_generator(0)
    mapper = _build_mapper()
    from mappers.transforms import ResizeShortestEdge

    sizes = [ResizeShortestEdge.get_output_shape(480, 640, e, MAX_SIZE) for e in SHORT_EDGES]
    with tempfile.TemporaryDirectory(prefix="profile_mapper_") as tmp:
        records = make_records(Path(tmp), args.images, source=args.source)
        serialized = DatasetFromList(records, copy=False, serialize=True)
        steps = _steps(mapper, serialized)
        whole = {
            "mapper call (total)": lambda i, s: mapper(serialized[i]),
            f"bare decode ({default_jpeg_decoder()}) + resize": _bare(default_jpeg_decoder(), sizes),
        }
        times: dict[str, list[float]] = {name: [] for name in [*steps, *whole]}
        for _ in range(args.rounds + 1):  # the first round warms up
            acc = dict.fromkeys(times, 0.0)
            for i in range(len(records)):
                state: dict[str, Any] = {"raw": records[i]}
                for name, fn in steps.items():
                    t0 = time.thread_time()
                    fn(i, state)
                    acc[name] += time.thread_time() - t0
                for name, fn in whole.items():
                    t0 = time.thread_time()
                    fn(i, state)
                    acc[name] += time.thread_time() - t0
            for name, total in acc.items():
                times[name].append(1e6 * total / len(records))
        medians = {name: statistics.median(v[1:]) for name, v in times.items()}
        step_sum = sum(medians[name] for name in steps)
        bare = medians[list(whole)[1]]
        print(f"CPU us per image, median over {args.rounds} rounds of {len(records)} images")
        for name, us in medians.items():
            print(f"  {name:<34} {us:8.1f} us  ({us / bare:5.2f} of bare)")
        print(f"  {'sum of steps':<34} {step_sum:8.1f} us  ({step_sum / bare:5.2f} of bare)")
        print(f"  mapper/bare images/s ratio: {bare / medians['mapper call (total)']:.3f}")
        if args.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(3):
                for i in range(len(records)):
                    mapper(serialized[i])
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.cprofile)
    return medians


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
