"""Loader throughput and main-process cost: slab transport vs torch's path vs the decode limit.

Everything runs in one invocation over photographic JPEGs the script generates: 640x480
mosaics of crops of scikit-image's sample photographs (astronaut, coffee, chelsea, rocket,
Hubble deep field, ...), about 100 KiB each at quality 95, with 7 annotated boxes each.
(Flat synthetic shapes decode several times faster than photos and flatter every loader.)
For 0, 1, ... ``--max-workers`` workers, each in a fresh process, interleaved ``--repeats``
times (the median run is shown):

* ``bare``: read + decode + ResizeShortestEdge(640..800, 1333) + flip with N independent
  processes and no loader: the limit the cores allow (N = 0: one process);
* ``catmap``: ``build_detection_train_loader`` with ``DatasetMapper``, the slab transport
  (the default);
* ``catmap-dl``: the same with ``transport="dataloader"`` (torch's path);
* ``torch-dl``: a plain torch DataLoader (``collate_fn`` keeps lists) over the same mapper;
* ``tv2``: a torchvision v2 pipeline, when torchvision imports (skipped otherwise).

Reported per configuration: images/s, the main process's CPU time per image (user + system
of the loader's process only, ``getrusage(RUSAGE_SELF)``: workers excluded), the ratio of
images/s to ``bare`` at the same N, and of main-process CPU to ``torch-dl``'s, and the CPU
time per image of all processes (main + workers, psutil; the steadier figure on a busy
machine: with N workers on N cores, images/s is at most N / that).

``--paired``: instead, the default loader's three passes per batch (every sample's randomness
and ``DatasetMapper.prepare``, then the images, then the rest) against mapping one sample at a time
with the global RNGs seeded (how workers mapped before), as two loaders in one process whose
batches are taken alternately: the worker CPU time per image of each, measured side by side,
so a busy machine's drift falls on both; and, after each pair of batches, the outside
yardstick's bare decode + resize (``loader_scaling.py``: no flip) of as many images in the main
process (its thread CPU time): the ratio to the decode limit without the drift between runs.

Usage:
    python -m tools.bench_loader --max-workers 2 --batches 12 --repeats 3
    python -m tools.bench_loader --paired --max-workers 1 --batches 40 --repeats 3
    python -m tools.bench_loader --quick              # development: tiny and fast
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools._bench_common import HelpFormatter, add_json_argument, write_json_results

__all__ = ["main", "make_photo_dataset"]

logger = logging.getLogger(__name__)

HEIGHT, WIDTH = 480, 640
SHORT_EDGES, MAX_SIZE = (640, 800), 1333
PIPELINES = ("bare", "catmap", "catmap-dl", "torch-dl", "tv2")
_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field",
           "immunohistochemistry", "retina", "colorwheel")


def _photo_mosaic(rng: np.random.Generator, photos: list[np.ndarray]) -> np.ndarray:
    """A 640x480 image of 2x2 tiles, each a random crop of a random photo, rescaled."""
    import cv2

    out = np.empty((HEIGHT, WIDTH, 3), dtype=np.uint8)
    th, tw = HEIGHT // 2, WIDTH // 2
    for row in range(2):
        for col in range(2):
            photo = photos[int(rng.integers(len(photos)))]
            ph, pw = photo.shape[:2]
            scale = float(rng.uniform(0.5, 1.0))
            ch, cw = max(int(ph * scale), 16), max(int(pw * scale), 16)
            y0, x0 = int(rng.integers(0, ph - ch + 1)), int(rng.integers(0, pw - cw + 1))
            tile = cv2.resize(photo[y0:y0 + ch, x0:x0 + cw], (tw, th),
                              interpolation=cv2.INTER_AREA)
            if rng.random() < 0.5:
                tile = tile[:, ::-1]
            out[row * th:(row + 1) * th, col * tw:(col + 1) * tw] = tile
    return out


def make_photo_dataset(directory: Path, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """Write ``count`` photographic JPEG mosaics into ``directory``; return their records.

    Example::

        records = make_photo_dataset(Path("/tmp/photos"), 8)  # 8 files, ~100 KiB each
    """
    import skimage.data
    from PIL import Image

    photos = []
    for name in _PHOTOS:
        image = np.asarray(getattr(skimage.data, name)())
        if image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8:
            photos.append(image)
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        path = directory / f"photo_{i:05d}.jpg"
        Image.fromarray(_photo_mosaic(rng, photos)).save(path, "JPEG", quality=95)
        annotations = []
        for _ in range(7):
            w, h = float(rng.uniform(20, 200)), float(rng.uniform(20, 200))
            x0, y0 = float(rng.uniform(0, WIDTH - w)), float(rng.uniform(0, HEIGHT - h))
            annotations.append({"bbox": [x0, y0, w, h], "bbox_mode": 1,
                                "category_id": int(rng.integers(0, 80)), "iscrowd": 0})
        records.append({"file_name": str(path), "height": HEIGHT, "width": WIDTH,
                        "image_id": i, "annotations": annotations})
    return records


def _mapper() -> Any:
    from mappers import transforms as T
    from mappers.dataset_mapper import DatasetMapper

    logging.getLogger("mappers.dataset_mapper").setLevel(logging.WARNING)
    return DatasetMapper(True, augmentations=[
        T.ResizeShortestEdge(SHORT_EDGES, MAX_SIZE, sample_style="range"), T.RandomFlip()])


def _bare_images(records: list[dict[str, Any]], count: int, seed: int) -> int:
    """Decode + resize + flip ``count`` images (cycling over ``records``)."""
    import cv2

    from mappers.image_io import decode_image

    cv2.setNumThreads(1)
    rng = np.random.default_rng(seed)
    for k in range(count):
        with open(records[k % len(records)]["file_name"], "rb") as f:
            image = decode_image(f.read(), "RGB")
        short = int(rng.integers(SHORT_EDGES[0], SHORT_EDGES[1] + 1))
        scale = min(short / min(HEIGHT, WIDTH), MAX_SIZE / max(HEIGHT, WIDTH))
        image = cv2.resize(image, (int(WIDTH * scale + 0.5), int(HEIGHT * scale + 0.5)),
                           interpolation=cv2.INTER_LINEAR)
        if rng.random() < 0.5:
            image = cv2.flip(image, 1)  # numpy's copy of a reversed view is 10x slower
    return count


def _decode_resize_cpu(records: list[dict[str, Any]], count: int, seed: int) -> float:
    """Thread CPU seconds of the outside yardstick's bare operation (loader_scaling.py) on
    ``count`` images: read, simplejpeg's BGR decode (else OpenCV's), OpenCV bilinear resize
    to a drawn short edge; no flip, no Python of catmap."""
    import cv2

    try:
        import simplejpeg
    except ImportError:
        simplejpeg = None
    rng, began = np.random.default_rng(seed), time.thread_time()
    for k in range(count):
        with open(records[k % len(records)]["file_name"], "rb") as f:
            data = f.read()
        image = (simplejpeg.decode_jpeg(data, colorspace="BGR") if simplejpeg is not None
                 else cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR))
        short = int(rng.integers(SHORT_EDGES[0], SHORT_EDGES[1] + 1))
        scale = min(short / min(image.shape[:2]), MAX_SIZE / max(image.shape[:2]))
        size = (int(image.shape[1] * scale + 0.5), int(image.shape[0] * scale + 0.5))
        cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
    return time.thread_time() - began


def _bare_worker(records: list[dict[str, Any]], count: int, seed: int, start: Any) -> None:
    start.wait()
    _bare_images(records, count, seed)


def _run_bare(records: list[dict[str, Any]], workers: int, images: int) -> dict[str, Any]:
    import cv2  # noqa: F401  (imported before the fork, not timed)

    import mappers.image_io  # noqa: F401

    processes = max(workers, 1)
    per = max(images // processes, 1)
    if workers == 0:
        _bare_images(records, 16, 99)  # warm-up
        t0, usage0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        _bare_images(records, per, 0)
        wall, usage = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        cpu = (usage.ru_utime - usage0.ru_utime) + (usage.ru_stime - usage0.ru_stime)
        return {"img_s": per / wall, "main_us": None, "all_us": cpu / per * 1e6}
    ctx = mp.get_context("fork")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = ctx.Event()
    procs = [ctx.Process(target=_bare_worker, args=(records, per, i, start))
             for i in range(processes)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    start.set()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    images = per * processes
    return {"img_s": images / wall, "main_us": None, "all_us": cpu / images * 1e6}


class _ListDataset:
    """records -> mapper(record), for the plain torch DataLoader."""

    def __init__(self, records: list[dict[str, Any]], mapper: Any) -> None:
        self.records, self.mapper = records, mapper

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Any:
        return self.mapper(dict(self.records[index]))


def _as_list(batch: list[Any]) -> list[Any]:
    return batch


def _tv2_loader(records: list[dict[str, Any]], workers: int, batch: int) -> Any:
    import torch
    import torchvision  # noqa: F401  (fails here when the wheel does not fit torch)
    from torchvision.io import decode_jpeg, read_file
    from torchvision.transforms import v2

    class TV2:
        def __init__(self) -> None:
            self.flip = v2.RandomHorizontalFlip()

        def __len__(self) -> int:
            return len(records)

        def __getitem__(self, index: int) -> Any:
            image = decode_jpeg(read_file(records[index]["file_name"]))
            short = int(torch.randint(SHORT_EDGES[0], SHORT_EDGES[1] + 1, ()))
            image = v2.functional.resize(image, short, max_size=MAX_SIZE, antialias=False)
            return {"image": self.flip(image), "image_id": records[index]["image_id"]}

    return torch.utils.data.DataLoader(TV2(), batch_size=batch, shuffle=True,
                                       num_workers=workers, collate_fn=_as_list)


def _make_loader(pipeline: str, records: list[dict[str, Any]], workers: int, batch: int) -> Any:
    import torch

    from samplers import build_detection_train_loader

    if pipeline in ("catmap", "catmap-dl"):
        return build_detection_train_loader(
            records, mapper=_mapper(), total_batch_size=batch, num_workers=workers, seed=0,
            aspect_ratio_grouping=False,
            transport="auto" if pipeline == "catmap" else "dataloader",
        )
    if pipeline == "torch-dl":
        generator = torch.Generator().manual_seed(0)
        return torch.utils.data.DataLoader(
            _ListDataset(records, _mapper()), batch_size=batch, shuffle=True, drop_last=True,
            num_workers=workers, collate_fn=_as_list, generator=generator)
    return _tv2_loader(records, workers, batch)


def _children_cpu() -> dict[int, float]:
    """user + system seconds of each live child process (the loader's workers)."""
    import psutil

    out = {}
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        out[child.pid] = times.user + times.system
    return out


def _run_loader(pipeline: str, records: list[dict[str, Any]], workers: int, batch: int,
                batches: int, warmup: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    _children_cpu()  # imports psutil outside the timed window
    loader = _make_loader(pipeline, records, workers, batch)
    done = 0
    while True:  # a finite loader (torch-dl, tv2) is restarted; catmap's is endless
        for item in loader:
            if done == warmup:
                workers0 = _children_cpu()  # before the main process's clock starts
                t0 = time.perf_counter()
                usage0 = resource.getrusage(resource.RUSAGE_SELF)
            done += 1
            assert len(item) == batch and item[0]["image"].dim() == 3
            del item
            if done == warmup + batches:
                wall = time.perf_counter() - t0
                usage = resource.getrusage(resource.RUSAGE_SELF)
                cpu = (usage.ru_utime - usage0.ru_utime) + (usage.ru_stime - usage0.ru_stime)
                workers_cpu = sum(t - workers0.get(pid, t) for pid, t in _children_cpu().items())
                images = batches * batch
                return {"img_s": images / wall, "main_us": cpu / images * 1e6,
                        "all_us": (cpu + workers_cpu) / images * 1e6}


def _run_paired(records: list[dict[str, Any]], workers: int, batch: int, batches: int,
                warmup: int) -> dict[str, Any]:
    """Worker CPU µs per image of three passes vs one sample at a time, batches alternating."""
    import torch

    torch.set_num_threads(1)
    streams = {}
    for name in ("passes_us", "one_at_a_time_us"):
        before = set(_children_cpu())
        loader = _make_loader("catmap", records, workers, batch)
        if name == "one_at_a_time_us":  # the worker path as it was: no prepare, globals seeded
            seeded = loader.loader.dataset.dataset
            seeded.seed_globals, seeded.prepare_keys = True, None
        iterator = iter(loader)
        next(iterator)  # workers started
        streams[name] = (iterator, set(_children_cpu()) - before)
    for _ in range(warmup):
        for iterator, _pids in streams.values():
            next(iterator)
    start, bare = _children_cpu(), 0.0
    for step in range(batches):
        for name in sorted(streams, reverse=step % 2 == 1):  # alternate which goes first
            next(streams[name][0])
        bare += _decode_resize_cpu(records[step * batch:], batch, step)  # workers wait
    end = _children_cpu()
    result = {name: 1e6 * sum(end[pid] - start[pid] for pid in pids) / (batches * batch)
              for name, (_iterator, pids) in streams.items()}
    result["ratio"] = result["one_at_a_time_us"] / result["passes_us"]
    result["bare_us"] = 1e6 * bare / (batches * batch)
    result["bare_ratio"] = result["bare_us"] / result["passes_us"]
    return result


def _child(args: argparse.Namespace) -> None:
    records = json.loads(Path(args.records).read_text())
    # one pass must cover the run: a finite loader (torch-dl, tv2) restarting its workers
    # inside the timed batches would pay worker start-up
    needed = (args.warmup + args.batches + 1) * args.batch * 2
    records = [dict(r) for _ in range(-(-needed // len(records))) for r in records]
    if args.pipeline == "paired":
        result = _run_paired(records, args.workers, args.batch, args.batches, args.warmup)
    elif args.pipeline == "bare":
        result = _run_bare(records, args.workers, args.batches * args.batch)
    else:
        result = _run_loader(args.pipeline, records, args.workers, args.batch, args.batches,
                             args.warmup)
    print("RESULT " + json.dumps(result))


def _tv2_available() -> str | None:
    """None when torchvision imports, else why not."""
    probe = subprocess.run([sys.executable, "-c", "import torchvision.transforms.v2"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["not installed"])[-1]
    return last[:160]


def _spawn(pipeline: str, workers: int, args: argparse.Namespace, records: Path) -> dict | None:
    command = [sys.executable, "-m", __spec__.name, "--child", pipeline, "--workers", str(workers),
               "--records", str(records), "--batch", str(args.batch),
               "--batches", str(args.batches), "--warmup", str(args.warmup)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    logger.error("%s with %d workers failed:\n%s", pipeline, workers, done.stderr[-2000:])
    return None


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("workers", "pipeline", "img/s", "x bare", "main CPU us/img", "x torch-dl",
              "all CPU us/img")
    lines = [header]
    for row in rows:
        lines.append((
            str(row["workers"]), row["pipeline"], f"{row['img_s']:.0f}",
            f"{row['x_bare']:.2f}" if row.get("x_bare") is not None else "",
            f"{row['main_us']:.0f}" if row.get("main_us") is not None else "",
            f"{row['x_torch_dl']:.2f}" if row.get("x_torch_dl") is not None else "",
            f"{row['all_us']:.0f}" if row.get("all_us") is not None else "",
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True))
           for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _paired_main(args: argparse.Namespace) -> dict[str, Any]:
    workers = max(1, args.max_workers)
    with tempfile.TemporaryDirectory(prefix="bench_loader_") as tmp:
        records_file = Path(tmp) / "records.json"
        records_file.write_text(json.dumps(make_photo_dataset(Path(tmp), args.images)))
        runs = [r for r in (_spawn("paired", workers, args, records_file)
                            for _ in range(args.repeats)) if r is not None]
    print(f"{args.images} photo JPEGs, batch {args.batch}, {workers} worker(s) per loader, "
          f"{args.batches} alternating batches after {args.warmup}; worker CPU µs per image")
    for run in runs:
        print(f"  three passes {run['passes_us']:7.0f}   one at a time "
              f"{run['one_at_a_time_us']:7.0f}   one at a time / three passes {run['ratio']:.3f}"
              f"   bare {run['bare_us']:7.0f}   bare / three passes {run['bare_ratio']:.3f}")
    results = {"paired": runs, "workers": workers}
    write_json_results(args.json_out, results)
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the table; return the figures."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=48, help="distinct JPEGs generated")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=12, help="timed batches per run")
    parser.add_argument("--warmup", type=int, default=3, help="batches before timing")
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pipelines", default=",".join(PIPELINES))
    parser.add_argument("--quick", action="store_true", help="tiny settings for development")
    parser.add_argument("--paired", action="store_true",
                        help="three passes vs one sample at a time, worker CPU per image")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--records", help=argparse.SUPPRESS)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.child:
        args.pipeline = args.child
        _child(args)
        return {}
    if args.quick:
        args.images, args.batch, args.batches, args.warmup, args.repeats = 8, 4, 3, 1, 1
    for name in ("images", "batch", "batches", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.warmup < 0 or args.max_workers < 0:
        parser.error("--warmup and --max-workers must be >= 0")
    if args.paired:
        return _paired_main(args)
    pipelines = [p for p in args.pipelines.split(",") if p]
    unknown = sorted(set(pipelines) - set(PIPELINES))
    if unknown:
        parser.error(f"unknown pipelines {unknown}; choose from {PIPELINES}")
    notes = []
    if "tv2" in pipelines:
        why = _tv2_available()
        if why is not None:
            pipelines.remove("tv2")
            notes.append(f"tv2 skipped: torchvision does not import here ({why})")
    with tempfile.TemporaryDirectory(prefix="bench_loader_") as tmp:
        records = make_photo_dataset(Path(tmp), args.images)
        sizes = [os.path.getsize(r["file_name"]) for r in records]
        records_file = Path(tmp) / "records.json"
        records_file.write_text(json.dumps(records))
        runs: dict[tuple[str, int], list[dict]] = {}
        for _ in range(args.repeats):
            for workers in range(args.max_workers + 1):
                for pipeline in pipelines:
                    result = _spawn(pipeline, workers, args, records_file)
                    if result is not None:
                        runs.setdefault((pipeline, workers), []).append(result)
    rows = []
    for workers in range(args.max_workers + 1):
        medians = {}
        for pipeline in pipelines:
            results = runs.get((pipeline, workers))
            if not results:
                continue
            results = sorted(results, key=lambda r: r["img_s"])
            medians[pipeline] = results[len(results) // 2]
        bare = medians.get("bare", {}).get("img_s")
        plain = medians.get("torch-dl", {}).get("main_us")
        for pipeline, result in medians.items():
            main_us = result["main_us"]
            rows.append({
                "workers": workers, "pipeline": pipeline, "img_s": result["img_s"],
                "main_us": main_us, "all_us": result.get("all_us"),
                "x_bare": result["img_s"] / bare if bare and pipeline != "bare" else None,
                "x_torch_dl": main_us / plain if plain and main_us is not None else None,
            })
    print(f"{args.images} photo JPEGs, mean {statistics.mean(sizes) / 1024:.0f} KiB; batch "
          f"{args.batch}, {args.batches} timed batches after {args.warmup}; median of "
          f"{args.repeats} runs; {os.cpu_count()} CPUs")
    print(_table(rows))
    for note in notes:
        print(note)
    results = {"rows": rows, "notes": notes, "mean_jpeg_kib": statistics.mean(sizes) / 1024,
               "args": {k: v for k, v in vars(args).items() if k not in ("child", "records")}}
    write_json_results(args.json_out, results)
    return results


if __name__ == "__main__":
    main()
