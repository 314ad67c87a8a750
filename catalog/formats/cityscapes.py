"""Cityscapes (fine annotations): instance records from the per-image polygon json files or
the ``*_instanceIds.png`` images, and semantic records pointing at ``*_labelTrainIds.png``.
Every path comes from listing ``image_dir`` (the json files name no file), so none can leave the
data root and there is no ``allow_outside_root`` to give.
"""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple

import numpy as np

from ..box_mode import BoxMode
from .._common import missing_dependency
from .files import parse_json, read_bytes
from .validate import CityscapesFormatError, short_repr

class CityscapesLabel(NamedTuple):
    """One row of the Cityscapes label table."""

    name: str
    id: int
    train_id: int
    has_instances: bool
    ignore_in_eval: bool


#: Every label as (name, id, train id), in id order; train id 255 is ignored in evaluation,
#: ids 24..33 have instances, and ``license plate`` (id -1) is never drawn.
LABELS: tuple[CityscapesLabel, ...] = tuple(
    CityscapesLabel(name, id_, train_id, 24 <= id_ <= 33, train_id == 255)
    for name, id_, train_id in (
        ("unlabeled", 0, 255), ("ego vehicle", 1, 255), ("rectification border", 2, 255),
        ("out of roi", 3, 255), ("static", 4, 255), ("dynamic", 5, 255), ("ground", 6, 255),
        ("road", 7, 0), ("sidewalk", 8, 1), ("parking", 9, 255), ("rail track", 10, 255),
        ("building", 11, 2), ("wall", 12, 3), ("fence", 13, 4), ("guard rail", 14, 255),
        ("bridge", 15, 255), ("tunnel", 16, 255), ("pole", 17, 5), ("polegroup", 18, 255),
        ("traffic light", 19, 6), ("traffic sign", 20, 7), ("vegetation", 21, 8),
        ("terrain", 22, 9), ("sky", 23, 10), ("person", 24, 11), ("rider", 25, 12),
        ("car", 26, 13), ("truck", 27, 14), ("bus", 28, 15), ("caravan", 29, 255),
        ("trailer", 30, 255), ("train", 31, 16), ("motorcycle", 32, 17), ("bicycle", 33, 18),
        ("license plate", -1, 255))
)

NAME_TO_LABEL = {label.name: label for label in LABELS}
ID_TO_LABEL = {label.id: label for label in LABELS}
#: The 8 instance classes (contiguous ids 0..7), as detectron2's ``thing_classes``.
THING_CLASSES = [lb.name for lb in LABELS if lb.has_instances and not lb.ignore_in_eval]
#: The 19 train-id classes in train-id order, as detectron2's ``stuff_classes``.
STUFF_CLASSES = [lb.name for lb in sorted(LABELS, key=lambda lb: lb.train_id) if lb.train_id != 255]
#: Cityscapes label id -> contiguous thing id.
THING_ID_TO_CONTIGUOUS = {
    lb.id: i
    for i, lb in enumerate(lb for lb in LABELS if lb.has_instances and not lb.ignore_in_eval)
}

logger = logging.getLogger(__name__)

#: Largest ``*_gtFine_polygons.json`` read (Cityscapes' own are below 1 MiB).
MAX_JSON_BYTES = 16 * 1024 * 1024
#: Largest image (height * width) rasterized or read (Cityscapes' are 2048 x 1024).
MAX_PIXELS = 1 << 25
#: Most pixels one file may make the loader rasterize or compare (the objects' clipped boxes,
#: instances three times); Cityscapes' own need under a tenth of it.
MAX_RASTER_WORK = 1 << 28
#: Largest absolute polygon coordinate accepted.
_MAX_COORD = 1 << 20
_IMAGE_SUFFIX = "leftImg8bit.png"


def _files(image_dir: str, gt_dir: str) -> list[tuple[str, str, str, str]]:
    """``(image, instanceIds png, labelIds png, polygons json)`` for every image, sorted."""
    if not os.path.isdir(image_dir):
        raise FileNotFoundError(f"Cityscapes image_dir {image_dir!r} is not a directory")
    files, skipped = [], 0
    for city in sorted(os.listdir(image_dir)):
        city_dir = os.path.join(image_dir, city)
        if not os.path.isdir(city_dir):
            continue
        for name in sorted(os.listdir(city_dir)):
            if not name.endswith(_IMAGE_SUFFIX):
                skipped += 1
                continue
            base = os.path.join(gt_dir, city, name[: -len(_IMAGE_SUFFIX)])
            files.append((os.path.join(city_dir, name), base + "gtFine_instanceIds.png",
                          base + "gtFine_labelIds.png", base + "gtFine_polygons.json"))
    if skipped:
        logger.warning("%s: skipped %d files not ending with %r", image_dir, skipped, _IMAGE_SUFFIX)
    if not files:
        raise CityscapesFormatError(
            f"no '<city>/*{_IMAGE_SUFFIX}' images found in {image_dir!r}", path=image_dir)
    return files


def _read_json(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        raise CityscapesFormatError(f"Cityscapes annotation {path!r} does not exist", path=path)
    data = parse_json(read_bytes(path, limit=MAX_JSON_BYTES, what="Cityscapes json"), path)
    if type(data) is not dict:
        raise CityscapesFormatError(f"{path}: the top level must be a dict", path=path)
    for key in ("imgHeight", "imgWidth"):
        value = data.get(key)
        if type(value) is not int or not 1 <= value <= MAX_PIXELS:
            raise CityscapesFormatError(f"{path}: key {key!r} must be a positive int, got "
                                        f"{short_repr(value)}", path=path, key=key)
    if data["imgHeight"] * data["imgWidth"] > MAX_PIXELS:
        raise CityscapesFormatError(
            f"{path}: image of {data['imgHeight']} x {data['imgWidth']} pixels is larger than "
            f"the limit ({MAX_PIXELS} pixels)", path=path, key="imgHeight")
    return data


def _objects(data: dict[str, Any], path: str) -> list[tuple[CityscapesLabel, bool, np.ndarray]]:
    """``(label, crowd, polygon (N, 2))`` of every drawn object, in file order."""
    objects = data.get("objects")
    if type(objects) is not list:
        raise CityscapesFormatError(f"{path}: key 'objects' must be a list", path=path,
                                    key="objects")
    out, short = [], 0
    for index, obj in enumerate(objects):
        def fail(key: str, problem: str, index: int = index) -> CityscapesFormatError:
            return CityscapesFormatError(f"{path}: objects[{index}] key {key!r} {problem}",
                                         path=path, index=index, key=key)

        if type(obj) is not dict:
            raise fail("objects", "must hold dicts")
        if "deleted" in obj:
            continue
        name = obj.get("label")
        if type(name) is not str:
            raise fail("label", f"must be a str, got {short_repr(name)}")
        crowd = name not in NAME_TO_LABEL and name.endswith("group")
        label = NAME_TO_LABEL.get(name[: -len("group")] if crowd else name)
        if label is None:
            raise fail("label", f"{short_repr(name)} is not a Cityscapes label")
        if label.id < 0:
            continue
        polygon = obj.get("polygon")
        if type(polygon) is not list or not all(
            type(p) is list and len(p) == 2 and all(type(v) in (int, float) for v in p)
            for p in polygon
        ):
            raise fail("polygon", "must be a list of [x, y] number pairs")
        try:
            points = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
        except OverflowError:  # an int beyond the float range
            points = np.full((1, 2), np.inf)
        if not (np.isfinite(points).all() and (np.abs(points) <= _MAX_COORD).all()):
            raise fail("polygon", f"holds a coordinate that is not finite or beyond {_MAX_COORD}")
        if len(points) < 3:
            short += 1
            continue
        out.append((label, crowd, points))
    if short:
        logger.warning("%s: skipped %d objects whose polygon has fewer than 3 points", path, short)
    return out


def _contours(mask: np.ndarray, x0: int, y0: int) -> list[list[float]]:
    try:
        import cv2
    except ImportError:
        raise missing_dependency("opencv-python-headless", "opencv",
                                 "Cityscapes instances as polygons") from None
    found = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    return [(c.reshape(-1, 2).astype(np.float64) + (x0 + 0.5, y0 + 0.5)).reshape(-1).tolist()
            for c in found[-2] if len(c) >= 3]


def _rle(mask: np.ndarray, x0: int, y0: int, height: int, width: int) -> dict[str, Any]:
    try:
        from pycocotools import mask as mask_util
    except ImportError:
        raise missing_dependency("pycocotools", "coco", "Cityscapes instances as RLE") from None
    # The runs of the whole image in column-major order, from the crop alone (no image-sized
    # array per instance). A zero row under the crop ends every run in its column; pixel
    # (row r, column c) of the padded crop is pixel (x0 + c) * height + y0 + r of the image.
    h = mask.shape[0]
    flat = np.zeros(mask.shape[1] * (h + 1) + 1, bool)
    flat[1:].reshape(mask.shape[1], h + 1)[:, :h] = mask.T
    starts = np.flatnonzero(flat[1:] > flat[:-1])
    ends = np.flatnonzero(flat[1:] < flat[:-1])
    starts = (starts // (h + 1) + x0) * height + starts % (h + 1) + y0
    ends = (ends // (h + 1) + x0) * height + ends % (h + 1) + y0
    joined = np.flatnonzero(starts[1:] == ends[:-1])  # runs that meet across two columns
    starts, ends = np.delete(starts, joined + 1), np.delete(ends, joined)
    gaps = starts - np.r_[0, ends[:-1]]
    counts = np.stack([gaps, ends - starts], 1).reshape(-1).tolist()
    if ends[-1] < height * width:
        counts.append(height * width - int(ends[-1]))
    rle = mask_util.frPyObjects({"size": [height, width], "counts": counts}, height, width)
    return {"size": [height, width], "counts": rle["counts"].decode("ascii")}


def _mask_annotation(mask: np.ndarray, x0: int, y0: int, height: int, width: int,
                     label: CityscapesLabel, crowd: bool, to_polygons: bool) -> dict | None:
    """The annotation of the visible pixels ``mask`` (a crop whose corner is ``x0, y0``)."""
    ys, xs = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    if not len(ys):
        return None
    if to_polygons:
        segmentation: Any = _contours(mask, x0, y0)
        if not segmentation:
            return None
    else:
        segmentation = _rle(mask, x0, y0, height, width)
    bbox = [x0 + xs.min(), y0 + ys.min(), x0 + xs.max() + 1, y0 + ys.max() + 1]
    return _annotation(label, crowd, bbox, segmentation)


def _annotation(label: CityscapesLabel, crowd: bool, bbox: Any, segmentation: Any) -> dict:
    return {"iscrowd": int(crowd), "category_id": THING_ID_TO_CONTIGUOUS[label.id],
            "bbox": [float(v) for v in bbox], "bbox_mode": BoxMode.XYXY_ABS,
            "segmentation": segmentation}


def _pillow() -> Any:
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise missing_dependency("Pillow", "images", "Cityscapes loading") from None
    return Image, ImageDraw


def _is_instance(label: CityscapesLabel) -> bool:
    return label.has_instances and not label.ignore_in_eval


def _check_work(objects: list[tuple[CityscapesLabel, bool, np.ndarray]], height: int,
                width: int, to_polygons: bool, path: str) -> None:
    """Refuse a file whose objects would take more than :data:`MAX_RASTER_WORK` pixels."""
    work = 0
    for label, _, points in objects:
        low, high = np.floor(points.min(0)), np.floor(points.max(0)) + 1
        w = min(high[0], width) - max(low[0], 0)
        h = min(high[1], height) - max(low[1], 0)
        area = int(w * h) if w > 0 and h > 0 else 0
        if _is_instance(label):
            area *= 3
        work += area + 1
        if work > MAX_RASTER_WORK:
            raise CityscapesFormatError(
                f"{path}: its {len(objects)} objects would need more than {MAX_RASTER_WORK} "
                "pixels of rasterization (too many or too large polygons)",
                path=path, key="objects")


def _record_from_json(files: tuple[str, ...], to_polygons: bool) -> dict[str, Any]:
    image_file, _, _, json_file = files
    data = _read_json(json_file)
    height, width = data["imgHeight"], data["imgWidth"]
    objects = _objects(data, json_file)
    _check_work(objects, height, width, to_polygons, json_file)
    Image, ImageDraw = _pillow()
    canvas = Image.new("I", (width, height), 0)
    draw = ImageDraw.Draw(canvas)
    for index, (_, _, points) in enumerate(objects):
        draw.polygon([tuple(p) for p in points.tolist()], fill=index + 1)
    drawn = np.asarray(canvas)
    annotations = []
    for index in range(len(objects) - 1, -1, -1):
        label, crowd, points = objects[index]
        if not _is_instance(label):
            continue
        low, high = np.floor(points.min(0)), np.floor(points.max(0)) + 1
        x0, y0 = int(max(low[0], 0)), int(max(low[1], 0))
        x1, y1 = int(min(high[0], width)), int(min(high[1], height))
        if x1 <= x0 or y1 <= y0:
            continue  # entirely outside the image
        visible = drawn[y0:y1, x0:x1] == index + 1
        alone = Image.new("1", (x1 - x0, y1 - y0), 0)
        ImageDraw.Draw(alone).polygon([(x - x0, y - y0) for x, y in points.tolist()], fill=1)
        covered = int(visible.sum()) != int(np.asarray(alone).sum())
        if covered or not to_polygons:
            annotation = _mask_annotation(visible, x0, y0, height, width, label, crowd, to_polygons)
            if annotation is not None:
                annotations.append(annotation)
            continue
        annotations.append(_annotation(label, crowd, [*low, *high],
                                       [(points + 0.5).reshape(-1).tolist()]))
    return {"file_name": image_file, "image_id": os.path.basename(image_file),
            "height": height, "width": width, "annotations": annotations}


def _record_from_png(files: tuple[str, ...], to_polygons: bool) -> dict[str, Any]:
    image_file, instance_file = files[0], files[1]
    if not os.path.exists(instance_file):
        raise CityscapesFormatError(f"Cityscapes instance image {instance_file!r} does not "
                                    "exist", path=instance_file)
    Image, _ = _pillow()
    try:
        with Image.open(instance_file) as image:
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise CityscapesFormatError(f"{instance_file}: {width} x {height} pixels is "
                                            f"larger than the limit ({MAX_PIXELS})",
                                            path=instance_file)
            ids = np.asarray(image, dtype=np.int64)
    except CityscapesFormatError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise CityscapesFormatError(f"{instance_file}: not a readable image: {exc}",
                                    path=instance_file) from None
    if ids.shape != (height, width):
        raise CityscapesFormatError(f"{instance_file}: not a single-channel id image "
                                    f"(shape {ids.shape})", path=instance_file)
    # One sort groups the pixels of every instance id (not one whole-image pass per id).
    flat = ids.reshape(-1)
    kept = np.flatnonzero(flat >= 24)
    order = kept[np.argsort(flat[kept], kind="stable")]
    groups = np.split(order, np.flatnonzero(np.diff(flat[order])) + 1) if len(order) else []
    annotations, work = [], 0
    for pixels in groups:
        instance_id = int(flat[pixels[0]])
        label = ID_TO_LABEL.get(instance_id // 1000 if instance_id >= 1000 else instance_id)
        if label is None:
            raise CityscapesFormatError(f"{instance_file}: pixel value {instance_id} names no "
                                        "Cityscapes label", path=instance_file, key="label")
        if not _is_instance(label):
            continue
        ys, xs = np.divmod(pixels, width)
        x0, y0 = int(xs.min()), int(ys.min())
        crop = np.zeros((int(ys.max()) - y0 + 1, int(xs.max()) - x0 + 1), bool)
        work += 3 * crop.size
        if work > MAX_RASTER_WORK:
            raise CityscapesFormatError(
                f"{instance_file}: its instances' bounding boxes add up to more than "
                f"{MAX_RASTER_WORK} pixels (too many or too scattered instance ids)",
                path=instance_file, key="label")
        crop[ys - y0, xs - x0] = True
        annotation = _mask_annotation(crop, x0, y0, height, width, label, instance_id < 1000,
                                      to_polygons)
        if annotation is not None:
            annotations.append(annotation)
    return {"file_name": image_file, "image_id": os.path.basename(image_file),
            "height": height, "width": width, "annotations": annotations}


def load_cityscapes_instances(image_dir: str | os.PathLike, gt_dir: str | os.PathLike,
                              from_json: bool = True,
                              to_polygons: bool = True) -> list[dict[str, Any]]:
    """Cityscapes instance-segmentation records (see the module docstring for the rules).

    Example:
        >>> records = load_cityscapes_instances("cityscapes/leftImg8bit/val",
        ...                                     "cityscapes/gtFine/val")  # doctest: +SKIP
        >>> records[0]["annotations"][0]["bbox_mode"]  # doctest: +SKIP
        <BoxMode.XYXY_ABS: 0>
    """
    image_dir, gt_dir = os.fspath(image_dir), os.fspath(gt_dir)
    convert = _record_from_json if from_json else _record_from_png
    records = [convert(files, bool(to_polygons)) for files in _files(image_dir, gt_dir)]
    logger.info("loaded %d Cityscapes images (%d instances) from %s", len(records),
                sum(len(r["annotations"]) for r in records), image_dir)
    return records


def load_cityscapes_semantic(image_dir: str | os.PathLike,
                             gt_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Cityscapes semantic-segmentation records: ``file_name``, ``sem_seg_file_name`` (the
    ``*_gtFine_labelTrainIds.png``, made by cityscapesScripts' ``createTrainIdLabelImgs.py``),
    ``height`` and ``width`` (from the polygon json).
    """
    image_dir, gt_dir = os.fspath(image_dir), os.fspath(gt_dir)
    records = []
    for image_file, _, label_file, json_file in _files(image_dir, gt_dir):
        data = _read_json(json_file)
        records.append({
            "file_name": image_file,
            "sem_seg_file_name": label_file[: -len("labelIds.png")] + "labelTrainIds.png",
            "height": data["imgHeight"], "width": data["imgWidth"]})
    if not os.path.isfile(records[0]["sem_seg_file_name"]):
        raise FileNotFoundError(
            f"{records[0]['sem_seg_file_name']!r} does not exist: make the labelTrainIds "
            "images with cityscapesScripts' createTrainIdLabelImgs.py")
    return records
