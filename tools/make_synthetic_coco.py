"""Write a synthetic COCO instances file shaped like COCO 2017 train.

Defaults match COCO 2017 train: 118,287 images, about 860,000 annotations (about 7.3 per image,
a few percent of images without any, a long tail), 80 category ids spread over 1..90 like
COCO's, skewed class frequencies, polygons of 8 to 40 coordinates (sometimes two per
instance), about 1% crowd instances with uncompressed RLE, and the image and annotation keys
the real file has (license, coco_url, area, ...).

Usage:
    python -m tools.make_synthetic_coco --images 118287 --out /tmp/synthetic_train.json --seed 0

Importable: ``make_synthetic_coco(path, num_images, seed)`` returns summary counts.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import msgspec
import numpy as np

from catalog._common import numpy_generator
from tools._bench_common import HelpFormatter

__all__ = ["make_synthetic_coco", "coco_category_ids", "main"]

logger = logging.getLogger(__name__)

#: COCO 2017 uses 80 of the ids 1..90; these 10 are unused.
_UNUSED_COCO_IDS = (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)
_MEAN_ANNOTATIONS_PER_IMAGE = 860_001 / 118_287
_CROWD_FRACTION = 0.0105
_SIZES = ((640, 480), (480, 640), (640, 427), (427, 640), (640, 512), (500, 375), (640, 360))


def coco_category_ids() -> list[int]:
    """The 80 non-contiguous category ids of COCO 2017 (1..90 without 10 of them).

    Example:
        >>> ids = coco_category_ids()
        >>> len(ids), ids[:3], ids[-1]
        (80, [1, 2, 3], 90)
    """
    return [i for i in range(1, 91) if i not in _UNUSED_COCO_IDS]


def _category_weights(num: int, rng: np.random.Generator) -> np.ndarray:
    # A skewed distribution: one dominant class (person in COCO), a long tail.
    weights = 1.0 / np.arange(1, num + 1) ** 0.9
    weights[0] *= 6.0
    rng.shuffle(weights[1:])
    return weights / weights.sum()


def _uncompressed_rle(height: int, width: int, rng: np.random.Generator) -> dict[str, Any]:
    total = height * width
    runs = int(rng.integers(40, 400))
    cuts = np.sort(rng.choice(total - 1, size=runs - 1, replace=False) + 1)
    counts = np.diff(np.concatenate([[0], cuts, [total]]))
    return {"counts": counts.tolist(), "size": [height, width]}


def make_synthetic_coco(path: str, num_images: int = 118_287, seed: int = 0) -> dict[str, int]:
    """Write a COCO-2017-train-shaped instances file with ``num_images`` images to ``path``.

    Args:
        path: output json path (its directory is created).
        num_images: number of images; annotations scale with it (about 7.3 per image).
        seed: the seed of every random choice (same seed, same file).

    Returns:
        ``{"images": ..., "annotations": ..., "categories": 80, "crowd": ..., "bytes": ...}``.

    Example:
        >>> make_synthetic_coco("/tmp/tiny_coco.json", num_images=10, seed=0)["images"]
        10
    """
    if num_images < 0:
        raise ValueError(f"num_images must be >= 0, got {num_images}")
    rng = numpy_generator(seed, 0)
    cat_ids = coco_category_ids()
    categories = [
        {"supercategory": f"super{cid // 10}", "id": cid, "name": f"class_{cid}"} for cid in cat_ids
    ]
    weights = _category_weights(len(cat_ids), rng)

    sizes = np.asarray(_SIZES)[rng.integers(0, len(_SIZES), size=num_images)]
    images = []
    for index in range(num_images):
        width, height = int(sizes[index, 0]), int(sizes[index, 1])
        image_id = 9 + index * 3  # sparse ids, like COCO's
        images.append(
            {
                "license": int(1 + index % 8),
                "file_name": f"{image_id:012d}.jpg",
                "coco_url": f"http://images.cocodataset.org/train2017/{image_id:012d}.jpg",
                "height": height,
                "width": width,
                "date_captured": "2013-11-14 16:28:13",
                "flickr_url": f"http://farm{index % 9}.staticflickr.com/{image_id}.jpg",
                "id": image_id,
            }
        )

    shape = 3.0  # negative binomial: mean 7.27, a few percent of images with none, long tail
    per_image = rng.negative_binomial(
        shape, shape / (shape + _MEAN_ANNOTATIONS_PER_IMAGE), num_images
    )
    total = int(per_image.sum())
    owner = np.repeat(np.arange(num_images), per_image)
    categories_of = rng.choice(np.asarray(cat_ids), size=total, p=weights)
    crowd = rng.random(total) < _CROWD_FRACTION
    rel = rng.random((total, 4))
    num_polygons = np.where(rng.random(total) < 0.12, 2, 1)
    poly_lengths = 2 * rng.integers(4, 21, size=int(num_polygons.sum()))  # 8..40 coordinates
    all_coords = rng.random(int(poly_lengths.sum()))

    annotations = []
    coord_pos = 0
    poly_pos = 0
    for ann_index in range(total):
        img = images[int(owner[ann_index])]
        width, height = img["width"], img["height"]
        x0 = round(float(rel[ann_index, 0]) * width * 0.8, 2)
        y0 = round(float(rel[ann_index, 1]) * height * 0.8, 2)
        w = round(max(1.0, float(rel[ann_index, 2]) * (width - x0)), 2)
        h = round(max(1.0, float(rel[ann_index, 3]) * (height - y0)), 2)
        if crowd[ann_index]:
            segmentation: Any = _uncompressed_rle(height, width, rng)
            poly_pos += int(num_polygons[ann_index])
            coord_pos += int(poly_lengths[poly_pos - int(num_polygons[ann_index]) : poly_pos].sum())
        else:
            segmentation = []
            for _ in range(int(num_polygons[ann_index])):
                n = int(poly_lengths[poly_pos])
                raw = all_coords[coord_pos : coord_pos + n].reshape(-1, 2)
                pts = np.round(raw * (w, h) + (x0, y0), 2)
                segmentation.append(pts.reshape(-1).tolist())
                coord_pos += n
                poly_pos += 1
        annotations.append(
            {
                "segmentation": segmentation,
                "area": round(w * h * 0.6, 4),
                "iscrowd": int(crowd[ann_index]),
                "image_id": img["id"],
                "bbox": [x0, y0, w, h],
                "category_id": int(categories_of[ann_index]),
                "id": 100_000 + ann_index,
            }
        )

    content = {
        "info": {"description": "catmap synthetic COCO-2017-train-shaped file", "version": "1.0"},
        "licenses": [
            {"url": "http://example.invalid", "id": i, "name": f"l{i}"} for i in range(1, 9)
        ],
        "images": images,
        "annotations": annotations,
        "categories": categories,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = msgspec.json.encode(content)
    with open(path, "wb") as f:
        f.write(data)
    summary = {
        "images": num_images,
        "annotations": total,
        "categories": len(categories),
        "crowd": int(crowd.sum()),
        "bytes": len(data),
    }
    logger.info("wrote %s: %s", path, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=118_287, help="number of images")
    parser.add_argument("--out", required=True, help="output json path")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(argv)
    summary = make_synthetic_coco(args.out, args.images, args.seed)
    print(
        f"wrote {args.out}: {summary['images']} images, {summary['annotations']} annotations "
        f"({summary['crowd']} crowd RLE), {summary['categories']} categories, "
        f"{summary['bytes'] / 2**20:.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
