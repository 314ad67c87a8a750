"""Drawing the shapes dataset's images: shape outlines, backgrounds, placement, colours.

Used by :mod:`tools.shapes_dataset`, which writes the images and their COCO annotations (and
re-exports :data:`SHAPE_CLASSES` and :func:`shape_polygon`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from catalog._common import numpy_generator

__all__ = ["SHAPE_CLASSES", "polygon_area", "render_image", "shape_polygon"]

#: Class names, in the order of their (sorted) COCO category ids.
SHAPE_CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "hexagon", "star", "cross")

_MAX_PLACEMENT_TRIES = 40


def _regular_polygon(n: int, radius: float, rotation: float) -> np.ndarray:
    angles = rotation + np.arange(n) * (2.0 * math.pi / n)
    return np.stack([np.cos(angles), np.sin(angles)], axis=1) * radius


def shape_polygon(
    shape: str, center: tuple[float, float], radius: float, rotation: float
) -> np.ndarray:
    """Return the outline of a shape as an (N, 2) float array of (x, y) vertices.

    Args:
        shape: one of :data:`SHAPE_CLASSES`.
        center: (x, y) of the shape's centre in pixels.
        radius: radius of the circle the shape fits in.
        rotation: rotation in radians.

    Raises:
        ValueError: the shape name is unknown or the radius is not positive.

    Example:
        >>> shape_polygon("square", (10, 10), 5, 0.0).shape
        (4, 2)
    """
    if radius <= 0:
        raise ValueError(f"shape radius must be positive, got {radius}")
    if shape == "circle":
        points = _regular_polygon(32, radius, rotation)
    elif shape == "square":
        points = _regular_polygon(4, radius, rotation + math.pi / 4)
    elif shape == "triangle":
        points = _regular_polygon(3, radius, rotation - math.pi / 2)
    elif shape == "hexagon":
        points = _regular_polygon(6, radius, rotation)
    elif shape == "star":
        outer = _regular_polygon(5, radius, rotation - math.pi / 2)
        inner = _regular_polygon(5, radius * 0.45, rotation - math.pi / 2 + math.pi / 5)
        points = np.empty((10, 2))
        points[0::2], points[1::2] = outer, inner
    elif shape == "cross":
        a, b = radius * 0.32, radius * 0.95
        base = np.array(
            [[-a, -b], [a, -b], [a, -a], [b, -a], [b, a], [a, a],
             [a, b], [-a, b], [-a, a], [-b, a], [-b, -a], [-a, -a]]
        )  # fmt: skip
        c, s = math.cos(rotation), math.sin(rotation)
        points = base @ np.array([[c, s], [-s, c]])
    else:
        raise ValueError(f"unknown shape {shape!r}; expected one of {', '.join(SHAPE_CLASSES)}")
    return points + np.asarray(center, dtype=np.float64)


def polygon_area(points: np.ndarray) -> float:
    """The area enclosed by a simple polygon, an (N, 2) array of (x, y) vertices.

    Example:
        >>> polygon_area(np.array([[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [0.0, 3.0]]))
        12.0
    """
    x, y = points[:, 0], points[:, 1]
    return float(0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _hsv_to_rgb(h: float, s: float, v: float) -> np.ndarray:
    i = int(h * 6.0) % 6
    f = h * 6.0 - int(h * 6.0)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    rgb = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i]
    return np.array(rgb) * 255.0


def _background(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A muted background: gradient, smooth noise, stripes or checkerboard (HxWx3 float32)."""
    hue = rng.random()
    c0 = _hsv_to_rgb(hue, rng.uniform(0.05, 0.35), rng.uniform(0.35, 0.85)).astype(np.float32)
    c1 = _hsv_to_rgb(
        (hue + rng.uniform(0.1, 0.5)) % 1.0, rng.uniform(0.05, 0.35), rng.uniform(0.35, 0.85)
    ).astype(np.float32)
    xs = np.arange(width, dtype=np.float32)[None, :]
    ys = np.arange(height, dtype=np.float32)[:, None]
    kind = int(rng.integers(4))
    if kind == 0:  # linear gradient in a random direction
        angle = rng.uniform(0, 2 * math.pi)
        proj = xs * math.cos(angle) + ys * math.sin(angle)
        t = (proj - proj.min()) / max(float(np.ptp(proj)), 1e-6)
    elif kind == 1:  # smooth value noise: a coarse random grid, bilinearly upsampled
        gh, gw = int(rng.integers(3, 7)), int(rng.integers(3, 7))
        grid = rng.random((gh + 1, gw + 1)).astype(np.float32)
        gy, gx = ys * (gh / height), xs * (gw / width)
        y0, x0 = gy.astype(np.int64), gx.astype(np.int64)
        fy, fx = gy - y0, gx - x0
        y1, x1 = np.minimum(y0 + 1, gh), np.minimum(x0 + 1, gw)
        top = grid[y0, x0] * (1 - fx) + grid[y0, x1] * fx
        bottom = grid[y1, x0] * (1 - fx) + grid[y1, x1] * fx
        t = top * (1 - fy) + bottom * fy
    elif kind == 2:  # soft stripes
        angle = rng.uniform(0, math.pi)
        period = rng.uniform(18, 60)
        proj = xs * math.cos(angle) + ys * math.sin(angle)
        t = 0.5 + 0.5 * np.sin(proj * (2 * math.pi / period))
    else:  # low-contrast checkerboard
        cell = int(rng.integers(16, 48))
        t = (((xs // cell) + (ys // cell)) % 2) * 0.6 + 0.2
    t = np.broadcast_to(t, (height, width)).astype(np.float32)
    image = c0 + (c1 - c0) * t[..., None]
    image += rng.standard_normal(image.shape, dtype=np.float32) * 4.0  # a little sensor noise
    return image


def _place_shapes(
    rng: np.random.Generator, width: int, height: int, max_shapes: int, weights: np.ndarray
) -> list[tuple[int, np.ndarray]]:
    """Choose classes and non-overlapping positions; returns (class index, polygon) pairs."""
    count = int(rng.integers(1, max_shapes + 1))
    short = min(width, height)
    placed: list[tuple[float, float, float]] = []
    shapes: list[tuple[int, np.ndarray]] = []
    for _ in range(count):
        cls = int(rng.choice(len(weights), p=weights))
        for _try in range(_MAX_PLACEMENT_TRIES):
            radius = float(rng.uniform(0.07, 0.2) * short)
            cx = float(rng.uniform(radius + 2, width - radius - 2))
            cy = float(rng.uniform(radius + 2, height - radius - 2))
            if all(math.hypot(cx - px, cy - py) > radius + pr + 3 for px, py, pr in placed):
                placed.append((cx, cy, radius))
                rotation = rng.uniform(0, 2 * math.pi)
                polygon = shape_polygon(SHAPE_CLASSES[cls], (cx, cy), radius, rotation)
                shapes.append((cls, np.round(polygon, 2)))
                break
    return shapes


def _shape_color(rng: np.random.Generator, background_mean: np.ndarray) -> np.ndarray:
    """A vivid colour that stands out from the background around the shape."""
    for _ in range(8):
        color = _hsv_to_rgb(rng.random(), rng.uniform(0.65, 1.0), rng.uniform(0.6, 1.0))
        if np.abs(color - background_mean).sum() > 180:
            return color
    return 255.0 - background_mean


def render_image(
    index: int, seed: int, sizes: Sequence[tuple[int, int]], max_shapes: int, weights: np.ndarray
):
    """Render image ``index``: returns (PIL image, list of (class index, polygon)).

    The image is drawn from its own generator, seeded from ``(seed, index)``: the same
    arguments give the same image in any process and order. ``sizes`` are (width, height)
    choices; ``weights`` the probability of each class in :data:`SHAPE_CLASSES`.

    Example:
        >>> image, shapes = render_image(0, 0, [(64, 48)], 2, np.full(6, 1 / 6))
        >>> image.size, 1 <= len(shapes) <= 2
        ((64, 48), True)
    """
    from PIL import Image, ImageDraw

    rng = numpy_generator(seed, index)
    width, height = sizes[int(rng.integers(len(sizes)))]
    background = _background(rng, width, height)
    shapes = _place_shapes(rng, width, height, max_shapes, weights)
    image = Image.fromarray(np.clip(background, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for _cls, polygon in shapes:
        x0, y0 = np.floor(polygon.min(axis=0)).astype(int)
        x1, y1 = np.ceil(polygon.max(axis=0)).astype(int)
        local = background[max(y0, 0) : y1 + 1, max(x0, 0) : x1 + 1].reshape(-1, 3).mean(axis=0)
        fill = tuple(int(c) for c in _shape_color(rng, local))
        outline = tuple(int(c * 0.55) for c in fill)
        draw.polygon([tuple(p) for p in polygon.tolist()], fill=fill, outline=outline)
    return image, shapes
