"""Deterministic transforms applied consistently to images, coordinates, boxes and masks.

Conventions (those of detectron2, so code moves over unchanged):

* images are numpy arrays HxW or HxWxC (also NxHxWxC for flips and crops); uint8 stays uint8;
* coordinates are Nx2 float arrays of (x, y) in absolute pixels, where the image spans
  [0, width] x [0, height] (pixel edges, not centres);
* boxes are Nx4 XYXY_ABS; a box is transformed through its 4 corners and the result is the
  axis-aligned box around them;
* polygons are a list of Nx2 arrays; segmentation maps are HxW arrays resampled with nearest
  neighbour;
* image sizes are (h, w).

Transforms never modify their inputs in place.

Example:
    >>> import numpy as np
    >>> t = HFlipTransform(400)
    >>> t.apply_box(np.array([[10, 10, 200, 300]])).tolist()
    [[200.0, 10.0, 390.0, 300.0]]
"""

from __future__ import annotations

import inspect
import logging
import pprint
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from catalog.errors import CatmapError

from ._backend import flip_array, normalize_interp, resize_array

__all__ = [
    "Transform",
    "TransformList",
    "NoOpTransform",
    "HFlipTransform",
    "VFlipTransform",
    "ResizeTransform",
    "CropTransform",
    "PadTransform",
    "BlendTransform",
    "TransformError",
]

logger = logging.getLogger(__name__)


class TransformError(CatmapError, ValueError):
    """A transform was given input it cannot handle (wrong image size, malformed coordinates)."""


def _as_float_coords(coords: Any, what: str = "coords") -> np.ndarray:
    arr = np.asarray(coords)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    else:
        arr = arr.copy()
    if arr.ndim != 2 or arr.shape[1] != 2:
        if arr.size == 0:
            return arr.reshape(0, 2)
        raise TransformError(f"{what} must be an Nx2 array of (x, y), got shape {arr.shape}")
    return arr


def _param_repr(obj: Any, always_first: bool) -> str:
    """``Name(arg=value, ...)`` from the __init__ signature and same-named attributes."""
    sig = inspect.signature(type(obj).__init__)
    parts = []
    for index, (name, param) in enumerate(list(sig.parameters.items())[1:]):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or not hasattr(obj, name):
            continue
        value = getattr(obj, name)
        required = param.default is inspect.Parameter.empty
        if not required and not (always_first and index == 0):
            try:
                same = bool(value is param.default or value == param.default)
            except Exception:  # e.g. numpy array comparisons
                same = False
            if same:
                continue
        text = pprint.pformat(value)
        if "\n" in text or len(text) > 80:
            text = "..."
        parts.append(f"{name}={text}")
    return f"{type(obj).__name__}({', '.join(parts)})"


class Transform:
    """Base class of deterministic transforms.

    Subclasses implement ``apply_image`` and ``apply_coords``; ``apply_box``,
    ``apply_polygons`` and ``apply_segmentation`` derive from them unless overridden, and
    ``inverse`` is defined where the transform can be undone.

    The repr lists the constructor arguments, read from attributes of the same names.

    Example:
        >>> class Shift(Transform):
        ...     def __init__(self, dx):
        ...         self.dx = dx
        ...     def apply_image(self, img):
        ...         return img
        ...     def apply_coords(self, coords):
        ...         coords = np.asarray(coords, dtype=float).copy()
        ...         coords[:, 0] += self.dx
        ...         return coords
        >>> Shift(2).apply_box([[0, 0, 1, 1]]).tolist()
        [[2.0, 0.0, 3.0, 1.0]]
    """

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        """Return the transformed image (HxW or HxWxC numpy array)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement apply_image")

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        """Return the transformed Nx2 array of (x, y) absolute coordinates."""
        raise NotImplementedError(f"{type(self).__name__} does not implement apply_coords")

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        """Return the transformed HxW segmentation map (defaults to ``apply_image``)."""
        return self.apply_image(segmentation)

    def apply_box(self, box: Any) -> np.ndarray:
        """Transform Nx4 XYXY_ABS boxes through their 4 corners.

        Returns:
            Nx4 float array: for each box, the axis-aligned box around its transformed corners.
        """
        arr = np.asarray(box)
        if not np.issubdtype(arr.dtype, np.floating):
            arr = arr.astype(np.float64)
        if arr.ndim == 1 and arr.shape[0] == 4:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != 4:
            if arr.size == 0:
                return arr.reshape(0, 4)
            raise TransformError(f"boxes must be an Nx4 XYXY array, got shape {arr.shape}")
        corners = arr[:, [0, 1, 2, 1, 0, 3, 2, 3]].reshape(-1, 2)
        corners = self.apply_coords(corners).reshape(-1, 4, 2)
        return np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Transform a list of polygons, each an Nx2 array of (x, y)."""
        return [self.apply_coords(p) for p in polygons]

    def inverse(self) -> Transform:
        """Return the transform that undoes this one.

        Raises:
            NotImplementedError: this transform cannot be undone.
        """
        raise NotImplementedError(f"{type(self).__name__} has no inverse")

    @classmethod
    def register_type(cls, data_type: str, func: Callable[[Any, Any], Any] | None = None) -> Any:
        """Add an ``apply_<data_type>(self, data)`` method to every transform of this class.

        Usable as a decorator: ``@HFlipTransform.register_type("rotated_box")``.

        Raises:
            ValueError: ``data_type`` is not an identifier.
        """
        if not str(data_type).isidentifier():
            raise ValueError(f"register_type: {data_type!r} is not a valid identifier")

        def wrapper(f: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
            setattr(cls, "apply_" + data_type, f)
            return f

        return wrapper if func is None else wrapper(func)

    def __add__(self, other: Transform) -> TransformList:
        """``t1 + t2`` is ``TransformList([t1, t2])`` (flattened)."""
        if not isinstance(other, Transform):
            return NotImplemented
        return TransformList([self, other])

    def __repr__(self) -> str:
        return _param_repr(self, always_first=True)


class _PixelwiseTransform(Transform):
    """A transform that moves no pixel: coordinates, boxes, polygons and segmentation maps
    come back unchanged (the very objects given); subclasses define ``apply_image``.

    Example:
        >>> BlendTransform(0, 0.5, 0.5).apply_box([[1, 2, 3, 4]])
        [[1, 2, 3, 4]]
    """

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return coords

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        return segmentation

    def apply_box(self, box: Any) -> Any:
        return box

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> Any:
        return polygons


class NoOpTransform(_PixelwiseTransform):
    """The identity: every ``apply_*`` returns its input.

    Example:
        >>> NoOpTransform().apply_coords(np.array([[1.0, 2.0]])).tolist()
        [[1.0, 2.0]]
    """

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return img

    def inverse(self) -> Transform:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            return lambda x: x
        raise AttributeError(f"NoOpTransform has no attribute {name!r}")


class _AxisFlipTransform(Transform):
    """A flip along one image axis, its own inverse; subclasses name the axis.

    ``_horizontal`` selects the axis (True: x, the image's columns; False: y, its rows) and
    ``_extent_attr`` names the attribute holding the image's extent along it, so that
    coordinate ``c`` on that axis becomes ``extent - c``.

    Example:
        >>> HFlipTransform(10).apply_coords(np.array([[2.0, 3.0]])).tolist()
        [[8.0, 3.0]]
    """

    _horizontal: bool = True
    _extent_attr: str = "width"

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return flip_array(img, horizontal=self._horizontal)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        axis = 0 if self._horizontal else 1
        out[:, axis] = getattr(self, self._extent_attr) - out[:, axis]
        return out

    def inverse(self) -> Transform:
        return self


class HFlipTransform(_AxisFlipTransform):
    """Horizontal flip of an image of the given width: x becomes ``width - x``.

    The image result is a numpy view with a negative stride (no pixels copied); a later
    resize or CHW copy makes it contiguous at no extra cost.

    Example:
        >>> HFlipTransform(400).apply_polygons([np.array([[10, 10], [100, 100], [100, 10]])])[0].tolist()
        [[390.0, 10.0], [300.0, 100.0], [300.0, 10.0]]
    """

    _horizontal = True
    _extent_attr = "width"

    def __init__(self, width: int) -> None:
        self.width = width


class VFlipTransform(_AxisFlipTransform):
    """Vertical flip of an image of the given height: y becomes ``height - y``.

    Example:
        >>> VFlipTransform(100).apply_coords(np.array([[5.0, 10.0]])).tolist()
        [[5.0, 90.0]]
    """

    _horizontal = False
    _extent_attr = "height"

    def __init__(self, height: int) -> None:
        self.height = height


class ResizeTransform(Transform):
    """Resize an image of size (h, w) to (new_h, new_w).

    Images use ``interp`` (a Pillow constant or name; default bilinear) through OpenCV when
    installed, else Pillow; segmentation maps always use nearest neighbour. Coordinates are
    scaled by ``new_w / w`` and ``new_h / h``.

    Args:
        h, w: the input image size.
        new_h, new_w: the output size.
        interp: interpolation for images, e.g. ``PIL.Image.BILINEAR`` (2) or "bilinear".

    Raises:
        ValueError: a size is not positive, or ``interp`` is unknown.

    Example:
        >>> t = ResizeTransform(100, 200, 50, 100)
        >>> t.apply_image(np.zeros((100, 200, 3), np.uint8)).shape
        (50, 100, 3)
        >>> t.apply_coords(np.array([[200.0, 100.0]])).tolist()
        [[100.0, 50.0]]
    """

    def __init__(
        self, h: int, w: int, new_h: int, new_w: int, interp: int | str | None = None
    ) -> None:
        for name, value in (("h", h), ("w", w), ("new_h", new_h), ("new_w", new_w)):
            if int(value) != value or value <= 0:
                raise ValueError(
                    f"ResizeTransform: {name} must be a positive integer, got {value!r}"
                )
        normalize_interp(interp)  # validate early
        self.h, self.w, self.new_h, self.new_w = int(h), int(w), int(new_h), int(new_w)
        self.interp = interp

    def _check_size(self, img: np.ndarray, what: str) -> None:
        if img.shape[:2] != (self.h, self.w):
            raise TransformError(
                f"ResizeTransform expects an {what} of size (h, w) = ({self.h}, {self.w}), "
                f"got shape {tuple(img.shape)}"
            )

    def apply_image(self, img: np.ndarray, interp: int | str | None = None) -> np.ndarray:
        self._check_size(img, "image")
        return resize_array(
            img, self.new_h, self.new_w, interp if interp is not None else self.interp
        )

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        self._check_size(segmentation, "segmentation map")
        return resize_array(segmentation, self.new_h, self.new_w, "nearest")

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        out[:, 0] *= self.new_w / self.w
        out[:, 1] *= self.new_h / self.h
        return out

    def inverse(self) -> Transform:
        return ResizeTransform(self.new_h, self.new_w, self.h, self.w, self.interp)


def _clip_half_plane(pts: np.ndarray, axis: int, bound: float, keep_above: bool) -> np.ndarray:
    """One Sutherland-Hodgman pass: keep the part of a closed polygon on one side of a line."""
    vals = pts[:, axis]
    inside = vals >= bound if keep_above else vals <= bound
    if inside.all():
        return pts
    if not inside.any():
        return pts[:0]
    nxt = np.roll(pts, -1, axis=0)
    crosses = inside != np.roll(inside, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(crosses, (bound - vals) / (nxt[:, axis] - vals), 0.0)
    inter = pts + t[:, None] * (nxt - pts)
    inter[:, axis] = bound
    # Vertex i contributes itself when inside, then the crossing of edge (i, i+1) if any.
    candidates = np.stack([pts, inter], axis=1).reshape(-1, 2)
    keep = np.stack([inside, crosses], axis=1).reshape(-1)
    return candidates[keep]


def _polygon_area(pts: np.ndarray) -> float:
    x, y = pts[:, 0], pts[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


class CropTransform(Transform):
    """Crop the window with top-left (x0, y0) and size (w, h) out of an image.

    The image result is a numpy view. Coordinates are shifted by (-x0, -y0) and not clipped;
    polygons are clipped to the window (Sutherland-Hodgman), and those left with no area are
    dropped. A polygon cut into several pieces stays one polygon whose pieces are joined
    along the window border (same mask).

    Args:
        x0, y0: top-left corner of the window.
        w, h: window size.
        orig_w, orig_h: size of the image before cropping; needed only by ``inverse()``.

    Example:
        >>> t = CropTransform(10, 20, 30, 40)
        >>> t.apply_image(np.zeros((100, 100), np.uint8)).shape
        (40, 30)
        >>> t.apply_coords(np.array([[15.0, 25.0]])).tolist()
        [[5.0, 5.0]]
    """

    def __init__(
        self, x0: int, y0: int, w: int, h: int, orig_w: int | None = None, orig_h: int | None = None
    ) -> None:
        if w <= 0 or h <= 0 or x0 < 0 or y0 < 0:
            raise ValueError(f"CropTransform: invalid window x0={x0}, y0={y0}, w={w}, h={h}")
        self.x0, self.y0, self.w, self.h = int(x0), int(y0), int(w), int(h)
        self.orig_w = orig_w
        self.orig_h = orig_h

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        ys = slice(self.y0, self.y0 + self.h)
        xs = slice(self.x0, self.x0 + self.w)
        if img.ndim <= 3:
            return img[ys, xs]
        return img[..., ys, xs, :]

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        out[:, 0] -= self.x0
        out[:, 1] -= self.y0
        return out

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        x1, y1 = self.x0 + self.w, self.y0 + self.h
        result = []
        for polygon in polygons:
            pts = _as_float_coords(polygon, "polygon")
            clipped = pts
            for axis, bound, keep_above in (
                (0, self.x0, True),
                (0, x1, False),
                (1, self.y0, True),
                (1, y1, False),
            ):
                clipped = _clip_half_plane(clipped, axis, bound, keep_above)
                if len(clipped) == 0:
                    break
            if len(clipped) < 3 or (clipped is not pts and _polygon_area(clipped) <= 0.0):
                continue
            result.append(self.apply_coords(clipped))
        return result

    def inverse(self) -> Transform:
        if self.orig_w is None or self.orig_h is None:
            raise NotImplementedError(
                "CropTransform.inverse() needs orig_w and orig_h (the size before cropping)"
            )
        pad_x1 = self.orig_w - self.x0 - self.w
        pad_y1 = self.orig_h - self.y0 - self.h
        return PadTransform(self.x0, self.y0, pad_x1, pad_y1, orig_w=self.w, orig_h=self.h)


class PadTransform(Transform):
    """Pad an image of size (orig_h, orig_w) by x0/y0 pixels before and x1/y1 after.

    Args:
        x0, y0, x1, y1: padding on the left, top, right and bottom.
        orig_w, orig_h: size of the image before padding; needed only by ``inverse()``.
        pad_value: fill value for images; seg_pad_value: fill value for segmentation maps.

    Example:
        >>> PadTransform(1, 2, 3, 4).apply_image(np.ones((5, 5), np.uint8)).shape
        (11, 9)
    """

    def __init__(
        self,
        x0: int,
        y0: int,
        x1: int,
        y1: int,
        orig_w: int | None = None,
        orig_h: int | None = None,
        pad_value: float = 0,
        seg_pad_value: int = 0,
    ) -> None:
        if min(x0, y0, x1, y1) < 0:
            raise ValueError(f"PadTransform: negative padding ({x0}, {y0}, {x1}, {y1})")
        self.x0, self.y0, self.x1, self.y1 = int(x0), int(y0), int(x1), int(y1)
        self.orig_w, self.orig_h = orig_w, orig_h
        self.pad_value, self.seg_pad_value = pad_value, seg_pad_value

    def _pad(self, img: np.ndarray, value: float) -> np.ndarray:
        widths = [(self.y0, self.y1), (self.x0, self.x1)] + [(0, 0)] * (img.ndim - 2)
        return np.pad(img, widths, mode="constant", constant_values=value)

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self._pad(img, self.pad_value)

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        return self._pad(segmentation, self.seg_pad_value)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        out[:, 0] += self.x0
        out[:, 1] += self.y0
        return out

    def inverse(self) -> Transform:
        if self.orig_w is None or self.orig_h is None:
            raise NotImplementedError(
                "PadTransform.inverse() needs orig_w and orig_h (the size before padding)"
            )
        new_w = self.orig_w + self.x0 + self.x1
        new_h = self.orig_h + self.y0 + self.y1
        return CropTransform(self.x0, self.y0, self.orig_w, self.orig_h, new_w, new_h)


class BlendTransform(_PixelwiseTransform):
    """Blend the image with ``src_image``: ``src_weight * src_image + dst_weight * img``.

    Colour augmentations use it. uint8 images are clipped to [0, 255] and stay uint8 (values
    truncated as in detectron2); when ``src_image`` is a scalar the result comes from a
    256-entry lookup table instead of a float copy of the image. Coordinates and
    segmentation maps are unchanged; the inverse is the identity (colour changes are not
    undone).

    Example:
        >>> BlendTransform(0, 0.0, 0.5).apply_image(np.full((1, 1), 101, np.uint8)).tolist()
        [[50]]
    """

    def __init__(self, src_image: Any, src_weight: float, dst_weight: float) -> None:
        self.src_image = src_image
        self.src_weight = src_weight
        self.dst_weight = dst_weight

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        if img.dtype == np.uint8:
            if np.ndim(self.src_image) == 0:
                levels = np.arange(256, dtype=np.float32)
                lut = (
                    np.float32(self.src_weight) * np.float32(self.src_image)
                    + np.float32(self.dst_weight) * levels
                )
                lut = np.clip(lut, 0, 255).astype(np.uint8)
                return lut[img]
            blended = self.src_weight * np.asarray(
                self.src_image, dtype=np.float32
            ) + self.dst_weight * img.astype(np.float32)
            return np.clip(blended, 0, 255).astype(np.uint8)
        return self.src_weight * self.src_image + self.dst_weight * img

    def inverse(self) -> Transform:
        return NoOpTransform()

    def __repr__(self) -> str:
        src = self.src_image
        src_text = f"{float(src):.4g}" if np.ndim(src) == 0 else f"<array {np.shape(src)}>"
        return (
            f"BlendTransform(src_image={src_text}, src_weight={self.src_weight:.4g}, "
            f"dst_weight={self.dst_weight:.4g})"
        )


class TransformList(Transform):
    """A sequence of transforms applied in order; nested lists are flattened.

    ``tl.apply_<anything>(x)`` applies each transform's ``apply_<anything>`` in turn.
    ``+`` concatenates with a Transform or TransformList; ``inverse()`` inverts each
    transform in reverse order.

    Args:
        transforms: Transform or TransformList objects.

    Raises:
        TypeError: an element is not a Transform.

    Example:
        >>> tl = TransformList([HFlipTransform(10), ResizeTransform(5, 10, 10, 20)])
        >>> tl.apply_coords(np.array([[1.0, 1.0]])).tolist()
        [[18.0, 2.0]]
        >>> len(tl + HFlipTransform(20))
        3
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

    def apply_box(self, box: Any) -> np.ndarray:
        return self._apply("apply_box", box)

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self._apply("apply_polygons", polygons)

    def __getattr__(self, name: str) -> Any:
        # Data types added with Transform.register_type (apply_rotated_box, ...).
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
