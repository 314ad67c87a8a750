"""Reading an image file's bytes, local or remote, with a bound on the bytes read.

``read_image`` takes a local path or a URL. A name with a scheme (``s3://bucket/a.jpg``,
``https://host/a.jpg``, ``gs://``, ``memory://``, ``file://`` ...) is opened through `fsspec
<https://filesystem-spec.readthedocs.io>`_ (the optional extra ``catmap[remote]``, plus the
protocol's own package, e.g. s3fs), as detectron2 opens every path through its PathManager.
Everything else is a local path. Either way at most ``max_bytes`` bytes are read: a larger file
raises :class:`~mappers.errors.ImageTooLargeError` before it is read whole, and the pixel limit
is then checked from the header as for any image.
"""

from __future__ import annotations

import os
import re
from typing import Any

from catalog.errors import missing_dependency
from catalog.validation import check_int, is_int

from .errors import ImageNotFoundError, ImageReadError, ImageTooLargeError

__all__ = ["DEFAULT_MAX_IMAGE_BYTES", "is_remote_path", "read_image_bytes"]

#: Default bound on the bytes of one image file (1 GiB: far above any image within the default
#: pixel limit, 89.5 megapixels, in any common format).
DEFAULT_MAX_IMAGE_BYTES = 1 << 30

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def is_remote_path(path: str) -> bool:
    """True when ``path`` has a URL scheme (``s3://``, ``https://``, ``file://`` ...).

    Example:
        >>> is_remote_path("s3://bucket/a.jpg"), is_remote_path("/data/a.jpg")
        (True, False)
    """
    return _SCHEME.match(path) is not None


def _check_max_bytes(max_bytes: Any) -> int | None:
    return check_int(
        max_bytes, "max_bytes", minimum=1, optional=True, error=ValueError, where="read_image"
    )


def _too_large(path: str, size: int | None, limit: int) -> ImageTooLargeError:
    what = f"{size} bytes" if size is not None else "more bytes"
    return ImageTooLargeError(
        f"image file {path} holds {what} than the {limit}-byte limit (max_bytes); raise the "
        f"limit if the file is a genuine image",
        path,
        limit=limit,
    )


def _read_bounded(handle: Any, path: str, limit: int | None, size: int | None) -> bytes:
    if limit is not None and size is not None and size > limit:
        raise _too_large(path, size, limit)
    # Ask for the known size + 1 (not limit + 1: read(n) allocates n bytes up front, and a
    # 1 GiB allocation per image costs ~0.4 ms); a file that grew is read on in chunks.
    if size is None:
        want = -1 if limit is None else limit + 1
    else:
        want = size + 1 if limit is None else min(size, limit) + 1
    data = handle.read(want)
    if size is not None and len(data) > size:
        parts = [data]
        total = len(data)
        while limit is None or total <= limit:
            chunk = handle.read(1 << 20)
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
        data = b"".join(parts)
    if limit is not None and len(data) > limit:
        raise _too_large(path, None, limit)
    return bytes(data)


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError:
        raise missing_dependency(
            "fsspec", "remote",
            "read_image of a URL or remote path (with the protocol's package, e.g. s3fs)",
        ) from None
    return fsspec


def _read_remote(path: str, limit: int | None) -> bytes:
    fsspec = _fsspec()
    try:
        fs, inner = fsspec.core.url_to_fs(path)
    except (ValueError, ImportError) as exc:  # unknown protocol, or its package is missing
        raise ImageReadError(f"cannot open image {path}: {exc}", path) from exc
    try:
        size = fs.size(inner)
    except FileNotFoundError as exc:
        raise ImageNotFoundError(f"image file not found: {path}", path) from exc
    except (OSError, NotImplementedError, ValueError):
        size = None  # the size is unknown: the bounded read below still holds
    size = int(size) if is_int(size) else None
    try:
        with fs.open(inner, "rb") as handle:
            return _read_bounded(handle, path, limit, size)
    except ImageReadError:
        raise
    except FileNotFoundError as exc:
        raise ImageNotFoundError(f"image file not found: {path}", path) from exc
    except (OSError, ValueError) as exc:
        raise ImageReadError(f"cannot read image file {path}: {exc}", path) from exc


def read_image_bytes(
    file_name: str | os.PathLike[str], max_bytes: Any = DEFAULT_MAX_IMAGE_BYTES
) -> tuple[bytes, str]:
    """The bytes of an image file (a local path or an fsspec URL) and its name for messages.

    Args:
        file_name: a local path, or a URL with a scheme fsspec knows.
        max_bytes: the most bytes to read (None: no bound).

    Returns:
        ``(data, path)``.

    Raises:
        ImageNotFoundError: (a FileNotFoundError) the file does not exist.
        ImageTooLargeError: the file holds more than ``max_bytes`` bytes.
        ImageReadError: (an OSError) the file cannot be read, or the URL's protocol is
            unknown or its package is not installed.
        MissingDependencyError: (an ImportError) a URL, and fsspec is not installed.

    Example:
        >>> import fsspec
        >>> with fsspec.open("memory://doc/a.bin", "wb") as f:
        ...     _ = f.write(b"abc")
        >>> read_image_bytes("memory://doc/a.bin")
        (b'abc', 'memory://doc/a.bin')
    """
    path = os.fspath(file_name)
    if not isinstance(path, str):
        raise TypeError(f"read_image: file_name must be a str or path, got {type(path).__name__}")
    limit = _check_max_bytes(max_bytes)
    if is_remote_path(path):
        return _read_remote(path, limit), path
    try:
        with open(path, "rb") as handle:
            return _read_bounded(handle, path, limit, os.fstat(handle.fileno()).st_size), path
    except ImageReadError:
        raise
    except FileNotFoundError as exc:
        raise ImageNotFoundError(f"image file not found: {path}", path) from exc
    except OSError as exc:
        raise ImageReadError(f"cannot read image file {path}: {exc}", path) from exc
