"""A synthetic COCO detection dataset: coloured shapes on varied backgrounds.

Every image is a JPEG with a few non-overlapping shapes (circle, square, triangle, hexagon,
star, cross) drawn as polygons on a gradient, noise, stripe or checkerboard background. The
annotation of each shape is the very polygon that was drawn, so boxes and polygons are exact.
Class frequencies are deliberately unbalanced (circles are common, crosses rare), which makes
the dataset a good showcase for repeat-factor sampling. Image sizes mix landscape, portrait and
square shapes so that aspect-ratio grouping has something to do.

Generation is deterministic for a seed (each image from its own generator seeded from
``(seed, image index)``), writes every file atomically, and is skipped when a previous run with
the same settings left a complete dataset behind.

Example:
    >>> from tools.shapes_dataset import generate_shapes_dataset
    >>> ds = generate_shapes_dataset("/tmp/shapes", num_images=20)   # doctest: +SKIP
    >>> ds.json_file.name, len(ds.class_names)                      # doctest: +SKIP
    ('annotations.json', 6)

Command line::

    python -m tools.shapes_dataset --out /tmp/shapes --num-images 300 --seed 0
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._bench_common import HelpFormatter
from .shapes_render import SHAPE_CLASSES, polygon_area, render_image, shape_polygon

__all__ = [
    "DEFAULT_IMAGE_SIZES",
    "OutputExistsError",
    "SHAPE_CATEGORY_IDS",
    "SHAPE_CLASSES",
    "SHAPE_WEIGHTS",
    "ShapesDataset",
    "default_demo_dir",
    "generate_shapes_dataset",
    "register_shapes_dataset",
    "shape_polygon",
]

logger = logging.getLogger(__name__)

#: COCO category ids: deliberately not 0..K-1, so loaders must map them to contiguous ids.
SHAPE_CATEGORY_IDS: tuple[int, ...] = (10, 20, 30, 40, 50, 60)
#: Probability of each class for every drawn shape: strongly unbalanced on purpose.
SHAPE_WEIGHTS: tuple[float, ...] = (0.46, 0.25, 0.14, 0.08, 0.045, 0.025)
#: Image sizes as (width, height): landscape, portrait and square.
DEFAULT_IMAGE_SIZES: tuple[tuple[int, int], ...] = (
    (320, 240),
    (384, 256),
    (240, 320),
    (256, 384),
    (288, 288),
)

_FORMAT_VERSION = 1
_MANIFEST = "manifest.json"
_ANNOTATIONS = "annotations.json"
_IMAGES = "images"


@dataclass(frozen=True)
class ShapesDataset:
    """Where a generated shapes dataset lives and what it holds.

    Attributes:
        root: the dataset directory.
        json_file: the COCO instances file.
        image_root: the directory holding the JPEG images.
        num_images: number of images.
        num_annotations: number of annotated shapes.
        class_names: class names in category-id order.
        category_ids: COCO category id of each class.
        generated: True when this call wrote the files, False when an existing dataset was reused.
    """

    root: Path
    json_file: Path
    image_root: Path
    num_images: int
    num_annotations: int
    class_names: tuple[str, ...] = SHAPE_CLASSES
    category_ids: tuple[int, ...] = SHAPE_CATEGORY_IDS
    generated: bool = field(default=True, compare=False)


def default_demo_dir() -> Path:
    """Return the demo dataset cache directory: ``$CATMAP_DEMO_DIR`` or ``~/.cache/catmap-demo``.

    Example:
        >>> isinstance(default_demo_dir(), Path)
        True
    """
    env = os.environ.get("CATMAP_DEMO_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "catmap-demo"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _settings(num_images: int, seed: int, sizes, max_shapes: int, weights) -> dict:
    return {
        "format_version": _FORMAT_VERSION,
        "num_images": num_images,
        "seed": seed,
        "image_sizes": [list(s) for s in sizes],
        "max_shapes": max_shapes,
        "class_weights": [round(float(w), 8) for w in weights],
    }


def _reuse(root: Path, settings: dict) -> ShapesDataset | None:
    """Return the existing dataset under root when it is complete and made with ``settings``."""
    try:
        manifest = json.loads((root / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("settings") != settings:
        return None
    image_root = root / _IMAGES
    files = manifest.get("files", [])
    if len(files) != settings["num_images"] or not (root / _ANNOTATIONS).is_file():
        return None
    if not all((image_root / f).is_file() for f in files):
        return None
    return ShapesDataset(
        root=root,
        json_file=root / _ANNOTATIONS,
        image_root=image_root,
        num_images=settings["num_images"],
        num_annotations=int(manifest["num_annotations"]),
        generated=False,
    )


class OutputExistsError(FileExistsError):
    """The output directory holds files this tool did not generate; pass overwrite=True."""


def _refuse_foreign_files(root: Path) -> None:
    """Raise when ``root`` holds an annotation file or images that no earlier run of this tool
    wrote (no manifest): those are the user's files."""
    if (root / _MANIFEST).is_file():
        return  # our own output with other settings: regenerated in place
    images = root / _IMAGES
    found = [p for p in (root / _ANNOTATIONS, images) if p.exists()]
    if images.is_dir() and not any(images.iterdir()):
        found.remove(images)
    if found:
        raise OutputExistsError(
            f"{found[0]} exists and was not generated by this tool; choose another --out "
            "directory or pass --overwrite (overwrite=True) to replace it"
        )


def generate_shapes_dataset(
    root: str | os.PathLike,
    *,
    num_images: int = 300,
    seed: int = 0,
    image_sizes: Sequence[tuple[int, int]] = DEFAULT_IMAGE_SIZES,
    max_shapes: int = 5,
    class_weights: Sequence[float] | None = None,
    jpeg_quality: int = 90,
    overwrite: bool = False,
    progress: bool = False,
) -> ShapesDataset:
    """Generate (or reuse) a COCO-format dataset of shapes under ``root``.

    Writes ``root/images/000000.jpg ...``, ``root/annotations.json`` (COCO instances: images,
    annotations with exact ``bbox`` [x, y, w, h], ``segmentation`` polygon, ``area``, and
    categories with ids :data:`SHAPE_CATEGORY_IDS`) and ``root/manifest.json``. When the
    manifest shows a complete dataset made with the same settings, nothing is written again.

    Args:
        root: output directory (created when missing).
        num_images: number of images, at least 1.
        seed: generation seed; the same seed and settings give the same files.
        image_sizes: candidate (width, height) sizes, each at least 32 pixels.
        max_shapes: most shapes per image (each image gets 1..max_shapes).
        class_weights: probability of each class in :data:`SHAPE_CLASSES` (normalised);
            default :data:`SHAPE_WEIGHTS`.
        jpeg_quality: JPEG quality 1..95.
        overwrite: regenerate even when a matching dataset exists, and replace an
            ``annotations.json`` / ``images/`` in ``root`` that this tool did not write
            (without it such files are left alone and :class:`OutputExistsError` is raised).
        progress: show a tqdm progress bar while writing images.

    Returns:
        A :class:`ShapesDataset` describing the files.

    Raises:
        ValueError: a setting is out of range.
        OutputExistsError: ``root`` holds files this tool did not write and ``overwrite`` is
            False.

    Example:
        >>> ds = generate_shapes_dataset("/tmp/shapes_doc", num_images=4)  # doctest: +SKIP
        >>> ds.num_images                                                 # doctest: +SKIP
        4
    """
    if not isinstance(num_images, int) or num_images < 1:
        raise ValueError(f"num_images must be a positive int, got {num_images!r}")
    if not isinstance(max_shapes, int) or max_shapes < 1:
        raise ValueError(f"max_shapes must be a positive int, got {max_shapes!r}")
    if not 1 <= jpeg_quality <= 95:
        raise ValueError(f"jpeg_quality must be within 1..95, got {jpeg_quality}")
    sizes = [tuple(int(v) for v in s) for s in image_sizes]
    if not sizes or any(len(s) != 2 or min(s) < 32 for s in sizes):
        raise ValueError(f"image_sizes must be (width, height) pairs of at least 32, got {image_sizes!r}")
    weights = np.asarray(SHAPE_WEIGHTS if class_weights is None else class_weights, dtype=np.float64)
    if weights.shape != (len(SHAPE_CLASSES),) or (weights < 0).any() or weights.sum() <= 0:
        raise ValueError(
            f"class_weights must be {len(SHAPE_CLASSES)} non-negative numbers with a positive sum "
            f"(one per class {SHAPE_CLASSES}), got {class_weights!r}"
        )
    weights = weights / weights.sum()

    root = Path(root).expanduser().resolve()
    settings = _settings(num_images, seed, sizes, max_shapes, weights)
    if not overwrite:
        existing = _reuse(root, settings)
        if existing is not None:
            logger.info("reusing shapes dataset in %s (%d images)", root, existing.num_images)
            return existing
        _refuse_foreign_files(root)

    image_root = root / _IMAGES
    image_root.mkdir(parents=True, exist_ok=True)
    (root / _MANIFEST).unlink(missing_ok=True)  # an interrupted run is never mistaken for done

    import io

    indices = range(num_images)
    if progress:
        try:
            from tqdm import tqdm

            indices = tqdm(indices, desc="generating shapes", unit="img", leave=False)
        except ImportError:
            logger.debug("tqdm is not installed: generating without a progress bar")
    images, annotations, files = [], [], []
    for index in indices:
        image, shapes = render_image(index, seed, sizes, max_shapes, weights)
        file_name = f"{index:06d}.jpg"
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=jpeg_quality)
        _write_atomic(image_root / file_name, buffer.getvalue())
        files.append(file_name)
        image_id = index + 1
        images.append({"id": image_id, "file_name": file_name, "width": image.width, "height": image.height})
        for cls, polygon in shapes:
            x0, y0 = polygon.min(axis=0)
            x1, y1 = polygon.max(axis=0)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": SHAPE_CATEGORY_IDS[cls],
                    "bbox": [round(float(x0), 2), round(float(y0), 2),
                             round(float(x1 - x0), 2), round(float(y1 - y0), 2)],
                    "area": round(polygon_area(polygon), 2),
                    "segmentation": [polygon.reshape(-1).tolist()],
                    "iscrowd": 0,
                }
            )  # fmt: skip
    coco = {
        "info": {"description": "catmap synthetic shapes", "version": str(_FORMAT_VERSION)},
        "images": images,
        "annotations": annotations,
        "categories": [
            {"id": cid, "name": name, "supercategory": "shape"}
            for cid, name in zip(SHAPE_CATEGORY_IDS, SHAPE_CLASSES, strict=True)
        ],
    }
    _write_atomic(root / _ANNOTATIONS, json.dumps(coco).encode())
    manifest = {"settings": settings, "files": files, "num_annotations": len(annotations)}
    _write_atomic(root / _MANIFEST, json.dumps(manifest).encode())
    logger.info("wrote %d images and %d annotations to %s", num_images, len(annotations), root)
    return ShapesDataset(
        root=root,
        json_file=root / _ANNOTATIONS,
        image_root=image_root,
        num_images=num_images,
        num_annotations=len(annotations),
        generated=True,
    )


def register_shapes_dataset(name: str, dataset: ShapesDataset) -> str:
    """Register a generated shapes dataset in the catalog as COCO instances under ``name``.

    Registering the same name twice in one process is a no-op when it points at the same
    annotation file (so tools can call this freely); a different file under a taken name is an
    error from the catalog.

    Returns:
        ``name``.

    Example:
        >>> ds = generate_shapes_dataset("/tmp/shapes_doc", num_images=4)   # doctest: +SKIP
        >>> register_shapes_dataset("shapes_doc", ds)                        # doctest: +SKIP
        'shapes_doc'
    """
    from catalog import DatasetCatalog, MetadataCatalog, register_coco_instances

    if name in DatasetCatalog:
        known = MetadataCatalog.get(name).get("json_file")
        if known is not None and Path(known).resolve() == dataset.json_file.resolve():
            return name
    register_coco_instances(name, {}, str(dataset.json_file), str(dataset.image_root))
    return name


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: generate a shapes dataset and print where it is."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: the demo cache dir)")
    parser.add_argument("--num-images", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-shapes", type=int, default=5)
    parser.add_argument("--overwrite", action="store_true", help="regenerate even if it exists; replace files in --out that this tool did not write")
    args = parser.parse_args(argv)
    try:
        ds = generate_shapes_dataset(
            args.out or default_demo_dir() / "shapes",
            num_images=args.num_images,
            seed=args.seed,
            max_shapes=args.max_shapes,
            overwrite=args.overwrite,
            progress=True,
        )
    except (ValueError, OutputExistsError) as exc:
        parser.error(str(exc))
    state = "generated" if ds.generated else "reused"
    print(f"{state} {ds.num_images} images, {ds.num_annotations} shapes")
    print(f"annotations: {ds.json_file}")
    print(f"images:      {ds.image_root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
