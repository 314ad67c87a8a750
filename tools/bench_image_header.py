"""Benchmark JPEG header reads: catmap's marker walker vs Pillow's lazy ``Image.open``.

For photo-like JPEGs (scikit-image's sample photos when it is installed, else generated
gradients + noise), with and without a camera-like EXIF block (orientation, a few tags, a
24 KB MakerNote), prints microseconds per call (best of 5 repeats) of:

* ``walker``: :func:`mappers.image_header.parse_jpeg` without the scan check (size + EXIF
  orientation, the EXIF parsed by Pillow's ``Image.Exif``);
* ``walker+scan``: the same plus the structural check of the entropy-coded data;
* ``pillow_open``: ``Image.open`` + ``size`` + ``getexif()`` orientation (no decoding);
* ``decode``: a full simplejpeg decode, for scale.

Usage:
    python tools/bench_image_header.py

Example:
    >>> callable(main)
    True
"""

from __future__ import annotations

import argparse
import io
import timeit

import numpy as np

from tools._bench_common import HelpFormatter

__all__ = ["main", "sample_images"]


def sample_images() -> dict[str, np.ndarray]:
    """Name -> RGB uint8 photo-like image."""
    from PIL import Image

    try:
        from skimage import data as skd
    except ImportError:
        rng = np.random.default_rng(0)
        y, x = np.mgrid[0:480, 0:640]
        base = np.stack([x * 255 // 640, y * 255 // 480, (x * y) % 256], axis=-1)
        photo = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
        return {"gradient+noise 480x640": photo}
    astronaut = skd.astronaut()
    big = np.asarray(Image.fromarray(astronaut).resize((1080, 1080)))
    return {
        "astronaut 512x512": astronaut,
        "coffee 400x600": skd.coffee(),
        "chelsea 300x451": skd.chelsea(),
        "astronaut 1080x1080": big,
    }


def _exif_block(orientation: int) -> bytes:
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "Canon"
    exif[0x0110] = "Canon EOS 5D Mark IV"
    exif[0x0132] = "2021:03:04 12:00:00"
    exif[0x011A] = 72.0
    exif[0x011B] = 72.0
    sub = exif.get_ifd(0x8769)
    sub[0x927C] = bytes(np.random.default_rng(0).integers(0, 256, 24000, dtype=np.uint8))
    sub[0x829A] = 0.004
    sub[0x8827] = 400
    return exif.tobytes()


def _best_us(fn, number: int) -> float:
    return min(timeit.Timer(fn).repeat(5, number)) / number * 1e6


def main(argv: list[str] | None = None) -> None:
    """Print the table (one line per image and EXIF variant)."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter, description=__doc__.split("\n\n")[0]
    )
    parser.parse_args(argv)
    from PIL import Image

    from mappers.image_header import parse_jpeg

    try:
        import simplejpeg
    except ImportError:
        simplejpeg = None
    for name, array in sample_images().items():
        for with_exif in (False, True):
            buf = io.BytesIO()
            extra = {"exif": _exif_block(6)} if with_exif else {}
            Image.fromarray(array).save(buf, "JPEG", quality=90, **extra)
            data = buf.getvalue()

            def pillow_open(data: bytes = data) -> tuple:
                with Image.open(io.BytesIO(data)) as img:
                    return img.size, img.getexif().get(0x0112, 1)

            assert parse_jpeg(data).orientation == pillow_open()[1]
            row = {
                "walker": _best_us(lambda d=data: parse_jpeg(d, check_scans=False), 200),
                "walker+scan": _best_us(lambda d=data: parse_jpeg(d), 200),
                "pillow_open": _best_us(pillow_open, 200),
            }
            if simplejpeg is not None:
                row["decode"] = _best_us(lambda d=data: simplejpeg.decode_jpeg(d), 20)
            cells = "  ".join(f"{k}={v:7.1f}us" for k, v in row.items())
            print(f"{name:22s} exif={str(with_exif):5s} {len(data) // 1024:4d} KiB  {cells}")


if __name__ == "__main__":
    main()
