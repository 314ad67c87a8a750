"""Checks on annotation values from records, run before native code (pycocotools) sees them.

pycocotools has no bounds checks (huge coordinates overflow, bad RLE runs write past the
mask); each check raises :class:`~catalog._common.RecordFormatError` naming annotation and key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from catalog.box_mode import BoxMode
from catalog._common import RecordFormatError, is_int, missing_dependency

from .errors import SampleBudgetError
from .image_io import ImageLimits, get_image_limits
from .structure_common import is_flat_polygon
from . import transforms as tf

__all__ = [
    "COORDINATE_BOUND_FACTOR",
    "COORDINATE_BOUND_MARGIN",
    "boxes_xyxy",
    "check_keypoints",
    "check_mask_budget",
    "check_polygon",
    "check_rle",
    "coordinate_bound",
    "decode_rle_counts",
    "input_size_of",
    "polygons_as_arrays",
    "polygons_to_bitmask",
    "rle_to_bitmask",
    "where",
]

#: Polygon coordinates may lie up to FACTOR image sides plus MARGIN pixels from 0.
COORDINATE_BOUND_FACTOR, COORDINATE_BOUND_MARGIN = 4, 64
# a compressed count: at most 6 characters of 5 bits (30 bits with the sign), what
# pycocotools parses without int overflow and enough for any run under the pixel limit
_MAX_CHARS_PER_COUNT = 6
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT64_MAX = float(np.finfo(np.float64).max)
_BBOX, _BBOX_MODE = itemgetter("bbox"), itemgetter("bbox_mode")


def coordinate_bound(height: int, width: int) -> float:
    """The largest ``|x|`` or ``|y|`` a polygon drawn on an (h, w) image may have."""
    return float(COORDINATE_BOUND_FACTOR * max(int(height), int(width)) + COORDINATE_BOUND_MARGIN)


def check_polygon(polygon: np.ndarray, where: str, index: int, bound: float | None) -> None:
    """Raise RecordFormatError unless every value of the flat float polygon is finite and
    (when ``bound`` is given) at most ``bound`` in absolute value."""
    if polygon.size == 0:
        return
    if not np.isfinite(polygon).all():
        bad = polygon[~np.isfinite(polygon)][0]
        raise RecordFormatError(
            f"{where}: key 'segmentation', polygon {index} has a non-finite coordinate ({bad})"
        )
    if bound is not None:
        largest = float(np.abs(polygon).max())
        if largest > bound:
            raise RecordFormatError(
                f"{where}: key 'segmentation', polygon {index} has a coordinate of {largest:g}, "
                f"beyond {bound:g} (= {COORDINATE_BOUND_FACTOR} x the image's longer side + "
                f"{COORDINATE_BOUND_MARGIN}); the annotation does not fit the image"
            )


def check_keypoints(keypoints: np.ndarray, where: str) -> None:
    """Raise RecordFormatError when a keypoint value is not finite or beyond float32."""
    if keypoints.size and not np.isfinite(keypoints).all():
        raise RecordFormatError(f"{where}: key 'keypoints' has a non-finite value")
    if keypoints.size and np.abs(keypoints).max() > _FLOAT32_MAX:
        raise RecordFormatError(f"{where}: key 'keypoints' has a value beyond the float32 range")


def _positive_int(value: Any) -> int | None:
    return int(value) if is_int(value) and value > 0 else None


def decode_rle_counts(counts: bytes, where: str) -> np.ndarray:
    """The run lengths of a COCO compressed RLE string (int64), decoded with numpy.

    Each run is little-endian 5-bit groups in ``chr(48 + g)`` (0x20: continuation, 0x10 of the
    last group: sign); from the third run on a value is a difference to the run two before.
    """
    raw = np.frombuffer(counts, dtype=np.uint8).astype(np.int64) - 48
    if raw.size == 0:
        return raw
    if raw.min() < 0 or raw.max() > 63:
        raise RecordFormatError(
            f"{where}: key 'segmentation' RLE counts has a character outside the COCO alphabet"
        )
    ends = np.flatnonzero((raw & 0x20) == 0)
    if ends.size == 0 or ends[-1] != raw.size - 1:
        raise RecordFormatError(f"{where}: key 'segmentation' RLE counts ends inside a run")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > _MAX_CHARS_PER_COUNT:
        raise RecordFormatError(
            f"{where}: key 'segmentation' RLE counts has a run too long to be valid"
        )
    position = np.arange(raw.size) - np.repeat(starts, lengths)
    values = np.zeros(ends.size, dtype=np.int64)
    groups = np.repeat(np.arange(ends.size), lengths)
    # at most 30 bits per value: exact in float64
    values[:] = np.bincount(groups, weights=(raw & 0x1F) << (5 * position), minlength=ends.size)
    negative = (raw[ends] & 0x10) != 0
    values[negative] -= np.int64(1) << (5 * lengths[negative])
    # x[i] += x[i - 2] for i > 2: running sums over the odd and the even positions from 1 and 2
    if values.size > 3:
        values[1::2] = np.cumsum(values[1::2])
        values[2::2] = np.cumsum(values[2::2])
    return values


def check_rle(
    rle: Mapping[str, Any], where: str, image_size: tuple[int, int] | None
) -> tuple[int, int, Any]:
    """Validate a COCO RLE dict before pycocotools decodes it; return (height, width,
    counts), counts as a list of ints or compressed bytes. Errors name the annotation.
    """
    if "size" not in rle or "counts" not in rle:
        raise RecordFormatError(
            f"{where}: RLE segmentation needs keys 'size' and 'counts', got {sorted(map(str, rle))}"
        )
    size = rle["size"]
    sides = list(size) if isinstance(size, (list, tuple)) and len(size) == 2 else []
    height, width = (_positive_int(v) for v in sides) if sides else (None, None)
    if height is None or width is None:
        raise RecordFormatError(
            f"{where}: key 'segmentation' RLE 'size' must be [height, width] with positive "
            f"ints, got {size!r}"
        )
    if image_size is not None and (height, width) != tuple(image_size):
        raise RecordFormatError(
            f"{where}: key 'segmentation' RLE has size {[height, width]}, the image is "
            f"{list(image_size)}"
        )
    limit = get_image_limits().max_pixels
    if limit is not None and height * width > limit:
        raise RecordFormatError(
            f"{where}: key 'segmentation' RLE size {[height, width]} is over the pixel limit "
            f"{limit}"
        )
    counts = rle["counts"]
    total = height * width
    if isinstance(counts, str):
        try:
            counts = counts.encode("ascii")
        except UnicodeEncodeError:
            raise RecordFormatError(
                f"{where}: key 'segmentation' RLE counts has non-ASCII characters"
            ) from None
    if isinstance(counts, (bytes, bytearray)):
        if len(counts) > _MAX_CHARS_PER_COUNT * (total + 1):
            raise RecordFormatError(f"{where}: key 'segmentation' RLE counts is too long")
        counts = bytes(counts)
        runs = decode_rle_counts(counts, where).tolist()
    elif isinstance(counts, (list, tuple)):
        if len(counts) > total + 1 or not all(is_int(c) for c in counts):
            raise RecordFormatError(
                f"{where}: key 'segmentation' RLE counts must be a list of at most h*w+1 ints"
            )
        counts = [int(c) for c in counts]
        runs = counts
    else:
        raise RecordFormatError(
            f"{where}: key 'segmentation' RLE counts must be a list of ints or a compressed "
            f"string, got {type(counts).__name__}"
        )
    if len(runs) and (min(runs) < 0 or sum(runs) != total):
        raise RecordFormatError(
            f"{where}: key 'segmentation' RLE counts must be non-negative and add up to "
            f"height * width = {total}"
        )
    if not len(runs) and total:
        raise RecordFormatError(f"{where}: key 'segmentation' RLE counts is empty")
    return height, width, counts


def input_size_of(transforms: tf.Transform, output_size: tuple[int, int]) -> tuple[int, int] | None:
    """The image size before ``transforms``, traced back from ``output_size`` (None if a
    transform hides it; known: no-ops, flips, resizes, pads, crops recording their input).
    """
    flat: list[tf.Transform] = []
    stack = [transforms]
    while stack:
        t = stack.pop()
        if isinstance(t, tf.TransformList):
            stack.extend(reversed(t.transforms))
        else:
            flat.append(t)
    height, width = int(output_size[0]), int(output_size[1])
    for t in reversed(flat):
        if isinstance(t, (tf.NoOpTransform, tf.HFlipTransform, tf.VFlipTransform)):
            continue
        if isinstance(t, tf.ResizeTransform):
            height, width = int(t.h), int(t.w)
        elif isinstance(t, tf.PadTransform):
            height, width = height - t.y0 - t.y1, width - t.x0 - t.x1
        elif isinstance(t, tf.CropTransform) and t.orig_h is not None and t.orig_w is not None:
            height, width = int(t.orig_h), int(t.orig_w)
        else:
            return None
    return height, width


def where(context: str | None, annotation: Mapping[str, Any] | None = None) -> str:
    parts = [context] if context else []
    if annotation is not None and isinstance(annotation, Mapping) and "id" in annotation:
        parts.append(f"annotation id {annotation['id']}")
    return ", ".join(parts) if parts else "annotation"


def polygons_as_arrays(
    segm: Sequence[Any], where: str | Callable[[], str], bound: float | None = None
) -> list[np.ndarray]:
    """Validated polygons as flat float64 arrays (``where`` names the source): even
    counts of at least 6, finite, and within ``bound`` when given.
    """
    arrays = []
    for j, polygon in enumerate(segm):
        if is_flat_polygon(polygon):
            arrays.append(polygon)  # already transformed / validated
            continue
        try:
            arr = np.asarray(polygon, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            label = where() if callable(where) else where
            raise RecordFormatError(
                f"{label}: key 'segmentation', polygon {j} is not a flat list of numbers"
            ) from None
        if arr.size % 2 != 0 or arr.size < 6:
            label = where() if callable(where) else where
            raise RecordFormatError(
                f"{label}: key 'segmentation', polygon {j} has {arr.size} numbers; a polygon "
                "needs an even count of at least 6 (x, y pairs)"
            )
        arrays.append(arr)
    flat = arrays[0] if len(arrays) == 1 else np.concatenate(arrays) if arrays else None
    limit = _FLOAT64_MAX if bound is None else bound
    # NaN fails both comparisons, inf fails one: the common case costs two reductions
    if flat is not None and flat.size and not (-limit <= flat.min() and flat.max() <= limit):
        for j, polygon in enumerate(arrays):
            check_polygon(polygon, where() if callable(where) else where, j, bound)
    return arrays


def boxes_xyxy(annotations: Sequence[Mapping[str, Any]], where: Callable[[int], str]) -> np.ndarray:
    """The annotations' boxes as an Nx4 float64 XYXY_ABS array (errors name the annotation)."""
    n = len(annotations)
    try:  # fast path: every box is 4 numbers in XYXY_ABS or XYWH_ABS
        modes = np.fromiter(map(_BBOX_MODE, annotations), dtype=np.int64, count=n)
        if np.all((modes == BoxMode.XYXY_ABS) | (modes == BoxMode.XYWH_ABS)):
            boxes = np.array(list(map(_BBOX, annotations)), dtype=np.float64)
            if boxes.shape == (n, 4):
                xywh = modes == BoxMode.XYWH_ABS
                boxes[xywh, 2:] += boxes[xywh, :2]
                return boxes
    except (KeyError, TypeError, ValueError):
        pass  # the loop below finds the culprit and names it
    boxes = np.empty((n, 4), dtype=np.float64)
    for i, obj in enumerate(annotations):
        try:
            bbox, mode = obj["bbox"], obj["bbox_mode"]
        except KeyError as exc:
            raise RecordFormatError(f"{where(i)}: missing key {exc.args[0]!r}") from None
        except TypeError:
            raise RecordFormatError(
                f"{where(i)}: an annotation must be a dict, got {type(obj).__name__}"
            ) from None
        try:
            boxes[i] = BoxMode.convert(np.asarray(bbox, dtype=np.float64), mode, BoxMode.XYXY_ABS)
        except (TypeError, ValueError) as exc:
            raise RecordFormatError(
                f"{where(i)}: key 'bbox' {bbox!r} with bbox_mode {mode!r} is not a box of 4 "
                f"numbers ({exc})"
            ) from None
    return boxes


def _mask_utils(purpose: str) -> Any:
    try:
        from pycocotools import mask as mask_utils
    except ImportError:
        raise missing_dependency("pycocotools", "coco", purpose) from None
    return mask_utils


def rle_to_bitmask(
    rle: Mapping[str, Any],
    *,
    context: str | None = None,
    image_size: tuple[int, int] | None = None,
) -> np.ndarray:
    """Decode a COCO RLE dict to an HxW uint8 mask, checked first (size against
    ``image_size`` and the pixel limit, runs adding up).
    """
    mask_utils = _mask_utils("decoding an RLE segmentation")
    name = where(context, rle)
    height, width, counts = check_rle(rle, name, image_size)
    try:
        if isinstance(counts, list):
            encoded = mask_utils.frPyObjects(
                {"size": [height, width], "counts": counts}, height, width
            )
        else:
            encoded = {"size": [height, width], "counts": counts}
        mask = mask_utils.decode(encoded)
    except (TypeError, ValueError) as exc:
        raise RecordFormatError(f"{name}: cannot decode RLE segmentation ({exc})") from exc
    return np.ascontiguousarray(mask, dtype=np.uint8)


def polygons_to_bitmask(
    polygons: Sequence[Any], height: int, width: int, *, context: str | None = None
) -> np.ndarray:
    """Rasterize flat polygons into one HxW uint8 mask (COCO's rasterizer), coordinates
    checked first: pycocotools crashes the process on huge values.
    """
    height, width = int(height), int(width)
    if height <= 0 or width <= 0:
        raise ValueError(
            f"polygons_to_bitmask: the mask size must be positive, got {height}x{width}"
        )
    if len(polygons) == 0:
        return np.zeros((height, width), dtype=np.uint8)
    mask_utils = _mask_utils("rasterizing polygons into a bitmask")
    arrays = polygons_as_arrays(
        polygons, context or "polygons_to_bitmask", bound=coordinate_bound(height, width)
    )
    _polygon_work(arrays, context or "polygons_to_bitmask", get_image_limits())
    rles = mask_utils.frPyObjects([p.tolist() for p in arrays], height, width)
    return np.ascontiguousarray(mask_utils.decode(mask_utils.merge(rles)), dtype=np.uint8)


def _over_budget(cost: int | float, limit: int | None, budget: str, what: str, where: str) -> None:
    if limit is not None and cost > limit:
        raise SampleBudgetError(
            f"{where}: {what} = {cost:g}, over the per-sample budget {budget}={limit}; raise it "
            f"with mappers.set_image_limits({budget}=...)", budget=budget, cost=cost, limit=limit)


def _polygon_work(polygons: Sequence[Any], where: str, limits: ImageLimits, vertices: int = 0,
                  length: float = 0.0) -> tuple[int, float]:
    """Add ``polygons``' vertices and edge length (each edge's longer axis: what pycocotools
    upsamples and allocates) to the running sums; refuse them over the budget. Unparsable
    polygons are left to the validation that follows."""
    for polygon in polygons:
        try:
            xy = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
        except (TypeError, ValueError):
            continue
        vertices += len(xy)
        length += float(np.abs(xy - np.roll(xy, 1, axis=0)).max(axis=1, initial=0).sum())
    _over_budget(vertices, limits.max_polygon_vertices, "max_polygon_vertices",
                 "key 'segmentation': polygon vertices", where)
    _over_budget(length, limits.max_polygon_edge_length, "max_polygon_edge_length",
                 "key 'segmentation': total polygon edge length", where)
    return vertices, length


def check_mask_budget(annotations: Sequence[Mapping[str, Any]], height: int, width: int,
                      context: str) -> None:
    """Refuse (SampleBudgetError, a RecordFormatError) a sample whose bitmasks would exceed
    :class:`~mappers.image_io.ImageLimits`: instances x H x W bytes, polygon vertices, total
    polygon edge length (named at the annotation that crosses it); run before any mask is
    allocated or rasterized.

    Example:
        >>> check_mask_budget([{"segmentation": [[0, 0, 9, 0, 9, 9]]}], 10, 10, "image")
    """
    limits = get_image_limits()
    _over_budget(len(annotations) * height * width, limits.max_mask_bytes, "max_mask_bytes",
                 f"{len(annotations)} masks x {height} x {width} bytes", context)
    work = (0, 0.0)
    for obj in annotations:
        segm = obj.get("segmentation") if isinstance(obj, Mapping) else None
        if isinstance(segm, (list, tuple)):
            work = _polygon_work(segm, where(context, obj), limits, *work)
