"""A sequence of transforms applied in order, itself a transform (:class:`TransformList`).

Re-exported by :mod:`mappers.transforms.transform` (detectron2's module layout).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .box_edges import moves_box_edges, order_box_edges
from .transform import GeometryPreservingTransform, Transform, _apply_box_by_edges

__all__ = ["TransformList"]


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
        >>> from mappers.transforms import HFlipTransform, ResizeTransform
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
        """Each transform's ``apply_box`` in turn; for axis-aligned transforms (flips,
        resize, crop, pad, pixel-only ones) the same result from one copy of the boxes,
        moved in place by each and ordered once at the end."""
        if self._axis_aligned():
            return _apply_box_by_edges(self, box)
        return self._apply("apply_box", box)

    def _axis_aligned(self) -> bool:
        transforms = self.transforms
        return (
            bool(transforms)
            and all(moves_box_edges(t) for t in transforms)
            and not all(isinstance(t, GeometryPreservingTransform) for t in transforms)
        )

    def apply_box_inplace(self, boxes: np.ndarray) -> bool:
        """``apply_box`` into ``boxes`` itself, a writable float Nx4 array, when possible.

        Returns:
            True when done (every transform is axis-aligned); False when ``boxes`` was left
            untouched and ``apply_box`` must be used.

        Example:
            >>> from mappers.transforms import NoOpTransform
            >>> boxes = np.array([[1.0, 2.0, 3.0, 4.0]])
            >>> TransformList([NoOpTransform()]).apply_box_inplace(boxes)
            False
        """
        if not self._axis_aligned():
            return False
        self.move_box_edges(boxes)
        order_box_edges(boxes)
        return True

    def move_box_edges(self, boxes: np.ndarray) -> None:
        """Every transform's ``move_box_edges`` in turn (axis-aligned transforms only)."""
        for t in self.transforms:
            t.move_box_edges(boxes)

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self._apply("apply_polygons", polygons)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        """The image size after every transform in turn (None if one cannot tell)."""
        size: tuple[int, int] | None = (int(height), int(width))
        for t in self.transforms:
            size = t.output_size(*size)
            if size is None:
                return None
        return size

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
