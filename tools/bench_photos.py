"""Photo-like benchmark JPEGs: 640x480 mosaics of the photographs shipped with scikit-image.

Decode cost grows with the detail a JPEG holds, so a mapper's overhead relative to decoding
is only meaningful on images that compress like real photos. Flat synthetic shapes decode
faster than photos of the same byte size and flatter the overhead figures.

Each image is a 3x2 mosaic of crops (random position, scale and mirror) of scikit-image's
color photographs (astronaut, coffee, chelsea, rocket, ...), with mild sensor noise, saved
as JPEG quality 93 (4:2:0): about 100 KiB each, like typical 640x480 photos (COCO's average
is about 160 KB at a larger size). scikit-image is only needed for benchmarking
(``pip install scikit-image``); without it :func:`make_records` falls back to synthetic
images (gradients, shapes and grain, calibrated to about 150 KB) and says so in
:func:`image_source`.

Example:
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:  # doctest: +SKIP
    ...     records = make_records(pathlib.Path(tmp), 4)
    >>> records[0]["height"], records[0]["width"], len(records[0]["annotations"])  # doctest: +SKIP
    (480, 640, 7)
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["HEIGHT", "WIDTH", "PHOTOS", "image_source", "make_records", "photo_mosaic"]

HEIGHT, WIDTH = 480, 640

#: scikit-image color photographs used as mosaic sources.
PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "cat",
)

JPEG_QUALITY = 93
NOISE_SIGMA = 2.0


@lru_cache(maxsize=1)
def _photos() -> tuple[np.ndarray, ...] | None:
    try:
        import skimage.data
    except ImportError:
        return None
    out = []
    for name in PHOTOS:
        try:
            image = np.asarray(getattr(skimage.data, name)())
        except Exception:  # a photo this scikit-image version lacks or cannot fetch
            continue
        if image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8:
            out.append(image)
    return tuple(out) or None


def image_source() -> str:
    """"photos" when scikit-image's photographs are available, else "synthetic"."""
    return "photos" if _photos() is not None else "synthetic"


def photo_mosaic(rng: np.random.Generator) -> np.ndarray:
    """A 480x640x3 uint8 mosaic of photo crops (needs scikit-image).

    Raises:
        ImportError: scikit-image is not installed.
    """
    from PIL import Image

    photos = _photos()
    if photos is None:
        raise ImportError("photo_mosaic needs scikit-image: pip install scikit-image")
    out = np.empty((HEIGHT, WIDTH, 3), np.uint8)
    cols = [0, *sorted(int(c) for c in rng.integers(120, 520, 2)), WIDTH]
    rows = [0, int(rng.integers(140, 340)), HEIGHT]
    for r in range(2):
        for c in range(3):
            y0, y1, x0, x1 = rows[r], rows[r + 1], cols[c], cols[c + 1]
            if y1 <= y0 or x1 <= x0:
                continue
            photo = photos[int(rng.integers(len(photos)))]
            h, w = y1 - y0, x1 - x0
            scale = rng.uniform(1.0, 2.0)
            ch, cw = min(photo.shape[0], int(h * scale)), min(photo.shape[1], int(w * scale))
            cy = int(rng.integers(0, photo.shape[0] - ch + 1))
            cx = int(rng.integers(0, photo.shape[1] - cw + 1))
            crop = Image.fromarray(np.ascontiguousarray(photo[cy : cy + ch, cx : cx + cw]))
            tile = np.asarray(crop.resize((w, h), Image.BILINEAR))
            out[y0:y1, x0:x1] = tile[:, ::-1] if rng.random() < 0.5 else tile
    noisy = out + rng.normal(0.0, NOISE_SIGMA, out.shape)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def synthetic_image(rng: np.random.Generator) -> np.ndarray:
    """Gradients, filled shapes and multi-scale grain (about 150 KB as a quality-90 JPEG)."""
    from PIL import Image, ImageDraw, ImageFilter

    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    base = np.stack(
        [
            127 + 100 * np.sin(x / rng.uniform(40, 120) + rng.uniform(0, 6)),
            127 + 100 * np.cos(y / rng.uniform(40, 120) + rng.uniform(0, 6)),
            127 + 100 * np.sin((x + y) / rng.uniform(60, 200)),
        ],
        axis=-1,
    )
    image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(40):
        x0, y0 = int(rng.integers(0, WIDTH - 40)), int(rng.integers(0, HEIGHT - 40))
        x1, y1 = x0 + int(rng.integers(5, 150)), y0 + int(rng.integers(5, 150))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=color)
    image = image.filter(ImageFilter.GaussianBlur(0.8))
    grain = np.zeros((HEIGHT, WIDTH), dtype=np.float32)
    for step in (1, 2, 4):
        noise = rng.integers(0, 256, (HEIGHT // step, WIDTH // step), dtype=np.uint8)
        up = Image.fromarray(noise).resize((WIDTH, HEIGHT), Image.BILINEAR)
        grain += np.asarray(up, dtype=np.float32) - 127.0
    array = np.asarray(image, dtype=np.float32) + grain[:, :, None] * (1.7 * 40 / 127 / 3)
    return np.clip(array, 0, 255).astype(np.uint8)


def _annotations(rng: np.random.Generator) -> list[dict[str, Any]]:
    annotations = []
    for _ in range(7):
        w, h = rng.uniform(20, 200), rng.uniform(20, 200)
        x0, y0 = rng.uniform(0, WIDTH - w), rng.uniform(0, HEIGHT - h)
        polygon = [x0, y0, x0 + w, y0, x0 + w, y0 + h, x0 + w / 2, y0 + h * 1.2, x0, y0 + h]
        polygon = [float(min(v, WIDTH if k % 2 == 0 else HEIGHT)) for k, v in enumerate(polygon)]
        annotations.append(
            {
                "bbox": [x0, y0, w, h],
                "bbox_mode": 1,
                "category_id": int(rng.integers(0, 80)),
                "segmentation": [polygon],
                "iscrowd": 0,
            }
        )
    return annotations


def make_records(
    directory: Path, count: int, seed: int = 0, source: str | None = None
) -> list[dict[str, Any]]:
    """Write ``count`` JPEGs into ``directory``; records with 7 annotated objects each.

    Args:
        directory: an existing folder.
        count: number of images.
        seed: the generator seed (same seed, same files).
        source: "photos", "synthetic", or None for :func:`image_source`.
    """
    from PIL import Image

    source = image_source() if source is None else source
    if source not in ("photos", "synthetic"):
        raise ValueError(f"make_records: source must be 'photos' or 'synthetic', got {source!r}")
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        path = Path(directory) / f"img_{i:05d}.jpg"
        if source == "photos":
            Image.fromarray(photo_mosaic(rng)).save(path, "JPEG", quality=JPEG_QUALITY)
        else:
            Image.fromarray(synthetic_image(rng)).save(path, "JPEG", quality=90)
        records.append(
            {
                "file_name": str(path),
                "height": HEIGHT,
                "width": WIDTH,
                "image_id": i,
                "annotations": _annotations(rng),
            }
        )
    return records
