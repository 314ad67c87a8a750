"""DatasetMapper: record dict -> model input (image tensor + Instances), detectron2-compatible.

The steps (also available one by one as Compose steps in :mod:`mappers.compose`):

1. copy the record (the caller's dict is never modified);
2. read the image (:func:`~mappers.image_io.read_image`, fast JPEG path, EXIF orientation)
   and check its size against the record's ``height`` / ``width``;
3. apply the augmentations to the image (and ``sem_seg`` when the record has a
   ``sem_seg_file_name``);
4. return ``image`` as a CHW uint8 tensor, plus in training ``instances`` built from the
   non-crowd annotations transformed the same way (empty instances filtered out).

The image tensor is a CHW *view* of the HWC array the augmentations produced (strides
``(1, W*C, C)``), not a copy: a contiguous CHW copy costs about as much as the resize. Models
normalize the image first, which produces a new contiguous tensor anyway; call
``.contiguous()`` if you need one.

Threads: torch runs one thread in DataLoader workers by itself. OpenCV is set to one thread
when catmap first imports it and again by the loader builders before workers start (see
``mappers.opencv_threads``): calling into OpenCV's pool inside a forked worker deadlocks when
the parent had already used it.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from catalog.errors import RecordFormatError

from . import transforms as T
from ._fast_path import (
    OwnedImageAugInput,
    Plan,
    apply_planned,
    box_only_instances,
    is_plannable,
    plan_transforms,
)
from .annotations import (
    annotations_to_instances,
    filter_empty_instances,
    transform_instance_annotations,
)
from .errors import ImageReadError, ImageSizeMismatchError
from .image_io import read_image
from .instances import Instances
from .random_state import get_generator
from .record_size import record_image_size

__all__ = [
    "DatasetMapper",
    "annotations_to_training_instances",
    "check_image_size",
    "copy_record",
    "image_to_tensor",
    "read_record_image",
    "read_segmentation",
]

logger = logging.getLogger(__name__)

_MASK_FORMATS = ("polygon", "bitmask")


def copy_record(record: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a record (a pickle round trip, several times faster than deepcopy).

    Example:
        >>> r = {"annotations": [{"bbox": [0, 0, 1, 1]}]}
        >>> c = copy_record(r); c["annotations"][0]["bbox"][0] = 5
        >>> r["annotations"][0]["bbox"][0]
        0
    """
    try:
        return pickle.loads(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # something in the record does not pickle: fall back to deepcopy
        return copy.deepcopy(record)


def _copy_for_mapping(record: dict[str, Any]) -> dict[str, Any]:
    """The record and its annotation dicts copied; nested values shared.

    Enough to leave the caller's record untouched: the mapping steps only set or pop keys of
    the record and of its annotation dicts, and replace (never modify in place) the values
    they transform. Much cheaper than a deep copy of every polygon.
    """
    out = dict(record)
    annotations = out.get("annotations")
    if isinstance(annotations, list):
        out["annotations"] = [dict(a) if isinstance(a, dict) else a for a in annotations]
    return out


def _record_name(record: dict[str, Any]) -> str:
    for key in ("file_name", "image_id"):
        if record.get(key) is not None:
            return f"{key}={record[key]!r}"
    return "record"


def check_image_size(record: dict[str, Any], image: np.ndarray) -> None:
    """Check ``image``'s size against the record's ``height``/``width``; fill them if absent.

    Raises:
        ImageSizeMismatchError: (a ValueError) the sizes differ; names the file and both sizes.

    Example:
        >>> rec = {"file_name": "a.jpg"}
        >>> check_image_size(rec, np.zeros((4, 6, 3), np.uint8)); (rec["height"], rec["width"])
        (4, 6)
    """
    h, w = int(image.shape[0]), int(image.shape[1])
    expected_h, expected_w = record.get("height"), record.get("width")
    expected = record_image_size(record)  # RecordFormatError for a malformed size
    if expected is not None:
        if expected != (h, w):
            raise ImageSizeMismatchError(
                f"image {record.get('file_name')!r} (image_id={record.get('image_id')!r}) has "
                f"size (h={h}, w={w}) but its record says (h={expected_h}, w={expected_w}); "
                "fix the annotation file or the image (EXIF orientation is applied)"
            )
    if expected_h is None:
        record["height"] = h
    if expected_w is None:
        record["width"] = w


def read_segmentation(file_name: str | os.PathLike[str]) -> np.ndarray:
    """Read a semantic segmentation map (label ids) as an HxW integer array.

    Palette ("P") and grayscale PNGs give their stored values (palette indices are the labels),
    16/32-bit images give int32. A color image is an error: labels would be ambiguous.

    Raises:
        ImageNotFoundError / ImageReadError: missing or undecodable file (names the path).
        ImageTooLargeError: over the pixel limit (checked before decoding).
    """
    from PIL import Image

    from .errors import ImageNotFoundError, ImageTooLargeError
    from .image_header import check_pixel_limit

    path = os.fspath(file_name)
    try:
        with Image.open(path) as img:
            check_pixel_limit(img.size[1], img.size[0], path)  # before any pixel is decoded
            img.load()
            mode = img.mode
            if mode in ("L", "P"):
                return np.array(img, dtype=np.uint8)
            if mode in ("I", "I;16", "I;16B", "I;16L"):
                return np.array(img, dtype=np.int32)
    except FileNotFoundError as exc:
        raise ImageNotFoundError(f"segmentation file not found: {path}", path) from exc
    except ImageReadError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(f"segmentation file {path}: {exc}", path) from exc
    except OSError as exc:
        raise ImageReadError(f"cannot read segmentation file {path}: {exc}", path) from exc
    raise ImageReadError(
        f"segmentation file {path} has mode {mode!r}; expected a single-channel label map "
        "(L, P, I or I;16)",
        path,
    )


def read_record_image(
    record: dict[str, Any],
    image_format: str = "RGB",
    *,
    decoder: str | None = None,
    min_size: tuple[int, int] | None = None,
) -> np.ndarray:
    """Read ``record["file_name"]`` and check its size (filling height/width when absent).

    With ``min_size`` a JPEG may come back decoded at 1/2, 1/4 or 1/8 of the record's size
    (see :func:`~mappers.image_io.read_image`): the header's full size is checked against
    the record before decoding, and the decoded size must be exactly the reduced one.

    Raises:
        RecordFormatError: the record has no ``file_name``, or a malformed height/width.
        ImageReadError: the image cannot be read.
        ImageSizeMismatchError: the image's size differs from the record's.
    """
    return _read_sized_image(record, record_image_size(record), image_format, decoder, min_size)


def _read_sized_image(
    record: dict[str, Any],
    expected: tuple[int, int] | None,
    image_format: str,
    decoder: str | None,
    min_size: tuple[int, int] | None,
) -> np.ndarray:
    """:func:`read_record_image` with the record's size already checked (``expected``)."""
    file_name = record.get("file_name")
    if file_name is None:
        raise RecordFormatError(
            f"record ({_record_name(record)}) has no 'file_name' key; keys: {sorted(record)}"
        )
    image = read_image(
        file_name, image_format, min_size=min_size, decoder=decoder, expected_size=expected
    )
    if expected is None:  # read_image checked a known size (full, or exactly reduced)
        check_image_size(record, image)  # fills height/width from the image
    return image


def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """An HWC (or HW) numpy image as a CHW tensor sharing its memory (no copy when possible).

    Example:
        >>> image_to_tensor(np.zeros((4, 6, 3), np.uint8)).shape
        torch.Size([3, 4, 6])
    """
    if image.ndim == 2:
        image = image[:, :, None]
    flags = image.flags
    if not (flags.c_contiguous and flags.writeable) and (  # the usual case: no checks
        any(s < 0 for s in image.strides) or not flags.writeable
    ):
        image = np.ascontiguousarray(image) if flags.writeable else image.copy()
    # numpy's transpose is a free view; torch keeps its strides (cheaper than Tensor.permute)
    return torch.from_numpy(image.transpose(2, 0, 1))


def _boxes_from_masks(masks: Any, count: int) -> torch.Tensor:
    """XYXY boxes tightly enclosing polygon lists or an NxHxW bitmask tensor."""
    out = torch.zeros((count, 4), dtype=torch.float32)
    if isinstance(masks, torch.Tensor):
        for i in range(count):
            ys, xs = torch.nonzero(masks[i], as_tuple=True)
            if len(xs):
                out[i] = torch.tensor(
                    [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32
                )
        return out
    for i, polygons in enumerate(masks):
        coords = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in polygons]
        coords = [c for c in coords if len(c)]
        if coords:
            pts = np.concatenate(coords)
            out[i] = torch.tensor(
                [pts[:, 0].min(), pts[:, 1].min(), pts[:, 0].max(), pts[:, 1].max()],
                dtype=torch.float32,
            )
    return out


def annotations_to_training_instances(
    annotations: Sequence[dict[str, Any]],
    transforms: T.Transform,
    image_size: tuple[int, int],
    *,
    use_instance_mask: bool = False,
    use_keypoint: bool = False,
    instance_mask_format: str = "polygon",
    keypoint_hflip_indices: Sequence[int] | None = None,
    recompute_boxes: bool = False,
    filter_empty: bool = True,
    file_name: str | None = None,
) -> Instances:
    """Transform the non-crowd annotations of one image and build its training Instances.

    Segmentation is dropped unless ``use_instance_mask``, keypoints unless ``use_keypoint``.
    ``recompute_boxes`` replaces the boxes by the tight boxes of the transformed masks (useful
    after a crop). Empty instances are filtered out unless ``filter_empty=False``.
    ``file_name`` is named in error messages.
    """
    if not use_instance_mask and not use_keypoint:
        fast = box_only_instances(annotations, transforms, image_size, filter_empty)
        if fast is not None:
            return fast
    kept = []
    source = f"file {file_name!r}" if file_name is not None else "image"
    for index, anno in enumerate(annotations):
        if anno.get("iscrowd", 0) != 0:
            continue
        if not use_instance_mask:
            anno.pop("segmentation", None)
        if not use_keypoint:
            anno.pop("keypoints", None)
        kept.append(
            transform_instance_annotations(
                anno,
                transforms,
                image_size,
                keypoint_hflip_indices=keypoint_hflip_indices,
                context=f"{source}, annotation {index}",
            )
        )
    instances = annotations_to_instances(
        kept, image_size, mask_format=instance_mask_format, context=source
    )
    if recompute_boxes and instances.has("gt_masks"):
        instances.gt_boxes = _boxes_from_masks(instances.gt_masks, len(instances))
    if filter_empty:
        instances = filter_empty_instances(instances)
    return instances


class _InstanceOptions:
    """The options that turn a record's annotations into training Instances.

    Shared by :class:`DatasetMapper` and the Compose step ``AnnotationsToInstances``, which
    validate the options themselves (with their own messages) and then store them with
    :meth:`_store_instance_options`.

    Example:
        >>> opts = _InstanceOptions()
        >>> opts._store_instance_options(False, False, "polygon", None, False)
        >>> len(opts._training_instances([], T.NoOpTransform(), (4, 6), file_name=None))
        0
    """

    use_instance_mask: bool
    use_keypoint: bool
    instance_mask_format: str
    keypoint_hflip_indices: np.ndarray | None
    recompute_boxes: bool

    def _store_instance_options(
        self,
        use_instance_mask: bool,
        use_keypoint: bool,
        instance_mask_format: str,
        keypoint_hflip_indices: Sequence[int] | None,
        recompute_boxes: bool,
    ) -> None:
        """Set the option attributes (booleans as bool, flip indices as a numpy array)."""
        self.use_instance_mask = bool(use_instance_mask)
        self.use_keypoint = bool(use_keypoint)
        self.instance_mask_format = instance_mask_format
        self.keypoint_hflip_indices = (
            None if keypoint_hflip_indices is None else np.asarray(keypoint_hflip_indices)
        )
        self.recompute_boxes = bool(recompute_boxes)

    def _training_instances(
        self,
        annotations: Sequence[dict[str, Any]],
        transforms: T.Transform,
        image_size: tuple[int, int],
        *,
        file_name: str | None,
        filter_empty: bool = True,
    ) -> Instances:
        """:func:`annotations_to_training_instances` with the stored options."""
        return annotations_to_training_instances(
            annotations,
            transforms,
            image_size,
            use_instance_mask=self.use_instance_mask,
            use_keypoint=self.use_keypoint,
            instance_mask_format=self.instance_mask_format,
            keypoint_hflip_indices=self.keypoint_hflip_indices,
            recompute_boxes=self.recompute_boxes,
            filter_empty=filter_empty,
            file_name=file_name,
        )


class DatasetMapper(_InstanceOptions):
    """Map a detectron2 record to the dict a detection model takes.

    Args:
        is_train: training mode keeps annotations (as ``instances``); test mode drops them.
        augmentations: augmentations (or transforms) applied in order.
        image_format: "RGB", "BGR" or "L".
        use_instance_mask: keep ``segmentation`` and build ``gt_masks``.
        use_keypoint: keep ``keypoints`` and build ``gt_keypoints``.
        instance_mask_format: "polygon" or "bitmask".
        keypoint_hflip_indices: keypoint permutation applied after a horizontal flip (from
            metadata ``keypoint_flip_map``); needed with ``use_keypoint`` and flips.
        recompute_boxes: recompute boxes from the transformed masks (needs
            ``use_instance_mask``).
        skip_bad_images: an unreadable image makes the mapper return None (so MapDataset
            uses another record) and is counted in :attr:`num_skipped`, with one warning per
            file; otherwise :class:`~mappers.errors.ImageReadError` propagates.
        decoder: force a JPEG decoder (see :func:`~mappers.image_io.read_image`).
        reduced_decode: when the augmentations shrink the image at least 2x in both sides
            (drawn before decoding from the record's height/width), decode the JPEG at 1/2,
            1/4 or 1/8 scale (never below the output size) and resize from there: much
            cheaper for small training scales, pixels close to (not equal to) a full decode.

    Returns (from ``__call__``):
        The record's keys plus ``image`` (CHW uint8 tensor, see the module notes), the
        original ``height``/``width``, ``sem_seg`` (int64 HxW tensor) when the record has a
        ``sem_seg_file_name``, and in training ``instances``. None for a skipped image.

    Raises:
        ValueError: invalid option combination (at construction).
        ImageSizeMismatchError: the image's size differs from the record's.

    Example:
        >>> from mappers import transforms as T
        >>> mapper = DatasetMapper(True, augmentations=[T.ResizeShortestEdge(800, 1333),
        ...                                             T.RandomFlip()])
        >>> sample = mapper(record)  # doctest: +SKIP
        >>> sample["image"].shape, len(sample["instances"])  # doctest: +SKIP
        (torch.Size([3, 800, 1067]), 7)
    """

    def __init__(
        self,
        is_train: bool = True,
        *,
        augmentations: Sequence[Any],
        image_format: str = "RGB",
        use_instance_mask: bool = False,
        use_keypoint: bool = False,
        instance_mask_format: str = "polygon",
        keypoint_hflip_indices: Sequence[int] | None = None,
        recompute_boxes: bool = False,
        skip_bad_images: bool = False,
        decoder: str | None = None,
        reduced_decode: bool = False,
    ) -> None:
        if instance_mask_format not in _MASK_FORMATS:
            raise ValueError(
                f"DatasetMapper: instance_mask_format must be one of {_MASK_FORMATS}, "
                f"got {instance_mask_format!r}"
            )
        if recompute_boxes and not use_instance_mask:
            raise ValueError("DatasetMapper: recompute_boxes=True needs use_instance_mask=True")
        if image_format not in ("RGB", "BGR", "L"):
            raise ValueError(
                f"DatasetMapper: image_format must be 'RGB', 'BGR' or 'L', got {image_format!r}"
            )
        self.is_train = bool(is_train)
        self.augmentations = T.AugmentationList(list(augmentations))
        self._plannable = is_plannable(self.augmentations)
        self.image_format = image_format
        self._store_instance_options(
            use_instance_mask,
            use_keypoint,
            instance_mask_format,
            keypoint_hflip_indices,
            recompute_boxes,
        )
        self.skip_bad_images = bool(skip_bad_images)
        self.decoder = decoder
        self.reduced_decode = bool(reduced_decode)
        self.num_skipped = 0
        self._warned_files: set[str] = set()
        mode = "training" if is_train else "inference"
        logger.info("DatasetMapper in %s mode, augmentations: %s", mode, self.augmentations)

    def __call__(self, dataset_dict: dict[str, Any]) -> dict[str, Any] | None:
        """Map one record; see the class docstring."""
        record = _copy_for_mapping(dataset_dict)
        plan = None
        size = record_image_size(record)  # RecordFormatError for a malformed height/width
        if self._plannable and "sem_seg_file_name" not in record and size is not None:
            # The record's size is enough to draw the transforms before decoding.
            channels = 1 if self.image_format == "L" else 3
            plan = self._plan((size[0], size[1], channels))
        min_size = self._reduced_size(plan) if plan is not None else None
        try:
            image = _read_sized_image(record, size, self.image_format, self.decoder, min_size)
        except ImageReadError as exc:
            if not self.skip_bad_images:
                raise
            self._count_skip(exc)
            return None
        sem_seg = None
        if plan is not None:
            image, transforms = apply_planned(image, plan.planned), plan.transforms
        else:
            if "sem_seg_file_name" in record:
                sem_seg = read_segmentation(record.pop("sem_seg_file_name"))
            image, sem_seg, transforms = self._augment(image, sem_seg)
        record["image"] = image_to_tensor(image)
        if sem_seg is not None:
            record["sem_seg"] = torch.as_tensor(np.asarray(sem_seg, dtype=np.int64))
        if not self.is_train:
            record.pop("annotations", None)
            return record
        if "annotations" in record:
            record["instances"] = self._training_instances(
                record.pop("annotations"),
                transforms,
                image.shape[:2],
                file_name=record.get("file_name"),
            )
        return record

    def _plan(self, shape: tuple[int, ...]) -> Plan | None:
        """Draw the transforms for an image of ``shape`` without touching pixels (None: the
        general path runs instead; see :func:`~mappers._fast_path.plan_transforms`)."""
        return plan_transforms(self.augmentations.augs, shape)

    def _reduced_size(self, plan: Plan) -> tuple[int, int] | None:
        """The output size when reduced decoding is on and the plan shrinks 2x or more."""
        if not self.reduced_decode:
            return None
        resizes = [t for t in plan.planned if isinstance(t, T.ResizeTransform)]
        if len(resizes) != 1:
            return None
        only = resizes[0]
        if 2 * only.new_h <= only.h and 2 * only.new_w <= only.w:
            return (only.new_h, only.new_w)
        return None

    def _augment(
        self, image: np.ndarray, sem_seg: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None, T.TransformList]:
        """Apply the augmentations; plan-then-execute when they only need the image shape."""
        if self._plannable and sem_seg is None:
            plan = self._plan(image.shape)
            if plan is not None:
                return apply_planned(image, plan.planned), None, plan.transforms
        aug_input = OwnedImageAugInput(image, sem_seg=sem_seg)
        transforms = self.augmentations(aug_input, rng=get_generator())
        return aug_input.image, aug_input.sem_seg, transforms

    def _count_skip(self, exc: ImageReadError) -> None:
        self.num_skipped += 1
        path = str(exc.path)
        if path not in self._warned_files:
            self._warned_files.add(path)
            logger.warning(
                "DatasetMapper: skipping unreadable image %s (%s); %d skipped so far in this "
                "process",
                path,
                exc,
                self.num_skipped,
            )

    def __repr__(self) -> str:
        return (
            f"DatasetMapper(is_train={self.is_train}, augmentations={self.augmentations!r}, "
            f"image_format={self.image_format!r}, use_instance_mask={self.use_instance_mask}, "
            f"use_keypoint={self.use_keypoint}, instance_mask_format="
            f"{self.instance_mask_format!r}, recompute_boxes={self.recompute_boxes}, "
            f"skip_bad_images={self.skip_bad_images})"
        )
