"""Benchmark DatasetMapper against bare decode + resize and a Pillow-only pipeline.

Everything runs in one invocation, over JPEGs the script generates (640x480, about 150 KB
each like an average COCO image, 7 annotated objects with polygons each), pipelines interleaved round by round so
that load on the machine affects all of them alike. Reported:

1. one core (process pinned to one CPU, OpenCV and torch on one thread), images/s of
   * ``bare``: read bytes + fastest JPEG decode + OpenCV bilinear resize to 800x1067;
   * ``mapper``: DatasetMapper with ResizeShortestEdge(800, 1333) + RandomFlip, annotations
     to Instances (what a training loop gets);
   * ``pillow``: Pillow decode, Pillow bilinear resize, numpy flip, copy to a CHW tensor
     (the image path of detectron2's DatasetMapper), without annotations;
   and the ratios mapper/bare (target: mapper costs at most 15% more) and mapper/pillow
   (target: at least 2x);
2. decode only, for every installed JPEG decoder (Pillow and the fast ones);
3. a small training scale (short edge 200): full decode vs ``reduced_decode=True``;
4. scaling: 1 vs 2 independent processes running the mapper (one per core), and a
   DataLoader with 1 vs 2 workers, with PSS/USS summed over the main process and workers.

Usage:
    python tools/bench_mapper.py --images 64 --rounds 15
    python tools/bench_mapper.py --quick            # a few seconds, for development
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = ["main"]

logger = logging.getLogger(__name__)

HEIGHT, WIDTH = 480, 640
SHORT_EDGE, MAX_SIZE = 800, 1333


def _limit_threads() -> None:
    """One thread for OpenCV and torch (what DataLoader workers should do)."""
    import cv2
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)


def _current_affinity() -> list[int]:
    try:
        import psutil

        return list(psutil.Process().cpu_affinity())
    except Exception:  # no affinity support
        return []


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


def _natural_image(rng: np.random.Generator) -> np.ndarray:
    """Gradients, many filled shapes and multi-scale grain.

    Calibrated so that a 640x480 JPEG at quality 90 weighs about 150 KB, like an average
    COCO image (about 160 KB): decode cost grows with the detail a JPEG holds, and a mapper's
    relative overhead is only meaningful against a realistic decode.
    """
    from PIL import Image, ImageDraw, ImageFilter

    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    base = np.stack(
        [
            127 + 100 * np.sin(x / rng.uniform(40, 120) + rng.uniform(0, 6)),
            127 + 100 * np.cos(y / rng.uniform(40, 120) + rng.uniform(0, 6)),
            127 + 100 * np.sin((x + y) / rng.uniform(60, 200)),
        ],
        axis=-1,
    )
    image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(40):
        x0, y0 = int(rng.integers(0, WIDTH - 40)), int(rng.integers(0, HEIGHT - 40))
        x1, y1 = x0 + int(rng.integers(5, 150)), y0 + int(rng.integers(5, 150))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=color)
    image = image.filter(ImageFilter.GaussianBlur(0.8))
    grain = np.zeros((HEIGHT, WIDTH), dtype=np.float32)
    for step in (1, 2, 4):
        noise = rng.integers(0, 256, (HEIGHT // step, WIDTH // step), dtype=np.uint8)
        up = Image.fromarray(noise).resize((WIDTH, HEIGHT), Image.BILINEAR)
        grain += np.asarray(up, dtype=np.float32) - 127.0
    array = np.asarray(image, dtype=np.float32) + grain[:, :, None] * (1.7 * 40 / 127 / 3)
    return np.clip(array, 0, 255).astype(np.uint8)


def _make_dataset(directory: Path, count: int, seed: int = 0) -> list[dict[str, Any]]:
    from PIL import Image

    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        path = directory / f"img_{i:05d}.jpg"
        Image.fromarray(_natural_image(rng)).save(path, "JPEG", quality=90)
        annotations = []
        for _ in range(7):
            w, h = rng.uniform(20, 200), rng.uniform(20, 200)
            x0, y0 = rng.uniform(0, WIDTH - w), rng.uniform(0, HEIGHT - h)
            polygon = [x0, y0, x0 + w, y0, x0 + w, y0 + h, x0 + w / 2, y0 + h * 1.2, x0, y0 + h]
            polygon = [float(min(v, WIDTH if k % 2 == 0 else HEIGHT)) for k, v in enumerate(polygon)]
            annotations.append(
                {
                    "bbox": [x0, y0, w, h],
                    "bbox_mode": 1,
                    "category_id": int(rng.integers(0, 80)),
                    "segmentation": [polygon],
                    "iscrowd": 0,
                }
            )
        records.append(
            {
                "file_name": str(path),
                "height": HEIGHT,
                "width": WIDTH,
                "image_id": i,
                "annotations": annotations,
            }
        )
    return records


# --------------------------------------------------------------------------- pipelines


def _output_size() -> tuple[int, int]:
    scale = SHORT_EDGE / min(HEIGHT, WIDTH)
    if max(HEIGHT, WIDTH) * scale > MAX_SIZE:
        scale = MAX_SIZE / max(HEIGHT, WIDTH)
    return int(HEIGHT * scale + 0.5), int(WIDTH * scale + 0.5)


def bare_pipeline(decoder: str) -> Callable[[dict[str, Any]], Any]:
    """Read + decode + OpenCV bilinear resize: the floor any mapper pays."""
    import cv2

    from mappers.image_io import decode_image

    new_h, new_w = _output_size()

    def run(record: dict[str, Any]) -> np.ndarray:
        with open(record["file_name"], "rb") as f:
            image = decode_image(f.read(), "RGB", decoder=decoder)
        return cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)

    return run


def mapper_pipeline(
    decoder: str | None = None,
    use_instance_mask: bool = False,
    short_edge: int = SHORT_EDGE,
    reduced_decode: bool = False,
) -> Any:
    from mappers import transforms as T
    from mappers.dataset_mapper import DatasetMapper

    logging.getLogger("mappers.dataset_mapper").setLevel(logging.WARNING)
    return DatasetMapper(
        True,
        augmentations=[T.ResizeShortestEdge(short_edge, MAX_SIZE), T.RandomFlip()],
        use_instance_mask=use_instance_mask,
        decoder=decoder,
        reduced_decode=reduced_decode,
    )


def pillow_pipeline() -> Callable[[dict[str, Any]], Any]:
    """Pillow decode and resize, numpy flip, CHW copy: detectron2's image path."""
    import torch
    from PIL import Image, ImageOps

    new_h, new_w = _output_size()
    counter = [0]

    def run(record: dict[str, Any]) -> Any:
        with Image.open(record["file_name"]) as img:
            img = ImageOps.exif_transpose(img).convert("RGB")
            image = np.asarray(img)
        image = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.BILINEAR))
        counter[0] += 1
        if counter[0] % 2:  # RandomFlip(prob=0.5), deterministic half of the time
            image = np.flip(image, axis=1)
        return torch.as_tensor(np.ascontiguousarray(image.transpose(2, 0, 1)))

    return run


def decode_only(decoder: str) -> Callable[[dict[str, Any]], Any]:
    from mappers.image_io import decode_image

    def run(record: dict[str, Any]) -> np.ndarray:
        with open(record["file_name"], "rb") as f:
            return decode_image(f.read(), "RGB", decoder=decoder)

    return run


def _time_pass(fn: Callable[[dict[str, Any]], Any], records: list[dict[str, Any]]) -> float:
    """Images per CPU-second of this process (user + system) over one pass.

    CPU time, not wall time: on a machine shared with other jobs, time during which another
    process holds the core is not counted, page faults and system calls are.
    """
    start = time.process_time()
    for record in records:
        fn(record)
    return len(records) / max(time.process_time() - start, 1e-9)


def _interleaved(
    pipelines: dict[str, Callable[[dict[str, Any]], Any]],
    records: list[dict[str, Any]],
    rounds: int,
) -> tuple[dict[str, float], dict[str, float]]:
    """(best, median) images/s of each pipeline, alternating pipelines round by round.

    On a shared machine other processes steal time from some passes: the best pass is the
    closest to the unloaded speed, the median shows the spread.
    """
    for fn in pipelines.values():  # warm-up: imports, page cache, allocator
        for record in records[: min(4, len(records))]:
            fn(record)
    samples: dict[str, list[float]] = {name: [] for name in pipelines}
    for r in range(rounds):
        order = list(pipelines) if r % 2 == 0 else list(reversed(list(pipelines)))
        for name in order:
            samples[name].append(_time_pass(pipelines[name], records))
    best = {name: max(values) for name, values in samples.items()}
    median = {name: statistics.median(values) for name, values in samples.items()}
    return best, median


# --------------------------------------------------------------------------- scaling


def _process_worker(records: list[dict[str, Any]], core: int, passes: int, queue: Any) -> None:
    _pin_to_one_core(core)
    _worker_init(0)  # forked: OpenCV's one-thread setting is inherited from the parent
    mapper = mapper_pipeline()
    for record in records[:4]:
        mapper(record)
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(passes):
        for record in records:
            mapper(record)
    count = len(records) * passes
    queue.put((count / (time.perf_counter() - start), count / (time.process_time() - cpu_start)))


def _independent_processes(
    records: list[dict[str, Any]], count: int, passes: int, cores: list[int]
) -> tuple[float, float]:
    """(total wall-clock images/s, mean images per CPU-second) of ``count`` processes.

    Each process runs the mapper pinned to its own core. The CPU-time rate shows whether
    the processes slow each other down (memory bandwidth, shared caches); the wall-clock
    total also depends on what else runs on the machine.
    """
    cores = cores or [0]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_process_worker, args=(records, cores[i % len(cores)], passes, queue))
        for i in range(count)
    ]
    for p in procs:
        p.start()
    rates = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return float(sum(r[0] for r in rates)), float(statistics.mean(r[1] for r in rates))


def _worker_init(_: int) -> None:
    """torch to one thread; OpenCV's setting (1, made in the main process) is inherited.

    ``cv2.setNumThreads`` must not be called in a forked worker: it deadlocks when the
    parent had used OpenCV's thread pool.
    """
    import torch

    torch.set_num_threads(1)


def _memory_of_tree() -> dict[str, float]:
    import psutil

    main = psutil.Process()
    procs = [main] + main.children(recursive=True)
    pss = uss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        pss += getattr(info, "pss", 0)
        uss += info.uss
    return {"pss_mib": pss / 2**20, "uss_mib": uss / 2**20, "processes": len(procs)}


def _dataloader_rate(records: list[dict[str, Any]], workers: int, passes: int) -> dict[str, Any]:
    from torch.utils import data

    from mappers.datasets import DatasetFromList, MapDataset

    repeat = max(passes, -(-96 // len(records)))  # at least 96 images
    dataset = MapDataset(DatasetFromList(records * repeat), mapper_pipeline(), seed=0)
    loader = data.DataLoader(
        dataset,
        batch_size=2,
        num_workers=workers,
        collate_fn=list,
        worker_init_fn=_worker_init if workers else None,
        prefetch_factor=4 if workers else None,
    )
    warm = 2 * max(workers, 1)
    count = 0
    memory: dict[str, float] = {}
    start = time.perf_counter()
    for i, batch in enumerate(loader):
        if i == warm:
            start = time.perf_counter()
            count = 0
        count += len(batch)
        if i == warm + 4:
            memory = _memory_of_tree()
    elapsed = time.perf_counter() - start
    return {"workers": workers, "images_per_s": count / elapsed, **memory}


# --------------------------------------------------------------------------- main


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64, help="distinct JPEGs generated")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument("--passes", type=int, default=2, help="passes in the scaling runs")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for development")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.rounds, args.passes = 12, 3, 1

    import cv2
    import PIL
    import torch

    from mappers.image_io import available_jpeg_decoders, default_jpeg_decoder

    logging.basicConfig(level=logging.WARNING)
    all_cores = _current_affinity()
    core = _pin_to_one_core()
    _limit_threads()
    fast = default_jpeg_decoder()
    decoders = available_jpeg_decoders()
    load_start = os.getloadavg()[0]
    print(
        f"bench_mapper: {args.images} generated {WIDTH}x{HEIGHT} JPEGs, {args.rounds} rounds, "
        f"pinned to core {core}; torch {torch.__version__}, OpenCV {cv2.__version__}, "
        f"Pillow {PIL.__version__}; decoders installed: {', '.join(decoders)}; "
        f"default: {fast}; output {_output_size()[1]}x{_output_size()[0]}"
    )
    results: dict[str, Any] = {"decoders": list(decoders), "default_decoder": fast}
    with tempfile.TemporaryDirectory(prefix="bench_mapper_") as tmp:
        records = _make_dataset(Path(tmp), args.images)

        pipelines = {
            f"bare decode ({fast}) + cv2 resize": bare_pipeline(fast),
            "DatasetMapper (resize, flip, box instances)": mapper_pipeline(),
            "DatasetMapper (same + polygon masks)": mapper_pipeline(use_instance_mask=True),
            "Pillow-only (decode, resize, flip, CHW copy)": pillow_pipeline(),
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
        print(f"  DatasetMapper vs Pillow-only: {mapper / pillow:.2f}x images/s  [target >= 2x]")
        results["one_core_best"] = rates
        results["one_core_median"] = medians
        results["mapper_overhead_vs_bare"] = overhead
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
            "DatasetMapper, short edge 200, full decode": mapper_pipeline(short_edge=200),
            "DatasetMapper, short edge 200, reduced decode": mapper_pipeline(
                short_edge=200, reduced_decode=True
            ),
        }
        small_rates, small_medians = _interleaved(small, records, args.rounds)
        print("\n3. small training scale (shrinks 2.4x), images per CPU-second")
        print(_format_table(small_rates, small_medians, next(iter(small))))
        results["small_scale_best"] = small_rates
        results["small_scale_median"] = small_medians

        if not args.skip_scaling:
            one = _independent_processes(records, 1, args.passes, all_cores)
            two = _independent_processes(records, 2, args.passes, all_cores)
            print("\n4. scaling of the mapper, one thread per library")
            print(
                f"  independent processes, wall clock: 1 -> {one[0]:.1f}, 2 -> {two[0]:.1f} "
                f"images/s (x{two[0] / one[0]:.2f}); per process, images per CPU-second: "
                f"{one[1]:.1f} alone, {two[1]:.1f} with two running (x{2 * two[1] / one[1]:.2f} "
                "in CPU terms)"
            )
            # The DataLoader runs use every core: lift the pin of the main process.
            try:
                import psutil

                psutil.Process().cpu_affinity(all_cores)
            except Exception:  # no affinity support: the loaders run as they are
                pass
            loader_rows = [_dataloader_rate(records, w, args.passes) for w in (1, 2)]
            for row in loader_rows:
                print(
                    f"  DataLoader {row['workers']} worker(s): {row['images_per_s']:.1f} images/s, "
                    f"PSS {row.get('pss_mib', float('nan')):.0f} MiB / USS "
                    f"{row.get('uss_mib', float('nan')):.0f} MiB over {row.get('processes', 0)} "
                    "processes"
                )
            ratio = loader_rows[1]["images_per_s"] / loader_rows[0]["images_per_s"]
            print(f"  DataLoader 2 vs 1 workers: x{ratio:.2f}")
            results["scaling"] = {
                "processes_1_wall": one[0],
                "processes_2_wall": two[0],
                "processes_ratio_wall": two[0] / one[0],
                "processes_1_cpu": one[1],
                "processes_2_cpu_each": two[1],
                "dataloader": loader_rows,
                "dataloader_ratio": ratio,
            }
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
