"""Dataset statistics: class frequencies, repeat factors at a threshold, image sizes.

Prints a class table (images containing the class, fraction of images f(c), instances, share
of instances, repeat factor r(c) = max(1, sqrt(t / f(c)))), the per-image repeat factors the
``RepeatFactorTrainingSampler`` would use, and the distribution of image sizes and aspect
ratios. Writes a PNG with histograms when matplotlib is installed (``pip install catmap[viz]``)
and, with ``--json``, the same figures as JSON.

Everything is computed from the SerializedList's numpy columns: no record is unpickled, so a
million-image dataset takes about a second.

Examples::

    python -m tools.analyze_dataset                               # the demo's shapes dataset
    python -m tools.analyze_dataset --coco-json ann.json --image-root images/ --repeat-thresh 0.001
    python -m tools.analyze_dataset --import my_project.datasets --dataset my_train --out stats/
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._bench_common import HelpFormatter
from .dataset_source import DatasetSourceError, add_dataset_arguments, resolve_dataset
from .demo import format_table
from .shapes_dataset import default_demo_dir

__all__ = ["DatasetStats", "compute_stats", "format_report", "main", "plot_stats"]


class DatasetStats:
    """Statistics of one dataset (see :func:`compute_stats`).

    Attributes:
        name: dataset name.
        class_names: class names (metadata ``thing_classes``, or ``#k`` when absent).
        num_images: records.
        num_instances: non-crowd annotations.
        num_crowd: crowd annotations.
        images_without_annotations: records with no non-crowd annotation.
        images_per_class: (K,) images containing each class.
        instances_per_class: (K,) non-crowd instances of each class.
        class_image_fraction: (K,) f(c), the fraction of records with an annotation of class
            c (crowd ones included, as the sampler counts them).
        class_repeat_factors: (K,) r(c) at ``repeat_thresh``.
        image_repeat_factors: (N,) r(image) as the sampler computes it.
        repeat_thresh: the threshold t.
        widths / heights: (N,) image sizes (-1 when the record has none).
    """

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serializable summary."""
        valid = (self.widths > 0) & (self.heights > 0)
        aspect = self.widths[valid] / np.maximum(self.heights[valid], 1)
        return {
            "name": self.name,
            "num_images": int(self.num_images),
            "num_instances": int(self.num_instances),
            "num_crowd": int(self.num_crowd),
            "images_without_annotations": int(self.images_without_annotations),
            "repeat_thresh": float(self.repeat_thresh),
            "classes": [
                {
                    "name": self.class_names[c],
                    "images": int(self.images_per_class[c]),
                    "image_fraction": float(self.class_image_fraction[c]),
                    "instances": int(self.instances_per_class[c]),
                    "repeat_factor": float(self.class_repeat_factors[c]),
                }
                for c in range(len(self.class_names))
            ],
            "image_repeat_factors": {
                "min": float(self.image_repeat_factors.min()) if self.num_images else 0.0,
                "mean": float(self.image_repeat_factors.mean()) if self.num_images else 0.0,
                "max": float(self.image_repeat_factors.max()) if self.num_images else 0.0,
                "images_repeated": int((self.image_repeat_factors > 1).sum()),
                "expected_epoch_size": float(self.image_repeat_factors.sum()),
            },
            "image_sizes": {
                "known": int(valid.sum()),
                "landscape": int((aspect > 1).sum()),
                "portrait": int((aspect < 1).sum()),
                "square": int((aspect == 1).sum()),
                "common": [
                    {"width": w, "height": h, "count": n} for (w, h), n in _common_sizes(self, 10)
                ],
            },
        }


def _common_sizes(stats: DatasetStats, top: int) -> list[tuple[tuple[int, int], int]]:
    valid = (stats.widths > 0) & (stats.heights > 0)
    if not valid.any():
        return []
    pairs = np.stack([stats.widths[valid], stats.heights[valid]], axis=1)
    unique, counts = np.unique(pairs, axis=0, return_counts=True)
    order = np.argsort(-counts, kind="stable")[:top]
    return [((int(unique[i, 0]), int(unique[i, 1])), int(counts[i])) for i in order]


def compute_stats(name: str, repeat_thresh: float, *, filter_empty: bool = False) -> DatasetStats:
    """Compute :class:`DatasetStats` of a registered dataset from its record columns.

    Args:
        name: a name registered in ``DatasetCatalog``.
        repeat_thresh: repeat-factor threshold t (> 0).
        filter_empty: drop images without non-crowd annotations first (as training does).

    Raises:
        ValueError: repeat_thresh is not positive.

    Example:
        >>> stats = compute_stats("shapes_demo", 0.5)   # doctest: +SKIP
        >>> stats.instances_per_class.sum() == stats.num_instances   # doctest: +SKIP
        True
    """
    from catalog import DatasetCatalog, MetadataCatalog, get_detection_dataset_dicts
    from samplers import repeat_factors_from_category_frequency

    if not repeat_thresh > 0:
        raise ValueError(f"repeat_thresh must be positive, got {repeat_thresh}")
    if filter_empty:
        records = get_detection_dataset_dicts(name, filter_empty=True)
    else:
        records = DatasetCatalog.get(name)
    columns = records.columns
    cats = np.asarray(columns.category_ids, dtype=np.int64)
    crowd = np.asarray(columns.iscrowd) != 0
    offsets = np.asarray(columns.category_offsets)
    num_images = len(records)
    classes = MetadataCatalog.get(name).get("thing_classes")
    num_classes = len(classes) if classes else int(cats.max()) + 1 if len(cats) else 0
    class_names = list(classes) if classes else [f"#{k}" for k in range(num_classes)]
    owners = np.repeat(np.arange(num_images), np.diff(offsets))
    keep = ~crowd & (cats >= 0) & (cats < num_classes)
    per_record = np.zeros((num_images, num_classes), dtype=np.int64)
    np.add.at(per_record, (owners[keep], cats[keep]), 1)
    images_per_class = (per_record > 0).sum(axis=0)
    # f(c) and r(c) as the sampler computes them: crowd annotations count too (as in detectron2)
    known = (cats >= 0) & (cats < num_classes)
    has_class = np.zeros((num_images, num_classes), dtype=bool)
    has_class[owners[known], cats[known]] = True
    fraction = has_class.sum(axis=0) / max(num_images, 1)
    with np.errstate(divide="ignore"):
        class_rf = np.where(fraction > 0, np.maximum(1.0, np.sqrt(repeat_thresh / fraction)), 1.0)
    image_rf = repeat_factors_from_category_frequency(records, repeat_thresh)
    if hasattr(image_rf, "detach"):
        image_rf = image_rf.detach().cpu().numpy()
    return DatasetStats(
        name=name,
        class_names=class_names,
        num_images=num_images,
        num_instances=int(keep.sum()),
        num_crowd=int(crowd.sum()),
        images_without_annotations=int((per_record.sum(axis=1) == 0).sum()),
        images_per_class=images_per_class,
        instances_per_class=per_record.sum(axis=0),
        class_image_fraction=fraction,
        class_repeat_factors=class_rf,
        image_repeat_factors=np.asarray(image_rf, dtype=np.float64),
        repeat_thresh=float(repeat_thresh),
        widths=np.asarray(columns.widths, dtype=np.int64),
        heights=np.asarray(columns.heights, dtype=np.int64),
    )


def format_report(stats: DatasetStats, *, top_classes: int = 50) -> str:
    """Render the statistics as text tables.

    Args:
        stats: from :func:`compute_stats`.
        top_classes: classes shown (most frequent first when there are more).
    """
    summary = stats.to_json()
    out = [
        f"dataset {stats.name!r}: {stats.num_images} images, {stats.num_instances} instances "
        f"({stats.num_crowd} crowd), {stats.images_without_annotations} images without annotations",
        "",
        f"classes ({len(stats.class_names)}), repeat threshold t = {stats.repeat_thresh:g}:",
    ]
    order = np.argsort(-stats.instances_per_class, kind="stable")[:top_classes]
    total = max(int(stats.instances_per_class.sum()), 1)
    rows = [
        [
            stats.class_names[c],
            int(stats.images_per_class[c]),
            f"{stats.class_image_fraction[c]:.4f}",
            int(stats.instances_per_class[c]),
            f"{100 * stats.instances_per_class[c] / total:.1f}%",
            f"{stats.class_repeat_factors[c]:.2f}",
        ]
        for c in order
    ]
    out.append(format_table(["class", "images", "f(c)", "instances", "share", "r(c)"], rows))
    if len(stats.class_names) > top_classes:
        out.append(f"... {len(stats.class_names) - top_classes} more classes (see --json)")
    rf = summary["image_repeat_factors"]
    out += [
        "",
        f"per-image repeat factors: min {rf['min']:.2f}, mean {rf['mean']:.2f}, max {rf['max']:.2f}; "
        f"{rf['images_repeated']} images repeated; an epoch of {stats.num_images} images becomes "
        f"~{rf['expected_epoch_size']:.0f}",
    ]
    sizes = summary["image_sizes"]
    valid = (stats.widths > 0) & (stats.heights > 0)
    out += ["", f"image sizes ({sizes['known']} known): {sizes['landscape']} landscape, "
            f"{sizes['portrait']} portrait, {sizes['square']} square"]  # fmt: skip
    if valid.any():
        w, h = stats.widths[valid], stats.heights[valid]
        out.append(f"  width  min {w.min()}, median {int(np.median(w))}, max {w.max()}")
        out.append(f"  height min {h.min()}, median {int(np.median(h))}, max {h.max()}")
        out.append(format_table(["size (w x h)", "images"],
                          [[f"{c['width']} x {c['height']}", c["count"]] for c in sizes["common"]]))  # fmt: skip
    return "\n".join(out)


def plot_stats(stats: DatasetStats, path: Path, *, top_classes: int = 40) -> Path:
    """Write a PNG with the class histogram, repeat factors and image sizes.

    Raises:
        ImportError: matplotlib is not installed (``pip install catmap[viz]``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = np.argsort(-stats.instances_per_class, kind="stable")[:top_classes]
    names = [stats.class_names[c] for c in order]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    ax.bar(range(len(order)), stats.instances_per_class[order], color="#4C72B0")
    ax.set_xticks(range(len(order)), names, rotation=60 if len(order) > 8 else 0, ha="right" if len(order) > 8 else "center")
    ax.set_ylabel("instances")
    ax.set_title("instances per class")
    ax = axes[1]
    ax.bar(range(len(order)), stats.class_repeat_factors[order], color="#DD8452")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(order)), names, rotation=60 if len(order) > 8 else 0, ha="right" if len(order) > 8 else "center")
    ax.set_ylabel("r(c)")
    ax.set_title(f"repeat factor per class (t = {stats.repeat_thresh:g})")
    ax = axes[2]
    valid = (stats.widths > 0) & (stats.heights > 0)
    if valid.any():
        ax.hist(
            np.log2(stats.widths[valid] / stats.heights[valid]),
            bins=min(40, max(5, int(math.sqrt(valid.sum())))),
            color="#55A868",
        )
    ax.set_xlabel("log2(width / height)")
    ax.set_ylabel("images")
    ax.set_title("aspect ratios")
    fig.suptitle(f"{stats.name}: {stats.num_images} images, {stats.num_instances} instances")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        description="Class frequencies, repeat factors and image sizes.",
    )
    add_dataset_arguments(parser)
    parser.add_argument("--repeat-thresh", type=float, default=0.5,
                        help="repeat-factor threshold t (detectron2 LVIS uses 0.001)")  # fmt: skip
    parser.add_argument("--filter-empty", action="store_true",
                        help="drop images without annotations first, as training does")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for the PNG histogram (default: <demo dir>/analysis)")  # fmt: skip
    parser.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if not args.repeat_thresh > 0:
        parser.error(f"--repeat-thresh must be positive, got {args.repeat_thresh}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        name = resolve_dataset(args)
    except DatasetSourceError as exc:
        parser.error(str(exc))
    stats = compute_stats(name, args.repeat_thresh, filter_empty=args.filter_empty)
    print(format_report(stats))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(stats.to_json(), indent=2))
        print(f"\nwrote {args.json}")
    if not args.no_plot:
        out_dir = args.out or default_demo_dir() / "analysis"
        path = out_dir / f"{name.replace(':', '_').replace('/', '_')}_stats.png"
        try:
            plot_stats(stats, path)
        except ImportError:
            print("\nmatplotlib is not installed: no PNG written (pip install 'catmap[viz]')")
        else:
            print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
