"""Draw detection annotations with Pillow: boxes, polygons, class names, and grids of samples.

Works on the two things a catmap user looks at: raw records (detectron2 record dicts, boxes in
any absolute :class:`~catalog.BoxMode`) and mapped samples (the dicts a ``DatasetMapper``
returns, with a CHW ``image`` tensor and ``instances``).

Example:
    >>> import numpy as np
    >>> from tools.draw import draw_instances, make_grid
    >>> img = draw_instances(np.zeros((64, 64, 3), np.uint8), boxes=[[4, 4, 40, 30]],
    ...                      classes=[0], class_names=["circle"])
    >>> make_grid([img, img], columns=2, tile_size=(64, 64)).size[0] >= 128
    True
"""

from __future__ import annotations

import colorsys
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from catalog.box_mode import BoxMode

__all__ = [
    "class_colors",
    "draw_instances",
    "draw_record",
    "draw_sample",
    "load_font",
    "make_grid",
    "sample_to_arrays",
]

_FILL_ALPHA = 80


def class_colors(num_classes: int) -> list[tuple[int, int, int]]:
    """Return ``num_classes`` well-separated, saturated RGB colours (golden-ratio hues).

    Example:
        >>> len(class_colors(3)), class_colors(3)[0] != class_colors(3)[1]
        (3, True)
    """
    colors = []
    for i in range(max(int(num_classes), 0)):
        hue = (0.03 + i * 0.618033988749895) % 1.0
        value = 0.95 if i % 2 == 0 else 0.8
        r, g, b = colorsys.hsv_to_rgb(hue, 0.85, value)
        colors.append((int(r * 255), int(g * 255), int(b * 255)))
    return colors


@lru_cache(maxsize=8)
def load_font(size: int = 12):
    """Return a scalable font of ``size`` pixels (Pillow's bundled font; DejaVu when present).

    Example:
        >>> load_font(12) is load_font(12)
        True
    """
    from PIL import ImageFont

    for name in ("DejaVuSans-Bold.ttf", "DejaVuSans.ttf"):
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has only the fixed bitmap font
        return ImageFont.load_default()


def _to_pil(image: Any):
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    array = np.asarray(image)
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    return Image.fromarray(array).convert("RGB")


def _text_color(background: tuple[int, int, int]) -> tuple[int, int, int]:
    luminance = 0.299 * background[0] + 0.587 * background[1] + 0.114 * background[2]
    return (0, 0, 0) if luminance > 150 else (255, 255, 255)


def draw_instances(
    image: Any,
    *,
    boxes: Any = None,
    classes: Sequence[int] | np.ndarray | None = None,
    polygons: Sequence[Sequence[Any]] | None = None,
    class_names: Sequence[str] | None = None,
    colors: Sequence[tuple[int, int, int]] | None = None,
    line_width: int = 2,
    font_size: int = 12,
    fit: tuple[int, int] | None = None,
):
    """Draw boxes, filled polygon outlines and class labels on an image.

    Args:
        image: HWC uint8 array (RGB) or a PIL image; not modified.
        boxes: (N, 4) boxes in XYXY_ABS pixels (list, numpy array or tensor), or None.
        classes: N contiguous class ids, or None (labels are then omitted).
        polygons: per instance, a list of polygons (flat [x0, y0, x1, y1, ...] lists or
            (K, 2) arrays), or None.
        class_names: names indexed by class id; unknown ids are drawn as ``#id``.
        colors: colour per class id; default :func:`class_colors`.
        line_width: box outline width in pixels.
        font_size: label font size in pixels.
        fit: (width, height): scale the image (and the annotations with it) to fit this box
            first, so that labels keep their size whatever the image size (e.g. grid tiles).

    Returns:
        A new RGB PIL image.

    Raises:
        ValueError: boxes, classes and polygons disagree in length, or boxes are not (N, 4).

    Example:
        >>> out = draw_instances(np.zeros((32, 32, 3), np.uint8), boxes=[[2, 2, 20, 20]], classes=[0])
        >>> out.size
        (32, 32)
    """
    from PIL import Image, ImageDraw

    base = _to_pil(image)
    box_array = np.zeros((0, 4), dtype=np.float64) if boxes is None else _as_numpy(boxes).astype(np.float64)
    if box_array.ndim != 2 or box_array.shape[1] != 4:
        if box_array.size == 0:
            box_array = box_array.reshape(0, 4)
        else:
            raise ValueError(f"boxes must have shape (N, 4), got {box_array.shape}")
    class_array = None if classes is None else _as_numpy(classes).astype(np.int64).reshape(-1)
    counts = {"boxes": len(box_array)} if boxes is not None else {}
    if class_array is not None:
        counts["classes"] = len(class_array)
    if polygons is not None:
        counts["polygons"] = len(polygons)
    if len(set(counts.values())) > 1:
        raise ValueError(f"instance fields disagree in length: {counts}")
    num = max(counts.values(), default=0)
    if fit is not None:
        scale = min(fit[0] / base.width, fit[1] / base.height)
        size = (max(1, round(base.width * scale)), max(1, round(base.height * scale)))
        scale_xy = np.array([size[0] / base.width, size[1] / base.height])
        base = base.resize(size, Image.BILINEAR)
        box_array = box_array * np.tile(scale_xy, 2)
        if polygons is not None:
            polygons = [
                [np.asarray(p, dtype=np.float64).reshape(-1, 2) * scale_xy for p in instance]
                for instance in polygons
            ]
    num_classes = max(len(class_names or ()), int(class_array.max()) + 1 if class_array is not None and num else 0)
    palette = list(colors) if colors is not None else class_colors(max(num_classes, 1))

    def color_of(i: int) -> tuple[int, int, int]:
        if class_array is None:
            return palette[i % len(palette)]
        return tuple(palette[int(class_array[i]) % len(palette)])

    overlay = Image.new("RGBA", base.size, (0, 0, 0, 0))
    overlay_draw = ImageDraw.Draw(overlay)
    if polygons is not None:
        for i, instance_polygons in enumerate(polygons):
            for polygon in instance_polygons:
                points = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
                if len(points) < 3:
                    continue  # degenerate polygon: nothing to fill
                xy = [tuple(p) for p in points.tolist()]
                overlay_draw.polygon(xy, fill=color_of(i) + (_FILL_ALPHA,), outline=color_of(i) + (255,))
    out = Image.alpha_composite(base.convert("RGBA"), overlay).convert("RGB")
    draw = ImageDraw.Draw(out)
    font = load_font(font_size)
    for i in range(len(box_array)):
        x0, y0, x1, y1 = box_array[i].tolist()
        draw.rectangle([x0, y0, x1, y1], outline=color_of(i), width=line_width)
    for i in range(num if class_array is not None else 0):
        cls = int(class_array[i])
        name = class_names[cls] if class_names is not None and 0 <= cls < len(class_names) else f"#{cls}"
        if len(box_array):
            anchor_x, anchor_y = box_array[i, 0], box_array[i, 1]
        elif polygons is not None and polygons[i]:
            pts = np.asarray(polygons[i][0], dtype=np.float64).reshape(-1, 2)
            anchor_x, anchor_y = pts[:, 0].min(), pts[:, 1].min()
        else:
            continue
        left, top, right, bottom = draw.textbbox((0, 0), name, font=font)
        tw, th = right - left + 4, bottom - top + 2
        tx = float(np.clip(anchor_x, 0, max(out.width - tw, 0)))
        ty = float(anchor_y - th if anchor_y - th >= 0 else anchor_y)
        draw.rectangle([tx, ty, tx + tw, ty + th], fill=color_of(i))
        draw.text((tx + 2 - left, ty + 1 - top), name, fill=_text_color(color_of(i)), font=font)
    return out


def _as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "tensor"):  # a Boxes-like wrapper
        value = value.tensor
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def draw_record(
    record: dict,
    *,
    class_names: Sequence[str] | None = None,
    image: Any = None,
    colors: Sequence[tuple[int, int, int]] | None = None,
    fit: tuple[int, int] | None = None,
):
    """Draw a raw detectron2 record: its image with every annotation's box, polygons and class.

    Args:
        record: a record dict (``file_name``, ``annotations`` with ``bbox``, ``bbox_mode``,
            ``category_id``, optional polygon ``segmentation``).
        class_names: names indexed by contiguous category id (e.g. metadata ``thing_classes``).
        image: the image (HWC RGB array or PIL image); read from ``file_name`` when None.
        colors: colour per class id.
        fit: scale to fit this (width, height) first (see :func:`draw_instances`).

    Returns:
        A new RGB PIL image.

    Raises:
        FileNotFoundError: the image file does not exist.
        ValueError: an annotation's box is malformed (message names the file and index).

    Example:
        >>> rec = {"file_name": "x.jpg", "annotations": [
        ...     {"bbox": [1, 1, 8, 8], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 0}]}
        >>> draw_record(rec, image=np.zeros((16, 16, 3), np.uint8)).size
        (16, 16)
    """
    from PIL import Image

    if image is None:
        file_name = record.get("file_name")
        if not file_name:
            raise ValueError(f"record has no file_name and no image was given (keys: {sorted(record)})")
        with Image.open(file_name) as handle:
            image = handle.convert("RGB")
    boxes, classes, polygons = [], [], []
    for index, anno in enumerate(record.get("annotations", [])):
        try:
            mode = BoxMode(anno.get("bbox_mode", BoxMode.XYWH_ABS))
            box = BoxMode.convert(list(anno["bbox"]), mode, BoxMode.XYXY_ABS)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"cannot draw annotation {index} of {record.get('file_name')!r}: {exc}"
            ) from exc
        boxes.append([float(v) for v in box])
        classes.append(int(anno.get("category_id", -1)))
        segmentation = anno.get("segmentation")
        polygons.append(list(segmentation) if isinstance(segmentation, list) else [])
    return draw_instances(
        image,
        boxes=np.asarray(boxes, dtype=np.float64).reshape(-1, 4),
        classes=classes,
        polygons=polygons,
        class_names=class_names,
        colors=colors,
        fit=fit,
    )


def sample_to_arrays(sample: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, list | None]:
    """Unpack a mapped sample into (HWC uint8 image, XYXY boxes, classes, polygons or None).

    Accepts the dict a ``DatasetMapper`` returns: ``image`` as a CHW tensor or array, and
    optional ``instances`` with ``gt_boxes``, ``gt_classes`` and polygon ``gt_masks``.

    Raises:
        KeyError: the sample has no ``image``.
    """
    if "image" not in sample:
        raise KeyError(f"sample has no 'image' (keys: {sorted(sample)})")
    chw = _as_numpy(sample["image"])
    image = np.ascontiguousarray(chw.transpose(1, 2, 0)) if chw.ndim == 3 else chw
    boxes = np.zeros((0, 4), dtype=np.float64)
    classes = np.zeros((0,), dtype=np.int64)
    polygons = None
    instances = sample.get("instances")
    if instances is not None:
        if _has_field(instances, "gt_boxes"):
            boxes = _as_numpy(_get_field(instances, "gt_boxes")).reshape(-1, 4)
        if _has_field(instances, "gt_classes"):
            classes = _as_numpy(_get_field(instances, "gt_classes")).reshape(-1)
        if _has_field(instances, "gt_masks"):
            masks = _get_field(instances, "gt_masks")
            masks = getattr(masks, "polygons", masks)
            if isinstance(masks, list):  # polygon format; bitmasks are not outlined
                polygons = [list(instance) for instance in masks]
    return image, boxes, classes, polygons


def _has_field(instances: Any, name: str) -> bool:
    if hasattr(instances, "has"):
        return bool(instances.has(name))
    return isinstance(instances, dict) and name in instances


def _get_field(instances: Any, name: str) -> Any:
    if isinstance(instances, dict):
        return instances[name]
    return getattr(instances, name)


def draw_sample(
    sample: dict,
    *,
    class_names: Sequence[str] | None = None,
    colors: Sequence[tuple[int, int, int]] | None = None,
    fit: tuple[int, int] | None = None,
):
    """Draw a mapped sample (``DatasetMapper`` output) with its instances.

    ``fit`` scales to fit a (width, height) box first (see :func:`draw_instances`).

    Example:
        >>> import torch
        >>> draw_sample({"image": torch.zeros(3, 8, 8, dtype=torch.uint8)}).size
        (8, 8)
    """
    image, boxes, classes, polygons = sample_to_arrays(sample)
    return draw_instances(
        image,
        boxes=boxes,
        classes=classes,
        polygons=polygons,
        class_names=class_names,
        colors=colors,
        fit=fit,
    )


def make_grid(
    images: Sequence[Any],
    *,
    columns: int = 4,
    tile_size: tuple[int, int] = (320, 320),
    captions: Sequence[str] | None = None,
    title: str | None = None,
    padding: int = 6,
    background: tuple[int, int, int] = (245, 245, 245),
):
    """Arrange images in a grid, each scaled to fit a tile (aspect kept), with optional captions.

    Pictures are centred horizontally and bottom-aligned in their tiles.

    Args:
        images: PIL images or HWC arrays.
        columns: tiles per row (at least 1).
        tile_size: (width, height) of each tile.
        captions: one caption per image, drawn under it.
        title: a line of text above the grid.
        padding: pixels between tiles.
        background: grid background colour.

    Returns:
        An RGB PIL image.

    Raises:
        ValueError: no images, columns < 1, or a caption count that does not match.

    Example:
        >>> make_grid([np.zeros((10, 20, 3), np.uint8)], columns=1, tile_size=(40, 40)).size
        (52, 52)
    """
    from PIL import Image, ImageDraw

    if not images:
        raise ValueError("make_grid needs at least one image")
    if columns < 1:
        raise ValueError(f"columns must be at least 1, got {columns}")
    if captions is not None and len(captions) != len(images):
        raise ValueError(f"got {len(captions)} captions for {len(images)} images")
    tile_w, tile_h = tile_size
    font = load_font(13)
    caption_h = 18 if captions is not None else 0
    title_h = 26 if title else 0
    columns = min(columns, len(images))
    rows = (len(images) + columns - 1) // columns
    width = columns * tile_w + (columns + 1) * padding
    height = title_h + rows * (tile_h + caption_h) + (rows + 1) * padding
    grid = Image.new("RGB", (width, height), background)
    draw = ImageDraw.Draw(grid)
    if title:
        draw.text((padding, padding), title, fill=(30, 30, 30), font=load_font(16))
    for k, image in enumerate(images):
        tile = _to_pil(image)
        scale = min(tile_w / tile.width, tile_h / tile.height)
        size = (max(1, round(tile.width * scale)), max(1, round(tile.height * scale)))
        tile = tile.resize(size, Image.BILINEAR)
        row, col = divmod(k, columns)
        x = padding + col * (tile_w + padding) + (tile_w - size[0]) // 2
        # bottom-aligned, so that the caption sits right under the picture
        y = title_h + padding + row * (tile_h + caption_h + padding) + (tile_h - size[1])
        grid.paste(tile, (x, y))
        if captions is not None:
            cy = title_h + padding + row * (tile_h + caption_h + padding) + tile_h + 2
            cx = padding + col * (tile_w + padding)
            draw.text((cx, cy), str(captions[k]), fill=(40, 40, 40), font=font)
    return grid
