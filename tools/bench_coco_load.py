"""Benchmark COCO annotation loading: catmap (without and with its cache) vs pycocotools.

Every measurement runs in a fresh Python subprocess (nothing warm in memory, peak RSS belongs
to that method alone) on the same synthetic COCO file (``tools/make_synthetic_coco.py``,
shaped like COCO 2017 train by default). Methods:

``catmap_load_coco_json``
    ``catalog.load_coco_json(json_file, image_root, name)``: the list of record dicts.
``catmap_cache_miss``
    ``register_coco_instances`` + ``DatasetCatalog.get`` with an empty cache: parse,
    serialize and write the cache file.
``catmap_cache_hit``
    the same with the cache filled: time until ``records[0]`` is available (cache file
    mapped and verified).
``pycocotools_d2``
    ``pycocotools.coco.COCO(json_file)`` then the detectron2-style conversion of its index
    into record dicts (what ``detectron2.data.datasets.load_coco_json`` does).

Seconds are wall time from the start of the call (imports excluded); peak RSS is the
process's high-water mark (``ru_maxrss``), and "delta" subtracts the RSS measured after the
imports. With ``--repeat N`` every method runs N times (interleaved) and the median is shown.

Usage:
    python -m tools.bench_coco_load                       # full size: 118,287 images
    python -m tools.bench_coco_load --images 20000 --repeat 3
    python -m tools.bench_coco_load --json-file instances_train2017.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from tools._bench_common import HelpFormatter, add_json_argument, write_json_results

__all__ = ["METHODS", "convert_pycocotools", "main", "run_method"]

logger = logging.getLogger(__name__)

METHODS = ("catmap_load_coco_json", "catmap_cache_miss", "catmap_cache_hit", "pycocotools_d2")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _peak_kib() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def convert_pycocotools(coco: Any, image_root: str) -> list[dict]:
    """Turn a pycocotools ``COCO`` index into detectron2-format records.

    Mirrors the behaviour of detectron2's ``load_coco_json``: images sorted by id, category
    ids mapped to contiguous ids by sorted COCO id, polygons with fewer than 6 coordinates or
    an odd count dropped, keypoints shifted by 0.5, boxes kept XYWH_ABS.
    """
    from catalog import BoxMode

    cat_ids = sorted(coco.getCatIds())
    id_map = {cat_id: i for i, cat_id in enumerate(cat_ids)}
    records = []
    for img_id in sorted(coco.imgs):
        img = coco.imgs[img_id]
        record = {
            "file_name": os.path.join(image_root, img["file_name"]),
            "height": img["height"],
            "width": img["width"],
            "image_id": img_id,
        }
        objs = []
        for ann in coco.imgToAnns.get(img_id, []):
            obj = {key: ann[key] for key in ("iscrowd", "bbox", "category_id") if key in ann}
            segm = ann.get("segmentation")
            if segm:
                if isinstance(segm, list):
                    segm = [poly for poly in segm if len(poly) % 2 == 0 and len(poly) >= 6]
                    if not segm:
                        continue
                obj["segmentation"] = segm
            keypts = ann.get("keypoints")
            if keypts:
                obj["keypoints"] = [v + 0.5 if i % 3 != 2 else v for i, v in enumerate(keypts)]
            obj["bbox_mode"] = BoxMode.XYWH_ABS
            obj["category_id"] = id_map[obj["category_id"]]
            objs.append(obj)
        record["annotations"] = objs
        records.append(record)
    return records


def run_method(method: str, json_file: str, cache_dir: str) -> dict[str, Any]:
    """Run one method in this process and return its measurements."""
    os.environ["CATMAP_CACHE_DIR"] = cache_dir
    logging.disable(logging.WARNING)
    import catalog  # noqa: F401  (imports are not timed)

    if method == "pycocotools_d2":
        import contextlib
        import io

        from pycocotools.coco import COCO
    base_rss = _rss_kib()
    start = time.perf_counter()
    extra: dict[str, Any] = {}
    if method == "catmap_load_coco_json":
        records = catalog.load_coco_json(json_file, "/images", "bench")
        seconds = time.perf_counter() - start
        count = len(records)
    elif method in ("catmap_cache_miss", "catmap_cache_hit"):
        catalog.register_coco_instances("bench", {}, json_file, "/images", cache=True)
        records = catalog.DatasetCatalog.get("bench")
        first = records[0]
        seconds = time.perf_counter() - start
        count = len(records)
        extra["first_file_name"] = first["file_name"]
        extra["cache_mib"] = (
            sum(os.path.getsize(os.path.join(cache_dir, f)) for f in os.listdir(cache_dir)) / 2**20
        )
    elif method == "pycocotools_d2":
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO(json_file)
        records = convert_pycocotools(coco, "/images")
        seconds = time.perf_counter() - start
        count = len(records)
    else:
        raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
    return {
        "method": method,
        "seconds": seconds,
        "records": count,
        "peak_rss_mib": _peak_kib() / 1024,
        "peak_delta_mib": (_peak_kib() - base_rss) / 1024,
        **extra,
    }


def _run_in_subprocess(method: str, json_file: str, cache_dir: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        __spec__.name,
        "--_child",
        method,
        "--json-file",
        json_file,
        "--cache-dir",
        cache_dir,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=_ROOT, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{method} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(results: dict[str, list[dict[str, Any]]]) -> str:
    med = {
        m: {
            k: statistics.median(r[k] for r in rs)
            for k in ("seconds", "peak_rss_mib", "peak_delta_mib")
        }
        for m, rs in results.items()
    }
    ref = med.get("pycocotools_d2")
    lines = [f"{'method':<24}{'seconds':>9}{'peak RSS MiB':>14}{'delta MiB':>11}{'speedup':>9}"]
    for method, m in med.items():
        speed = f"{ref['seconds'] / m['seconds']:.1f}x" if ref else "-"
        lines.append(
            f"{method:<24}{m['seconds']:>9.3f}{m['peak_rss_mib']:>14.0f}{m['peak_delta_mib']:>11.0f}{speed:>9}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter
    )
    parser.add_argument("--images", type=int, default=118_287, help="synthetic file size")
    parser.add_argument("--json-file", help="use this COCO file instead of a synthetic one")
    parser.add_argument("--repeat", type=int, default=1, help="runs per method (median shown)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    add_json_argument(parser)
    args = parser.parse_args(argv)

    if args._child:
        print(json.dumps(run_method(args._child, args.json_file, args.cache_dir)))
        return 0

    with tempfile.TemporaryDirectory(prefix="catmap-bench-") as tmp:
        json_file = args.json_file
        if json_file is None:
            from tools.make_synthetic_coco import make_synthetic_coco

            json_file = os.path.join(tmp, "synthetic_instances.json")
            summary = make_synthetic_coco(json_file, args.images, seed=0)
            print(f"synthetic file: {summary}")
        print(f"file: {json_file} ({os.path.getsize(json_file) / 2**20:.1f} MiB)")
        results: dict[str, list[dict[str, Any]]] = {m: [] for m in args.methods}
        for _ in range(args.repeat):
            for method in args.methods:
                cache_dir = os.path.join(tmp, "cache-" + method)
                if method == "catmap_cache_hit" and not os.path.isdir(cache_dir):
                    _run_in_subprocess("catmap_cache_miss", json_file, cache_dir)  # fill it
                if method == "catmap_cache_miss" and os.path.isdir(cache_dir):
                    for name in os.listdir(cache_dir):
                        os.unlink(os.path.join(cache_dir, name))
                result = _run_in_subprocess(method, json_file, cache_dir)
                results[method].append(result)
                print(
                    f"  {method}: {result['seconds']:.3f} s, peak RSS {result['peak_rss_mib']:.0f} MiB"
                )
        counts = {m: rs[0]["records"] for m, rs in results.items()}
        if len(set(counts.values())) != 1:
            raise RuntimeError(f"methods disagree on the number of records: {counts}")
        print()
        print(_table(results))
        write_json_results(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
