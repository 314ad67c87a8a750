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

This module holds the base classes (:class:`Transform`, :class:`NoOpTransform`); the
sequence of transforms :class:`~mappers.transforms.transform_list.TransformList` and the
built-in transforms (:mod:`mappers.transforms.transforms_builtin`) live in their own
modules and are re-exported here. Two capabilities
serve the mappers' fast paths and live in the classes themselves:

* ``output_size(height, width)``: the image size a transform produces from a given input
  size, without touching pixels (None when it cannot tell), so that augmentations reading
  only the image's shape can be drawn before decoding
  (:meth:`~mappers.transforms.AugmentationList.plan`);
* ``apply_box``: axis-aligned transforms (flips, resize, crop, pad) move the box edges in a
  few vectorized numpy operations, bit-identical to the generic path through the corners.

Example:
    >>> import numpy as np
    >>> t = HFlipTransform(400)
    >>> t.apply_box(np.array([[10, 10, 200, 300]])).tolist()
    [[200.0, 10.0, 390.0, 300.0]]
"""

from __future__ import annotations

import inspect
import pprint
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from catalog.errors import CatmapError

from .box_edges import order_box_edges

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
    "GeometryPreservingTransform",
    "TransformError",
]


class TransformError(CatmapError, ValueError):
    """A transform was given input it cannot handle (wrong image size, malformed coordinates)."""


def check_input_size(transform: Any, array: np.ndarray, what: str) -> None:
    """Raise unless ``array`` (an image or segmentation map) is ``transform.h x transform.w``.

    Raises:
        TransformError: names the transform, ``what`` it got and both sizes.
    """
    if array.shape[:2] != (transform.h, transform.w):
        raise TransformError(
            f"{type(transform).__name__} expects an {what} of size (h, w) = "
            f"({transform.h}, {transform.w}), got shape {tuple(array.shape)}"
        )


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


def _as_box_array(box: Any) -> np.ndarray:
    """``box`` as an Nx4 float array (a single box gives 1x4; integers become float64).

    The array may be the caller's own (not copied): callers must not modify it in place.

    Raises:
        TransformError: the input is not Nx4 (nor empty).
    """
    arr = np.asarray(box)
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    if arr.ndim == 1 and arr.shape[0] == 4:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != 4:
        if arr.size == 0:
            return arr.reshape(0, 4)
        raise TransformError(f"boxes must be an Nx4 XYXY array, got shape {arr.shape}")
    return arr


def _apply_box_by_edges(tfm: Any, box: Any) -> np.ndarray:
    """``apply_box`` of an axis-aligned transform: a copy, its ``move_box_edges``, ordered."""
    arr = _as_box_array(box)
    if len(arr) == 0:
        return arr
    moved = arr.copy()
    tfm.move_box_edges(moved)
    return order_box_edges(moved)


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
        arr = _as_box_array(box)
        if len(arr) == 0:
            return arr
        corners = arr[:, [0, 1, 2, 1, 0, 3, 2, 3]].reshape(-1, 2)
        corners = self.apply_coords(corners).reshape(-1, 4, 2)
        return np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Transform a list of polygons, each an Nx2 array of (x, y)."""
        return [self.apply_coords(p) for p in polygons]

    def apply_rotated_box(self, rotated_boxes: Any) -> Any:
        """Transform Nx5 rotated boxes (cx, cy, w, h, angle in degrees counter-clockwise).

        Rules per transform type: :mod:`mappers.transforms.rotated_boxes`.
        """
        from .rotated_boxes import transform_rotated_boxes

        return transform_rotated_boxes(self, rotated_boxes)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        """The (h, w) of the image this transform makes from an image of (height, width).

        Computed from sizes alone (no pixels). None when the transform cannot tell, or does
        not apply to an image of that size; planning before decoding then gives up.
        Subclasses that know their geometry override it.
        """
        return None

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


class GeometryPreservingTransform(Transform):
    """A geometry-preserving transform: it changes pixel values only (colour, blending) and
    moves no pixel, so coordinates, boxes, polygons and segmentation maps come back unchanged
    (the very objects given); subclasses define ``apply_image``.

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

    def move_box_edges(self, boxes: np.ndarray) -> None:
        """Nothing moves."""

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> Any:
        return polygons

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        return int(height), int(width)


class NoOpTransform(GeometryPreservingTransform):
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


# TransformList and the built-in transforms are defined in their own modules and re-exported
# here, so that ``from mappers.transforms.transform import HFlipTransform`` keeps working
# (detectron2's module layout). Imported last: those modules subclass the classes above.
from .transform_list import TransformList  # noqa: E402
from .transforms_builtin import (  # noqa: E402
    BlendTransform,
    CropTransform,
    HFlipTransform,
    PadTransform,
    ResizeTransform,
    VFlipTransform,
    _AxisFlipTransform,  # noqa: F401  (rotated_boxes imports it from here)
)
