"""Benchmark DatasetMapper against bare decode + resize and a Pillow-only pipeline.

Everything runs in one invocation, over JPEGs the script generates (640x480 mosaics of
scikit-image's photographs, about 100 KiB each, 7 annotated objects with polygons each; see
``tools/bench_photos.py``; flat synthetic images with ``--source synthetic`` or when
scikit-image is missing), pipelines interleaved round by round so that load on the machine
affects all of them alike. Every pass re-seeds the augmentation generator, so each pass of
every mapper draws the same sizes and flips, and the bare and Pillow pipelines resize each
image to the size the mapper drew for it. Reported:

1. one core (process pinned to one CPU, OpenCV and torch on one thread), images/s of
   * ``bare``: read bytes + fastest JPEG decode + OpenCV bilinear resize to the mapper's
     output size, nothing else;
   * ``mapper``: DatasetMapper with ResizeShortestEdge((640, 672, ..., 800), 1333, "choice")
     + RandomFlip (``--short-edges``), annotations to Instances (what a training loop gets);
   * ``pillow``: Pillow decode, Pillow bilinear resize, numpy flip, copy to a CHW tensor
     (the image path of detectron2's DatasetMapper), without annotations;
   and the ratios mapper/bare (target: mapper costs at most 15% more) and mapper/pillow
   (target: at least 2x);
2. decode only, for every installed JPEG decoder (Pillow and the fast ones);
3. a small training scale (short edge 200): full decode vs ``reduced_decode=True``.
(Worker scaling: ``/work/shared/tools/loader_scaling.py`` and ``tools.bench_mapper_threads``.)

0. (``--stages`` / ``--harness``) a per-stage table, microseconds of CPU per image for each
   stage of the mapper (read, decode, the augmentation draws, flip, resize, to-tensor,
   instances, the rest of the call, packing the sample into a loader's shared slab) beside
   the bare operation on the same array (for packing: one copy of the image), and the
   whole call against bare decode + resize, for the default (detectron2 pixels, "pil") and
   the OpenCV resize backend. ``--harness`` runs the outside yardstick's case
   (``/work/shared/tools/loader_scaling.py``): 192 photo JPEGs, BGR, boxes only.

Usage:
    python -m tools.bench_mapper --images 64 --rounds 15
    python -m tools.bench_mapper --quick            # a few seconds, for development
    python -m tools.bench_mapper --harness --rounds 3   # the stage table, harness case only
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench_photos import HEIGHT, WIDTH

__all__ = ["main"]

logger = logging.getLogger(__name__)

SHORT_EDGES = (640, 672, 704, 736, 768, 800)
MAX_SIZE = 1333
SEED = 0


def _limit_threads() -> None:
    """One thread for OpenCV and torch (what DataLoader workers should do)."""
    import cv2
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)


def _pin_to_one_core(core: int | None = None) -> int | None:
    try:
        import psutil

        proc = psutil.Process()
        cores = proc.cpu_affinity()
        chosen = cores[0] if core is None else core
        proc.cpu_affinity([chosen])
        return chosen
    except Exception:  # platforms without affinity support: measure unpinned
        return None


# --------------------------------------------------------------------------- data


def _make_dataset(
    directory: Path, count: int, seed: int = 0, source: str | None = None
) -> list[dict[str, Any]]:
    """The benchmark records (see :func:`tools.bench_photos.make_records`)."""
    from tools.bench_photos import make_records

    return make_records(directory, count, seed=seed, source=source)


# --------------------------------------------------------------------------- pipelines

Pipeline = Callable[[int, dict[str, Any]], Any]


def _output_size(short_edge: int = SHORT_EDGES[-1]) -> tuple[int, int]:
    from mappers.transforms import ResizeShortestEdge

    return ResizeShortestEdge.get_output_shape(HEIGHT, WIDTH, short_edge, MAX_SIZE)


def bare_pipeline(decoder: str, sizes: list[tuple[int, int]]) -> Pipeline:
    """Read + decode + OpenCV bilinear resize to ``sizes[index]``: the floor any mapper pays."""
    import cv2

    from mappers.image_io import decode_image

    def run(index: int, record: dict[str, Any]) -> np.ndarray:
        with open(record["file_name"], "rb") as f:
            image = decode_image(f.read(), "RGB", decoder=decoder)
        new_h, new_w = sizes[index]
        return cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)

    return run


def mapper_pipeline(
    decoder: str | None = None,
    use_instance_mask: bool = False,
    short_edges: tuple[int, ...] = SHORT_EDGES,
    reduced_decode: bool = False,
) -> Any:
    from mappers import transforms as T
    from mappers.dataset_mapper import DatasetMapper

    logging.getLogger("mappers.dataset_mapper").setLevel(logging.WARNING)
    return DatasetMapper(
        True,
        augmentations=[
            T.ResizeShortestEdge(short_edges, MAX_SIZE, "choice"),
            T.RandomFlip(),
        ],
        use_instance_mask=use_instance_mask,
        decoder=decoder,
        reduced_decode=reduced_decode,
    )


def _as_pipeline(mapper: Callable[[dict[str, Any]], Any]) -> Pipeline:
    return lambda index, record: mapper(record)


def planned_sizes(mapper: Any, records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The output (h, w) the mapper draws for each record in a pass seeded with SEED."""
    from mappers.random_state import seed_generator

    seed_generator(SEED)
    return [tuple(mapper(record)["image"].shape[1:]) for record in records]


def pillow_pipeline(sizes: list[tuple[int, int]]) -> Pipeline:
    """Pillow decode and resize, numpy flip, CHW copy: detectron2's image path."""
    import torch
    from PIL import Image, ImageOps

    def run(index: int, record: dict[str, Any]) -> Any:
        with Image.open(record["file_name"]) as img:
            img = ImageOps.exif_transpose(img).convert("RGB")
            image = np.asarray(img)
        new_h, new_w = sizes[index]
        image = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.BILINEAR))
        if index % 2:  # RandomFlip(prob=0.5), deterministic half of the time
            image = np.flip(image, axis=1)
        return torch.as_tensor(np.ascontiguousarray(image.transpose(2, 0, 1)))

    return run


def decode_only(decoder: str) -> Pipeline:
    from mappers.image_io import decode_image

    def run(index: int, record: dict[str, Any]) -> np.ndarray:
        with open(record["file_name"], "rb") as f:
            return decode_image(f.read(), "RGB", decoder=decoder)

    return run


def _time_pass(fn: Pipeline, records: list[dict[str, Any]]) -> float:
    """Images per CPU-second of this process (user + system) over one pass.

    CPU time, not wall time: on a machine shared with other jobs, time during which another
    process holds the core is not counted, page faults and system calls are. The
    augmentation generator is re-seeded first, so every pass draws the same sizes.
    """
    from mappers.random_state import seed_generator

    seed_generator(SEED)
    start = time.process_time()
    for index, record in enumerate(records):
        fn(index, record)
    return len(records) / max(time.process_time() - start, 1e-9)


def _interleaved(
    pipelines: dict[str, Pipeline],
    records: list[dict[str, Any]],
    rounds: int,
) -> tuple[dict[str, float], dict[str, float]]:
    """(best, median) images/s of each pipeline, alternating pipelines round by round.

    On a shared machine other processes steal time from some passes: the best pass is the
    closest to the unloaded speed, the median shows the spread.
    """
    for fn in pipelines.values():  # warm-up: imports, page cache, allocator
        for index, record in enumerate(records[: min(4, len(records))]):
            fn(index, record)
    samples: dict[str, list[float]] = {name: [] for name in pipelines}
    for r in range(rounds):
        order = list(pipelines) if r % 2 == 0 else list(reversed(list(pipelines)))
        for name in order:
            samples[name].append(_time_pass(pipelines[name], records))
    best = {name: max(values) for name, values in samples.items()}
    median = {name: statistics.median(values) for name, values in samples.items()}
    return best, median


# --------------------------------------------------------------------------- stages


def stage_table(
    records: list[dict[str, Any]], rounds: int, image_format: str = "RGB",
    backend: str = "pil", edges: tuple[int, ...] = SHORT_EDGES,
) -> dict[str, tuple[float, float]]:
    """{stage: (mapper us, bare us)} per image, median over ``rounds`` (CPU time of the
    thread). The stages replay the mapper's own plan for each record, so both columns see
    the same sizes and flips; "rest of the call" is the whole call minus its stages."""
    import cv2
    import simplejpeg
    import torch

    from mappers import transforms as T
    from mappers.dataset_mapper import DatasetMapper, apply_planned_image, image_output_space
    from mappers.image_io import decode_image, image_to_tensor, read_file_bytes
    from mappers.random_state import seed_generator
    from samplers.slabs import SlabSpace, plan_batch, write_batch

    logging.getLogger("mappers.dataset_mapper").setLevel(logging.WARNING)
    mapper = DatasetMapper(True, image_format=image_format, augmentations=[
        T.ResizeShortestEdge(edges, MAX_SIZE, "choice", backend=backend), T.RandomFlip()])
    space = {"RGB": "RGB", "BGR": "BGR"}[image_format]
    rng = np.random.default_rng(0)

    def bare_boxes(annotations: list[dict[str, Any]], scale: tuple[float, float], flip_w: int,
                   size: tuple[int, int]) -> Any:
        boxes = np.array([a["bbox"] for a in annotations], np.float64).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]  # XYWH -> XYXY
        boxes *= (scale[1], scale[0], scale[1], scale[0])
        if flip_w:
            boxes[:, 0::2] = flip_w - boxes[:, 2::-2]
        np.clip(boxes, 0, (size[1], size[0], size[1], size[0]), out=boxes)
        return torch.from_numpy(boxes.astype(np.float32)), torch.tensor(
            [a["category_id"] for a in annotations])

    names = ["read file", "decode", "draw augmentations", "flip", "resize", "to tensor",
             "instances (boxes)", "rest of the call", "whole mapper call", "pack into the slab"]
    scratch = np.zeros(64 << 20, np.uint8)  # a slab: a loader worker's batch goes there
    totals: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    clock = time.thread_time
    for _ in range(rounds + 1):  # the first round warms up
        acc = {n: [0.0, 0.0] for n in names}

        def pair(stage: str, ours: Callable[[], Any], theirs: Callable[[], Any],
                 swap: bool) -> tuple[Any, Any]:
            """Run and time both (the bare one first on every other record: the second of
            two runs finds warmer caches); add to the stage's totals; return both results."""
            first, second = (theirs, ours) if swap else (ours, theirs)
            t0 = clock(); a = first(); t1 = clock(); b = second(); t2 = clock()
            (t_ours, t_bare), results = ((t2 - t1, t1 - t0), (b, a)) if swap else (
                (t1 - t0, t2 - t1), (a, b))
            acc[stage][0] += t_ours; acc[stage][1] += t_bare
            return results

        def read_bare(fn: str) -> bytes:
            with open(fn, "rb") as f:
                return f.read()

        def draw_bare() -> None:
            short = edges[int(rng.integers(len(edges)))]; rng.uniform()  # size, flip
            T.ResizeShortestEdge.get_output_shape(size[0], size[1], short, MAX_SIZE)

        seed_generator(SEED)
        for index, record in enumerate(records):
            swap = index % 2 == 1
            fn, size = record["file_name"], (record["height"], record["width"])
            data, _ = pair("read file", lambda: read_file_bytes(fn), lambda: read_bare(fn), swap)
            image, bare = pair(
                "decode", lambda: decode_image(data, image_format, source=fn, expected_size=size),
                lambda: simplejpeg.decode_jpeg(data, colorspace=space), swap)
            plan, _ = pair("draw augmentations", lambda: mapper.augmentations.plan((*size, 3)),
                           draw_bare, swap)
            resize, flips = plan[0], [t for t in plan if type(t) is T.HFlipTransform]
            if flips:
                image, bare = pair("flip", lambda: apply_planned_image(image, flips, owned=True),
                                   lambda: cv2.flip(bare, 1, dst=bare), swap)
            new = (resize.new_h, resize.new_w)
            image, bare = pair("resize", lambda: resize.apply_image(image), lambda: cv2.resize(
                bare, new[::-1], interpolation=cv2.INTER_LINEAR), swap)
            pair("to tensor", lambda: image_to_tensor(image),
                 lambda: torch.from_numpy(bare).permute(2, 0, 1), swap)
            annotations = record["annotations"]
            pair("instances (boxes)", lambda: mapper._options.instances(
                list(map(dict, annotations)), plan, new, file_name=fn), lambda: bare_boxes(
                annotations, (new[0] / size[0], new[1] / size[1]), new[1] if flips else 0, new),
                swap)

        def bare_call(fn: str) -> None:
            with open(fn, "rb") as f:
                bare = simplejpeg.decode_jpeg(f.read(), colorspace=space)
            short = edges[int(rng.integers(len(edges)))]
            new = T.ResizeShortestEdge.get_output_shape(*bare.shape[:2], short, MAX_SIZE)
            cv2.resize(bare, new[::-1], interpolation=cv2.INTER_LINEAR)

        def mapped(record: dict[str, Any]) -> dict[str, Any]:
            token = image_output_space.set(slab_space)
            try:
                return mapper(record)
            finally:
                image_output_space.reset(token)

        seed_generator(SEED)
        batch: list[dict[str, Any]] = []  # the samples of a batch of 16
        for number, record in enumerate(records, 1):  # as in a loader worker: the image
            if not batch:                              # resized straight into the slab
                slab_space = SlabSpace(lambda need: scratch[:need])
            sample, _ = pair("whole mapper call", lambda: mapped(record),
                             lambda: bare_call(record["file_name"]), number % 2 == 0)
            batch.append(sample)
            if len(batch) == 16 or number == len(records):  # pack the batch; bare: copy it
                t0 = clock(); plan = plan_batch(batch, slab_space)
                write_batch(plan, torch.from_numpy(scratch), scratch); t1 = clock()
                for image in (b["image"].permute(1, 2, 0).numpy() for b in batch):
                    np.copyto(scratch[-image.size:].reshape(image.shape), image)
                t2 = clock(); batch = []
                acc["pack into the slab"][0] += t1 - t0; acc["pack into the slab"][1] += t2 - t1
        parts = [n for n in names
                 if n not in ("rest of the call", "whole mapper call", "pack into the slab")]
        acc["rest of the call"] = [
            acc["whole mapper call"][0] - sum(acc[n][0] for n in parts), 0.0]
        for n in names:
            totals[n].append((1e6 * acc[n][0] / len(records), 1e6 * acc[n][1] / len(records)))
    med = statistics.median
    return {n: (med(v[0] for v in r[1:]), med(v[1] for v in r[1:])) for n, r in totals.items()}


def print_stage_table(table: dict[str, tuple[float, float]], title: str) -> None:
    print(f"\n0. {title}: CPU us per image, mapper stage | bare operation on the same array")
    for name, (ours, bare) in table.items():
        ratio = f"x{ours / bare:5.2f}" if bare > 0 else ""
        print(f"  {name:<22} {ours:8.1f} | {bare:8.1f}  {ratio}")
    whole, floor = table["whole mapper call"]
    print(f"  DatasetMapper / bare decode+resize images/s: {floor / whole:.3f}  [target >= 0.9]")


# --------------------------------------------------------------------------- main


def _edges(text: str) -> tuple[int, ...]:
    try:
        edges = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not edges or min(edges) <= 0:
        raise argparse.ArgumentTypeError(f"short edges must be positive, got {text!r}")
    return edges


def _format_table(best: dict[str, float], median: dict[str, float], reference: str) -> str:
    width = max(len(name) for name in best)
    ref = best[reference]
    return "\n".join(
        f"  {name:<{width}}  best {rate:7.1f} images/s ({1000 / rate:5.2f} ms)  "
        f"median {median[name]:7.1f}  x{rate / ref:5.2f}"
        for name, rate in best.items()
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print a report and return the figures."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--images", type=int, default=64, help="distinct JPEGs generated")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for development")
    parser.add_argument("--skip-scaling", action="store_true", help="accepted; no effect")
    parser.add_argument("--stages", action="store_true", help="also print the stage table")
    parser.add_argument(
        "--harness", action="store_true",
        help="only the stage table on loader_scaling.py's case: 192 JPEGs, BGR, boxes only",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    parser.add_argument(
        "--short-edges",
        type=_edges,
        default=SHORT_EDGES,
        help="ResizeShortestEdge lengths drawn with 'choice' (comma separated); default "
        + ",".join(map(str, SHORT_EDGES)),
    )
    parser.add_argument(
        "--source",
        choices=("photos", "synthetic"),
        default=None,
        help="benchmark images: photo mosaics (needs scikit-image; the default when it is "
        "installed) or synthetic shapes",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.rounds = 12, 3
    if args.harness:
        args.images = 192

    import cv2
    import PIL
    import torch

    from mappers.image_io import available_jpeg_decoders, default_jpeg_decoder
    from tools.bench_photos import image_source

    logging.basicConfig(level=logging.WARNING)
    core = _pin_to_one_core()
    _limit_threads()
    fast = default_jpeg_decoder()
    decoders = available_jpeg_decoders()
    load_start = os.getloadavg()[0]
    source = args.source or image_source()
    edges = tuple(args.short_edges)
    with tempfile.TemporaryDirectory(prefix="bench_mapper_") as tmp:
        records = _make_dataset(Path(tmp), args.images, source=source)
        kib = statistics.mean(os.path.getsize(r["file_name"]) for r in records) / 1024
        print(
            f"bench_mapper: {args.images} generated {WIDTH}x{HEIGHT} JPEGs ({source}, mean "
            f"{kib:.0f} KiB), {args.rounds} rounds, pinned to core {core}; torch "
            f"{torch.__version__}, OpenCV {cv2.__version__}, Pillow {PIL.__version__}; "
            f"decoders installed: {', '.join(decoders)}; default: {fast}; "
            f"ResizeShortestEdge({edges}, {MAX_SIZE}, 'choice') + RandomFlip, outputs "
            f"{_output_size(min(edges))[1]}x{_output_size(min(edges))[0]} to "
            f"{_output_size(max(edges))[1]}x{_output_size(max(edges))[0]}"
        )
        results: dict[str, Any] = {
            "decoders": list(decoders),
            "default_decoder": fast,
            "source": source,
            "mean_file_kib": kib,
            "short_edges": list(edges),
        }
        if args.stages or args.harness:
            fmt = "BGR" if args.harness else "RGB"
            for backend in ("pil", "opencv"):
                table = stage_table(records, args.rounds, fmt, backend, edges)
                results[f"stages_{backend}"] = table
                print_stage_table(table, f"{fmt}, ResizeShortestEdge(backend={backend!r})")
            if args.harness:
                return results
        mapper = mapper_pipeline(short_edges=edges)
        sizes = planned_sizes(mapper, records)
        pipelines = {
            f"bare decode ({fast}) + cv2 resize": bare_pipeline(fast, sizes),
            "DatasetMapper (resize, flip, box instances)": _as_pipeline(mapper),
            "DatasetMapper (same + polygon masks)": _as_pipeline(
                mapper_pipeline(use_instance_mask=True, short_edges=edges)
            ),
            "Pillow-only (decode, resize, flip, CHW copy)": pillow_pipeline(sizes),
        }
        rates, medians = _interleaved(pipelines, records, args.rounds)
        names = list(pipelines)
        bare, mapper, mapper_masks, pillow = (rates[n] for n in names)
        print(
            f"\n1. one core, images per CPU-second over {args.rounds} interleaved passes of "
            f"{len(records)} images, relative to bare decode + resize"
        )
        print(_format_table(rates, medians, names[0]))
        overhead = bare / mapper - 1
        print(
            f"  DatasetMapper cost over bare decode + resize: {100 * overhead:+.1f}% time "
            f"(with polygon masks: {100 * (bare / mapper_masks - 1):+.1f}%)  [target <= +15%]"
        )
        print(
            f"  DatasetMapper / bare images/s: {mapper / bare:.3f}; DatasetMapper vs "
            f"Pillow-only: {mapper / pillow:.2f}x images/s  [target >= 2x]"
        )
        results["one_core_best"] = rates
        results["one_core_median"] = medians
        results["mapper_overhead_vs_bare"] = overhead
        results["mapper_over_bare_rate"] = mapper / bare
        results["mapper_masks_overhead_vs_bare"] = bare / mapper_masks - 1
        results["mapper_vs_pillow"] = mapper / pillow

        decode_rates, decode_medians = _interleaved(
            {d: decode_only(d) for d in decoders}, records, args.rounds
        )
        print("\n2. decode only (read + decode to RGB), images per CPU-second, relative to Pillow")
        print(_format_table(decode_rates, decode_medians, "pillow"))
        results["decode_only_best"] = decode_rates
        results["decode_only_median"] = decode_medians

        small = {
            "DatasetMapper, short edge 200, full decode": _as_pipeline(
                mapper_pipeline(short_edges=(200,))
            ),
            "DatasetMapper, short edge 200, reduced decode": _as_pipeline(
                mapper_pipeline(short_edges=(200,), reduced_decode=True)
            ),
        }
        small_rates, small_medians = _interleaved(small, records, args.rounds)
        print("\n3. small training scale (shrinks 2.4x), images per CPU-second")
        print(_format_table(small_rates, small_medians, next(iter(small))))
        results["small_scale_best"] = small_rates
        results["small_scale_median"] = small_medians

    load_end = os.getloadavg()[0]
    print(
        f"\nload average (1 min) at start {load_start:.1f}, at end {load_end:.1f}, on "
        f"{os.cpu_count()} CPUs: wall-clock figures are only meaningful on an idle machine"
    )
    results["load_average"] = [load_start, load_end]
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
