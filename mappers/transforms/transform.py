"""Deterministic transforms applied consistently to images and their annotations.

detectron2's conventions (coordinates Nx2 (x, y) absolute, boxes XYXY_ABS, sizes (h, w));
inputs are never modified in place.

Example:
    >>> HFlipTransform(400).apply_box(np.array([[10, 10, 200, 300]])).tolist()
    [[200.0, 10.0, 390.0, 300.0]]
"""

from __future__ import annotations

import inspect
import pprint
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from catalog._common import CatmapError

from .resample import INTERP_NAMES, RESIZE_BACKENDS, flip_array, normalize_interp, resize_array


class TransformError(CatmapError, ValueError):
    """A transform was given input it cannot handle (wrong image size, malformed coordinates)."""


def positive_ints(owner: str, what: str, values: Any, count: int = 2) -> tuple[int, ...]:
    """``count`` positive integers (an int stands for all of them), else ValueError."""
    if isinstance(values, (int, np.integer)):
        values = (values,) * count
    try:
        out = tuple(int(v) for v in values)
        ok = len(out) == count and all(o == v and o > 0 for o, v in zip(out, values, strict=True))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}: {what} must be {count} positive integers, got {values!r}")
    return out


def finite_floats(owner: str, what: str, values: Any, count: int | None = None) -> tuple:
    """Finite numbers (``count`` of them when given, at least one), else ValueError."""
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        out = ()
    if not out or not all(np.isfinite(out)) or (count and len(out) != count):
        raise ValueError(f"{owner}: {what} must be {count or ''} finite numbers, got {values!r}")
    return out


def check_input_size(transform: Any, array: np.ndarray, what: str) -> None:
    """Raise TransformError unless ``array`` is ``transform.h x transform.w``."""
    if array.shape[:2] != (transform.h, transform.w):
        raise TransformError(
            f"{type(transform).__name__} expects an {what} of size (h, w) = "
            f"({transform.h}, {transform.w}), got shape {tuple(array.shape)}"
        )


_SHAPES = {2: "Nx2 array of (x, y)", 4: "Nx4 XYXY array", 5: "Nx5 array of (cx, cy, w, h, angle)"}


def _as_float_coords(
    data: Any, what: str = "coords", columns: int = 2, copy: bool = True
) -> np.ndarray:
    """``data`` as an N x columns float array (one row accepted for boxes; empty: 0 rows)."""
    arr = np.asarray(data)
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    elif copy:
        arr = arr.copy()
    if columns > 2 and arr.ndim == 1 and arr.shape[0] == columns:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != columns:
        if arr.size == 0:
            return arr.reshape(0, columns)
        raise TransformError(f"{what} must be an {_SHAPES[columns]}, got shape {arr.shape}")
    return arr


def as_rotated_boxes(rotated_boxes: Any) -> np.ndarray:
    """A float copy of Nx5 rotated boxes (one row accepted)."""
    return _as_float_coords(rotated_boxes, "rotated boxes", 5)


def order_box_edges(moved: np.ndarray) -> np.ndarray:
    """Boxes around edges moved by an axis-aligned map (a flip may swap them); in place."""
    low = np.minimum(moved[:, :2], moved[:, 2:])
    np.maximum(moved[:, :2], moved[:, 2:], out=moved[:, 2:])
    moved[:, :2] = low
    return moved


_EDGE_MOVERS: dict[type, bool] = {}


def _apply_box_by_edges(tfm: Any, box: Any) -> np.ndarray:
    arr = _as_float_coords(box, "boxes", 4, copy=False)
    if len(arr) == 0:
        return arr
    moved = arr.copy()
    tfm.move_box_edges(moved)
    return order_box_edges(moved)


def _param_repr(obj: Any, by_identity: bool = False) -> str:
    """``Name(arg=value, ...)`` from the __init__ signature and same-named attributes, leaving
    out defaults: the very default object (``by_identity``, detectron2's augmentations) or an
    equal value (fvcore's transforms)."""
    sig = inspect.signature(type(obj).__init__)
    parts = []
    for name, param in list(sig.parameters.items())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or not hasattr(obj, name):
            continue
        value = getattr(obj, name)
        if value is param.default:
            continue
        if not by_identity and param.default is not inspect.Parameter.empty:
            try:
                if bool(value == param.default):
                    continue
            except Exception:  # e.g. numpy array comparisons
                pass
        text = pprint.pformat(value)
        if "\n" in text or len(text) > 80:
            text = "..."
        parts.append(f"{name}={text}")
    return f"{type(obj).__name__}({', '.join(parts)})"


class Transform:
    """Base class: subclasses implement ``apply_image`` and ``apply_coords``; boxes, polygons,
    segmentation maps and rotated boxes derive from them unless overridden.
    """

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement apply_image")

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement apply_coords")

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        return self.apply_image(segmentation)

    def apply_box(self, box: Any) -> np.ndarray:
        """Nx4 XYXY boxes: the axis-aligned box around each box's 4 transformed corners."""
        arr = _as_float_coords(box, "boxes", 4, copy=False)
        if len(arr) == 0:
            return arr
        corners = arr[:, [0, 1, 2, 1, 0, 3, 2, 3]].reshape(-1, 2)
        corners = self.apply_coords(corners).reshape(-1, 4, 2)
        return np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [self.apply_coords(p) for p in polygons]

    def apply_rotated_box(self, rotated_boxes: Any) -> Any:
        """Nx5 rotated boxes through ``apply_coords``: the centre is mapped and the two
        half-axes by central differences (exact for affine maps); the new angle is the
        360-degree equivalent nearest the old one, so a crop or pad keeps angles."""
        boxes = as_rotated_boxes(rotated_boxes)
        if len(boxes) == 0:
            return boxes
        theta = np.deg2rad(boxes[:, 4])
        c, s = np.cos(theta), np.sin(theta)
        half_w = 0.5 * boxes[:, 2:3] * np.stack([c, -s], axis=1)
        half_h = 0.5 * boxes[:, 3:4] * np.stack([s, c], axis=1)
        centers = boxes[:, :2]
        points = np.concatenate(
            [centers, centers + half_w, centers - half_w, centers + half_h, centers - half_h]
        )
        mapped = np.asarray(self.apply_coords(points), dtype=np.float64).reshape(5, len(boxes), 2)
        new_half_w = 0.5 * (mapped[1] - mapped[2])
        new_half_h = 0.5 * (mapped[3] - mapped[4])
        out = np.empty_like(boxes, dtype=np.float64)
        out[:, :2] = mapped[0]
        out[:, 2] = 2.0 * np.hypot(new_half_w[:, 0], new_half_w[:, 1])
        out[:, 3] = 2.0 * np.hypot(new_half_h[:, 0], new_half_h[:, 1])
        angle = np.rad2deg(np.arctan2(new_half_h[:, 0], new_half_h[:, 1]))
        out[:, 4] = boxes[:, 4] + np.mod(angle - boxes[:, 4] + 180.0, 360.0) - 180.0
        flat = out[:, 3] == 0  # no height axis: take the angle of the width axis
        if flat.any():
            angle_w = np.rad2deg(np.arctan2(-new_half_w[flat, 1], new_half_w[flat, 0]))
            delta_w = np.mod(angle_w - boxes[flat, 4] + 180.0, 360.0) - 180.0
            out[flat, 4] = boxes[flat, 4] + delta_w
        return out.astype(boxes.dtype, copy=False)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        """The (h, w) this transform makes from an image of (height, width), from sizes
        alone; None when it cannot tell."""
        return None

    def inverse(self) -> Transform:
        raise NotImplementedError(f"{type(self).__name__} has no inverse")

    @classmethod
    def register_type(cls, data_type: str, func: Callable[[Any, Any], Any] | None = None) -> Any:
        """Add ``apply_<data_type>(self, data)`` to this class (usable as a decorator)."""
        if not str(data_type).isidentifier():
            raise ValueError(f"register_type: {data_type!r} is not a valid identifier")

        def wrapper(f: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
            setattr(cls, "apply_" + data_type, f)
            return f

        return wrapper if func is None else wrapper(func)

    def __add__(self, other: Transform) -> TransformList:
        if not isinstance(other, Transform):
            return NotImplemented
        return TransformList([self, other])

    def __repr__(self) -> str:
        return _param_repr(self)


class GeometryPreservingTransform(Transform):
    """Changes pixel values only: every annotation comes back as the very object given."""

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return coords

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        return segmentation

    def apply_box(self, box: Any) -> Any:
        return box

    def move_box_edges(self, boxes: np.ndarray) -> None:
        pass

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> Any:
        return polygons

    def apply_rotated_box(self, rotated_boxes: Any) -> Any:
        return rotated_boxes

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        return int(height), int(width)


class NoOpTransform(GeometryPreservingTransform):
    """The identity: every ``apply_*`` returns its input."""

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return img

    def inverse(self) -> Transform:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            return lambda x: x
        raise AttributeError(f"NoOpTransform has no attribute {name!r}")


class TransformList(Transform):
    """Transforms applied in order (nested lists are flattened); ``+`` concatenates and
    ``inverse()`` inverts in reverse order.

    Example:
        >>> tl = TransformList([HFlipTransform(10), ResizeTransform(5, 10, 10, 20)])
        >>> tl.apply_coords(np.array([[1.0, 1.0]])).tolist()
        [[18.0, 2.0]]
    """

    def __init__(self, transforms: Sequence[Transform] | None = None) -> None:
        flat: list[Transform] = []
        for index, t in enumerate(transforms or ()):
            if isinstance(t, TransformList):
                flat.extend(t.transforms)
            elif isinstance(t, Transform):
                flat.append(t)
            else:
                raise TypeError(
                    f"TransformList element {index} is a {type(t).__name__}, not a Transform"
                )
        self.transforms: list[Transform] = flat

    def _apply(self, method: str, x: Any) -> Any:
        for t in self.transforms:
            x = getattr(t, method)(x)
        return x

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self._apply("apply_image", img)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return self._apply("apply_coords", coords)

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        return self._apply("apply_segmentation", segmentation)

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self._apply("apply_polygons", polygons)

    def apply_rotated_box(self, rotated_boxes: Any) -> Any:
        return self._apply("apply_rotated_box", as_rotated_boxes(rotated_boxes))

    def apply_box(self, box: Any) -> np.ndarray:
        """Axis-aligned lists move one copy of the boxes edge by edge and order it once."""
        if not self._axis_aligned():
            return self._apply("apply_box", box)
        moved = np.array(box)  # a copy; odd shapes and dtypes through _as_float_coords
        if moved.dtype.kind != "f" or moved.ndim != 2 or moved.shape[1] != 4:
            moved = _as_float_coords(box, "boxes", 4)
        for t in self.transforms:
            if not isinstance(t, GeometryPreservingTransform):  # those move nothing
                t.move_box_edges(moved)
        low = np.minimum(moved[:, :2], moved[:, 2:])  # order_box_edges, inlined
        np.maximum(moved[:, :2], moved[:, 2:], out=moved[:, 2:])
        moved[:, :2] = low
        return moved

    def _axis_aligned(self) -> bool:
        """Whether every ``apply_box`` is its ``move_box_edges`` plus ordering (cached per
        class: a subclass overriding ``apply_box`` alone keeps its own rule) and some moves."""
        pixel_only = True
        for t in self.transforms:
            known = _EDGE_MOVERS.get(type(t))
            if known is None:
                for k in type(t).__mro__:  # the nearer definition decides
                    if "move_box_edges" in k.__dict__ or "apply_box" in k.__dict__:
                        known = "move_box_edges" in k.__dict__
                        break
                if len(_EDGE_MOVERS) < 1024:
                    _EDGE_MOVERS[type(t)] = bool(known)
            if not known:
                return False
            pixel_only = pixel_only and isinstance(t, GeometryPreservingTransform)
        return not pixel_only

    def apply_box_inplace(self, boxes: np.ndarray) -> bool:
        """``apply_box`` into ``boxes`` (writable float Nx4) when every transform is
        axis-aligned; False (``boxes`` untouched) otherwise."""
        if not self._axis_aligned():
            return False
        self.move_box_edges(boxes)
        order_box_edges(boxes)
        return True

    def move_box_edges(self, boxes: np.ndarray) -> None:
        for t in self.transforms:
            t.move_box_edges(boxes)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        size: tuple[int, int] | None = (int(height), int(width))
        for t in self.transforms:
            size = t.output_size(*size)
            if size is None:
                return None
        return size

    def __getattr__(self, name: str) -> Any:
        # data types added with Transform.register_type
        if name.startswith("apply_"):
            return lambda x: self._apply(name, x)
        raise AttributeError(f"TransformList has no attribute {name!r}")

    def inverse(self) -> TransformList:
        return TransformList([t.inverse() for t in reversed(self.transforms)])

    def __add__(self, other: Transform) -> TransformList:
        if not isinstance(other, Transform):
            return NotImplemented
        return TransformList([*self.transforms, other])

    def __iadd__(self, other: Transform) -> TransformList:
        if not isinstance(other, Transform):
            return NotImplemented
        self.transforms.extend(other.transforms if isinstance(other, TransformList) else [other])
        return self

    def __radd__(self, other: Transform) -> TransformList:
        if not isinstance(other, Transform):
            return NotImplemented
        return TransformList([other, *self.transforms])

    def __len__(self) -> int:
        return len(self.transforms)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return TransformList(self.transforms[index])
        return self.transforms[index]

    def __iter__(self) -> Iterator[Transform]:
        return iter(self.transforms)

    def __repr__(self) -> str:
        return f"TransformList[{', '.join(repr(t) for t in self.transforms)}]"


def as_transform_list(transforms: Transform | Sequence[Transform]) -> TransformList:
    """``transforms`` (one Transform or a sequence) as a TransformList (one is kept as is)."""
    if isinstance(transforms, TransformList):
        return transforms
    if isinstance(transforms, Transform):
        return TransformList([transforms])
    return TransformList(list(transforms))


class _AxisFlipTransform(Transform):
    """A flip along x (``_horizontal``) or y: coordinate c becomes ``extent - c``. The image
    result is a view with a negative stride (no pixels copied)."""

    _horizontal: bool = True
    _extent_attr: str = "width"

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return flip_array(img, horizontal=self._horizontal)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        axis = 0 if self._horizontal else 1
        out[:, axis] = getattr(self, self._extent_attr) - out[:, axis]
        return out

    def move_box_edges(self, boxes: np.ndarray) -> None:
        cols = boxes[:, 0::2] if self._horizontal else boxes[:, 1::2]
        np.subtract(getattr(self, self._extent_attr), cols, out=cols)

    def apply_box(self, box: Any) -> np.ndarray:
        return _apply_box_by_edges(self, box)

    def apply_rotated_box(self, rotated_boxes: Any) -> np.ndarray:
        """The centre is mirrored and the angle negated."""
        boxes = as_rotated_boxes(rotated_boxes)
        if len(boxes):
            boxes[:, :2] = self.apply_coords(boxes[:, :2])
            boxes[:, 4] = -boxes[:, 4]
        return boxes

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        return int(height), int(width)

    def inverse(self) -> Transform:
        return self


class HFlipTransform(_AxisFlipTransform):
    """Horizontal flip of an image of the given width: x becomes ``width - x``."""

    _horizontal = True
    _extent_attr = "width"

    def __init__(self, width: int) -> None:
        self.width = width


class VFlipTransform(_AxisFlipTransform):
    """Vertical flip of an image of the given height: y becomes ``height - y``."""

    _horizontal = False
    _extent_attr = "height"

    def __init__(self, height: int) -> None:
        self.height = height


class ResizeTransform(Transform):
    """Resize an image of (h, w) to (new_h, new_w) with ``interp`` (Pillow constant or name);
    segmentation maps use nearest neighbour. ``backend``: see :func:`resize_array` ("pil",
    the default, gives detectron2's pixels; "opencv" is faster and differs when shrinking).
    """

    def __init__(
        self, h: int, w: int, new_h: int, new_w: int, interp: int | str | None = None,
        backend: str = "pil",
    ) -> None:
        try:
            sizes = tuple(map(int, (h, w, new_h, new_w)))
        except (TypeError, ValueError, OverflowError):
            sizes = (0,)
        if min(sizes) <= 0 or sizes != (h, w, new_h, new_w):
            raise ValueError(f"{type(self).__name__}: (h, w, new_h, new_w) must be 4 positive "
                             f"integers, got {(h, w, new_h, new_w)!r}")
        if type(interp) is not int or interp not in INTERP_NAMES:
            normalize_interp(interp)  # validates early
        if backend not in RESIZE_BACKENDS:
            raise ValueError(
                f"ResizeTransform: backend must be one of {RESIZE_BACKENDS}, got {backend!r}"
            )
        self.h, self.w, self.new_h, self.new_w = sizes
        self.interp = interp
        self.backend = backend

    def apply_image(
        self, img: np.ndarray, interp: int | str | None = None, *, output_space: Any = None
    ) -> np.ndarray:
        """The resized image (``output_space``: see :func:`resize_array`)."""
        if img.shape[:2] != (self.h, self.w):
            check_input_size(self, img, "image")  # raises
        interp = interp if interp is not None else self.interp
        return resize_array(img, self.new_h, self.new_w, interp, self.backend,
                            output_space=output_space)

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        check_input_size(self, segmentation, "segmentation map")
        return resize_array(segmentation, self.new_h, self.new_w, "nearest")

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        out[:, 0] *= self.new_w / self.w
        out[:, 1] *= self.new_h / self.h
        return out

    def move_box_edges(self, boxes: np.ndarray) -> None:
        boxes[:, 0::2] *= self.new_w / self.w
        boxes[:, 1::2] *= self.new_h / self.h

    def apply_box(self, box: Any) -> np.ndarray:
        return _apply_box_by_edges(self, box)

    def apply_rotated_box(self, rotated_boxes: Any) -> np.ndarray:
        """detectron2's rule (``RotatedBoxes.scale``): w and h are the lengths of the scaled
        axes, the angle that of the scaled height axis (exact for a uniform scale)."""
        boxes = as_rotated_boxes(rotated_boxes)
        if len(boxes) == 0:
            return boxes
        sx, sy = self.new_w / self.w, self.new_h / self.h
        out = boxes.copy()
        out[:, 0] *= sx
        out[:, 1] *= sy
        theta = np.deg2rad(boxes[:, 4])
        c, s = np.cos(theta), np.sin(theta)
        out[:, 2] = boxes[:, 2] * np.hypot(sx * c, sy * s)
        out[:, 3] = boxes[:, 3] * np.hypot(sx * s, sy * c)
        out[:, 4] = np.rad2deg(np.arctan2(sx * s, sy * c))
        return out

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        if (int(height), int(width)) != (self.h, self.w):
            return None
        return self.new_h, self.new_w

    def inverse(self) -> Transform:
        return ResizeTransform(self.new_h, self.new_w, self.h, self.w, self.interp, self.backend)


_TORCH_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "area")


class ScaleTransform(ResizeTransform):
    """fvcore's resize, which detectron2 re-exports: ``torch.nn.functional.interpolate`` with a
    torch mode (default bilinear; integers rounded half to even). Geometry as ResizeTransform.
    """

    def __init__(self, h: int, w: int, new_h: int, new_w: int, interp: str | None = None) -> None:
        if interp is not None and interp not in _TORCH_MODES:
            raise ValueError(f"ScaleTransform: interp {interp!r} is none of {_TORCH_MODES}")
        super().__init__(h, w, new_h, new_w)
        self.interp = interp

    def apply_image(self, img: np.ndarray, interp: str | None = None) -> np.ndarray:
        check_input_size(self, img[0] if img.ndim == 4 else img, "image")
        mode = interp or self.interp or "bilinear"
        x = torch.from_numpy(np.ascontiguousarray(img))
        x = x if x.is_floating_point() else x.float()
        batch = x.reshape(img.shape[:2] + (-1,))[None] if img.ndim < 4 else x  # N x H x W x C
        corners = False if mode in ("linear", "bilinear", "bicubic") else None
        size = (self.new_h, self.new_w)
        y = F.interpolate(batch.permute(0, 3, 1, 2), size, mode=mode, align_corners=corners)
        y = y.permute(0, 2, 3, 1)
        y = y.reshape(size + img.shape[2:]) if img.ndim < 4 else y
        out = y.numpy()
        if np.issubdtype(img.dtype, np.integer):  # rounded half to even, as torch.round
            out = np.clip(np.round(out), np.iinfo(img.dtype).min, np.iinfo(img.dtype).max)
        return out.astype(img.dtype, copy=False)

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        return self.apply_image(segmentation, interp="nearest")

    def inverse(self) -> Transform:
        return ScaleTransform(self.new_h, self.new_w, self.h, self.w, self.interp)
