"""Semantic-segmentation datasets: images paired with label maps by relative path.

:func:`load_sem_seg` follows detectron2's documented rule: every file under ``gt_root`` whose
name ends with ``gt_ext`` is a label map, every file under ``image_root`` ending with
``image_ext`` an image, and the two are matched by their path relative to their root with the
extension removed (``gt/a/b.png`` pairs with ``images/a/b.jpg``). Records hold ``file_name``
and ``sem_seg_file_name``; the mappers read the label map into ``sem_seg``.

Differences from detectron2, on purpose: pairing is always by name (detectron2 zips the two
sorted lists when they have the same length, which mis-pairs files whose names differ);
sub-directories are searched (bounded by :data:`MAX_FILES`); unpaired files are named in the
warning, or raise :class:`SemSegPairingError` with ``strict=True``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from .dataset_catalog import DatasetCatalog
from .format_errors import SemSegPairingError
from .metadata import MetadataCatalog

__all__ = ["MAX_FILES", "load_sem_seg", "register_sem_seg"]

logger = logging.getLogger(__name__)

#: Most files listed under one root (a guard against pointing at a whole file system).
MAX_FILES = 10_000_000
#: How many unpaired files a message names.
_EXAMPLES = 5


def _suffix(ext: str, what: str) -> str:
    """The file-name suffix for ``ext``: ``"png"`` means ``".png"``; a value holding a dot
    (``".png"``, ``"_gtFine_labelTrainIds.png"``) is used as it is."""
    if not isinstance(ext, str) or not ext or "/" in ext or "\x00" in ext:
        raise ValueError(f"{what} must be a non-empty file extension, got {ext!r}")
    return ext if "." in ext else "." + ext


def _list_files(root: str, suffix: str, what: str) -> dict[str, str]:
    """``{relative path without suffix: path}`` of the files under ``root`` ending with
    ``suffix``; symbolic links to directories are not followed (no cycles)."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{what} {root!r} is not a directory")
    found: dict[str, str] = {}
    seen = 0
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                raise SemSegPairingError(
                    f"{what} {root!r} holds more than {MAX_FILES} files; point it at the "
                    "dataset's own directory",
                    **({"gt_root": root} if what == "gt_root" else {"image_root": root}),
                )
            if not name.endswith(suffix) or len(name) == len(suffix) or name.startswith("."):
                continue
            path = os.path.join(directory, name)
            key = os.path.normpath(os.path.relpath(path, root))[: -len(suffix)]
            found[key] = path
    return found


def load_sem_seg(
    gt_root: str | os.PathLike,
    image_root: str | os.PathLike,
    gt_ext: str = "png",
    image_ext: str = "jpg",
    *,
    strict: bool = False,
) -> list[dict[str, Any]]:
    """Pair the images under ``image_root`` with the label maps under ``gt_root``.

    Files are matched by their path relative to their root without the extension. Label maps
    are images whose pixel values are class indices (``ignore_label``, 255 by convention, for
    unlabeled pixels). Neither the images nor the label maps are read here.

    Args:
        gt_root: directory of the label maps.
        image_root: directory of the images.
        gt_ext: extension of the label maps, ``"png"`` or ``".png"``; a value holding a dot
            is a whole suffix (``"_gtFine_labelTrainIds.png"``).
        image_ext: extension of the images, same rules.
        strict: raise :class:`SemSegPairingError` when a file has no partner. By default (as
            detectron2) only the pairs are kept and one warning names the unpaired files, so
            a subset of annotations (e.g. ``val2017_100``) works with the full image folder.

    Returns:
        Records ``{"file_name", "sem_seg_file_name"}`` sorted by their relative path.

    Raises:
        FileNotFoundError: a root is not a directory.
        SemSegPairingError: no label map found, no pair at all, or (``strict``) unpaired
            files; the message names the roots and a few unpaired files.
        ValueError: an extension is empty or holds a ``/``.

    Example:
        >>> records = load_sem_seg("ade/annotations/val", "ade/images/val")  # doctest: +SKIP
        >>> sorted(records[0])  # doctest: +SKIP
        ['file_name', 'sem_seg_file_name']
    """
    gt_root, image_root = os.fspath(gt_root), os.fspath(image_root)
    gt_files = _list_files(gt_root, _suffix(gt_ext, "gt_ext"), "gt_root")
    image_files = _list_files(image_root, _suffix(image_ext, "image_ext"), "image_root")
    where = {"gt_root": gt_root, "image_root": image_root}
    if not gt_files:
        raise SemSegPairingError(
            f"no label maps ending with {_suffix(gt_ext, 'gt_ext')!r} under {gt_root!r}",
            **where,
        )
    keys = sorted(gt_files.keys() & image_files.keys())
    unpaired = sorted(
        [gt_files[k] for k in gt_files.keys() - image_files.keys()]
        + [image_files[k] for k in image_files.keys() - gt_files.keys()]
    )
    if unpaired:
        message = (
            f"{len(gt_files) - len(keys)} of {len(gt_files)} label maps under {gt_root!r} have "
            f"no image and {len(image_files) - len(keys)} of {len(image_files)} images under "
            f"{image_root!r} have no label map (files are paired by relative path without the "
            f"extension), e.g. {unpaired[:_EXAMPLES]}"
        )
        if strict or not keys:
            raise SemSegPairingError(message, unpaired=unpaired[:_EXAMPLES], **where)
        logger.warning("%s; using the %d pairs", message, len(keys))
    logger.info("paired %d images with label maps from %s", len(keys), image_root)
    return [{"file_name": image_files[k], "sem_seg_file_name": gt_files[k]} for k in keys]


def register_sem_seg(
    name: str,
    metadata: Mapping[str, Any] | None,
    gt_root: str | os.PathLike,
    image_root: str | os.PathLike,
    gt_ext: str = "png",
    image_ext: str = "jpg",
    *,
    strict: bool = False,
) -> None:
    """Register a semantic-segmentation dataset read by :func:`load_sem_seg` at the first get.

    Sets ``sem_seg_root``, ``image_root``, ``evaluator_type="sem_seg"``, ``ignore_label=255``
    (unless ``metadata`` gives another) and the given ``metadata`` in ``MetadataCatalog``.

    Raises:
        DatasetAlreadyRegisteredError: the name is taken.
        MetadataConflictError: the metadata already holds different values.

    Example:
        >>> register_sem_seg("ade_val", {"stuff_classes": ["wall"]}, "gt", "img")  # doctest: +SKIP
    """
    gt_root, image_root = os.fspath(gt_root), os.fspath(image_root)
    _suffix(gt_ext, "gt_ext"), _suffix(image_ext, "image_ext")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(
            f"metadata of dataset {name!r} must be a mapping, got {type(metadata).__name__}"
        )
    values = {"ignore_label": 255, **dict(metadata or {})}

    def load() -> list[dict[str, Any]]:
        return load_sem_seg(gt_root, image_root, gt_ext, image_ext, strict=strict)

    DatasetCatalog.register(name, load)
    try:
        MetadataCatalog.get(name).set(
            sem_seg_root=gt_root, image_root=image_root, evaluator_type="sem_seg", **values
        )
    except Exception:
        DatasetCatalog.remove(name)
        raise
