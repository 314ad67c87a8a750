"""The built-in transforms: flips, resize, crop, pad and blend.

Re-exported by :mod:`mappers.transforms.transform` (and :mod:`mappers.transforms`). The
geometric ones move boxes edge by edge (``apply_box``, vectorized, bit-identical to the
generic corners path of :class:`~mappers.transforms.transform.Transform`) and report their
``output_size`` from sizes alone, which is what planning before decoding needs.

Example:
    >>> import numpy as np
    >>> ResizeTransform(10, 20, 5, 10).output_size(10, 20)
    (5, 10)
    >>> HFlipTransform(20).apply_box(np.array([[1.0, 2.0, 5.0, 6.0]])).tolist()
    [[15.0, 2.0, 19.0, 6.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..polygon_geometry import clip_points, polygon_area
from ._backend import flip_array, normalize_interp, resize_array
from .transform import (
    GeometryPreservingTransform,
    NoOpTransform,
    Transform,
    _apply_box_by_edges,
    _as_float_coords,
    check_input_size,
)

__all__ = [
    "BlendTransform",
    "CropTransform",
    "HFlipTransform",
    "PadTransform",
    "ResizeTransform",
    "VFlipTransform",
]


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

    def move_box_edges(self, boxes: np.ndarray) -> None:
        """Mirror the x (or y) columns of float Nx4 ``boxes`` in place (order not kept)."""
        cols = boxes[:, 0::2] if self._horizontal else boxes[:, 1::2]
        np.subtract(getattr(self, self._extent_attr), cols, out=cols)

    def apply_box(self, box: Any) -> np.ndarray:
        return _apply_box_by_edges(self, box)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        return int(height), int(width)

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

    def apply_image(self, img: np.ndarray, interp: int | str | None = None) -> np.ndarray:
        check_input_size(self, img, "image")
        return resize_array(
            img, self.new_h, self.new_w, interp if interp is not None else self.interp
        )

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        check_input_size(self, segmentation, "segmentation map")
        return resize_array(segmentation, self.new_h, self.new_w, "nearest")

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        out[:, 0] *= self.new_w / self.w
        out[:, 1] *= self.new_h / self.h
        return out

    def move_box_edges(self, boxes: np.ndarray) -> None:
        """Scale the columns of float Nx4 ``boxes`` in place."""
        boxes[:, 0::2] *= self.new_w / self.w
        boxes[:, 1::2] *= self.new_h / self.h

    def apply_box(self, box: Any) -> np.ndarray:
        return _apply_box_by_edges(self, box)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        """(new_h, new_w) for an input of exactly (h, w); None for any other size."""
        if (int(height), int(width)) != (self.h, self.w):
            return None
        return self.new_h, self.new_w

    def inverse(self) -> Transform:
        return ResizeTransform(self.new_h, self.new_w, self.h, self.w, self.interp)


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

    def move_box_edges(self, boxes: np.ndarray) -> None:
        """Shift the columns of float Nx4 ``boxes`` in place."""
        boxes[:, 0::2] -= self.x0
        boxes[:, 1::2] -= self.y0

    def apply_box(self, box: Any) -> np.ndarray:
        return _apply_box_by_edges(self, box)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        """The window's (h, w) when it lies inside the image; else None."""
        if self.x0 + self.w > int(width) or self.y0 + self.h > int(height):
            return None
        return self.h, self.w

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        x1, y1 = self.x0 + self.w, self.y0 + self.h
        result = []
        for polygon in polygons:
            pts = _as_float_coords(polygon, "polygon")
            clipped = clip_points(pts, self.x0, self.y0, x1, y1)
            if len(clipped) < 3 or (clipped is not pts and polygon_area(clipped.reshape(-1)) <= 0):
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
        # An instance bitmask (bool) is never part of the padding, whatever seg_pad_value says
        # (a semantic map's "ignore" label).
        fill = False if segmentation.dtype == bool else self.seg_pad_value
        return self._pad(segmentation, fill)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        out[:, 0] += self.x0
        out[:, 1] += self.y0
        return out

    def move_box_edges(self, boxes: np.ndarray) -> None:
        """Shift the columns of float Nx4 ``boxes`` in place."""
        boxes[:, 0::2] += self.x0
        boxes[:, 1::2] += self.y0

    def apply_box(self, box: Any) -> np.ndarray:
        return _apply_box_by_edges(self, box)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        return int(height) + self.y0 + self.y1, int(width) + self.x0 + self.x1

    def inverse(self) -> Transform:
        if self.orig_w is None or self.orig_h is None:
            raise NotImplementedError(
                "PadTransform.inverse() needs orig_w and orig_h (the size before padding)"
            )
        new_w = self.orig_w + self.x0 + self.x1
        new_h = self.orig_h + self.y0 + self.y1
        return CropTransform(self.x0, self.y0, self.orig_w, self.orig_h, new_w, new_h)


class BlendTransform(GeometryPreservingTransform):
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
