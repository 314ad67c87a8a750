"""Boxes through axis-aligned transforms, edge by edge (vectorized, in place).

An axis-aligned transform (flip, resize, crop, pad; pixel-only transforms trivially) maps
each box edge to an edge, so it can move the x0, y0, x1, y1 columns of all boxes at once
(its ``move_box_edges``) and the boxes are then put back in order
(:func:`order_box_edges`). This equals the generic path through the 4 corners value for
value, and a list of such transforms needs one copy of the boxes and one ordering.

Example:
    >>> import numpy as np
    >>> order_box_edges(np.array([[5.0, 1.0, 2.0, 3.0]])).tolist()
    [[2.0, 1.0, 5.0, 3.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["moves_box_edges", "order_box_edges"]


def order_box_edges(moved: np.ndarray) -> np.ndarray:
    """Boxes around edges moved coordinate by coordinate (``moved`` is reused as the output).

    ``moved`` holds each box's x0, y0, x1, y1 after an axis-aligned map (a flip may have
    swapped which edge is smaller). The extremes of a box's 4 transformed corners are its
    transformed edges, so this equals the generic corners path value for value (NaN
    included: a NaN coordinate gives NaN on both sides).
    """
    low = np.minimum(moved[:, :2], moved[:, 2:])
    np.maximum(moved[:, :2], moved[:, 2:], out=moved[:, 2:])
    moved[:, :2] = low
    return moved


_EDGE_MOVERS: dict[type, bool] = {}


def moves_box_edges(tfm: Any) -> bool:
    """Whether ``tfm.apply_box`` is its ``move_box_edges`` plus ordering (cached per type).

    True when the class defining ``move_box_edges`` is the one defining ``apply_box`` or a
    subclass of it (a subclass overriding ``apply_box`` alone keeps its own rule).
    """
    cls = type(tfm)
    known = _EDGE_MOVERS.get(cls)
    if known is None:
        mro = cls.__mro__
        mover = next((k for k in mro if "move_box_edges" in k.__dict__), None)
        boxer = next(k for k in mro if "apply_box" in k.__dict__)
        known = mover is not None and mro.index(mover) <= mro.index(boxer)
        if len(_EDGE_MOVERS) < 1024:
            _EDGE_MOVERS[cls] = known
    return known
