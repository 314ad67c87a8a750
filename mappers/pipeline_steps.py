"""The shipped Compose steps: one job each, and together what DatasetMapper does.

``LoadImage`` → ``ApplyAugmentations`` → ``AnnotationsToInstances`` → ``ToTensor`` (plus
``LoadProposals`` for precomputed proposals). Each takes and returns the sample dict (a new
dict: the caller's is never modified) and is registered by name in :data:`TRANSFORMS`.

When a ``LoadImage`` step is directly followed by an ``ApplyAugmentations`` step,
:class:`~mappers.compose.Compose` runs the two as one :class:`PlannedLoad`: if every
augmentation reads only the image's shape, the transforms are drawn from the record's
height/width before decoding (:meth:`~mappers.transforms.AugmentationList.plan`), so a JPEG
can be decoded at reduced size and flips run on the smaller decoded image
(:mod:`mappers.transforms.owned_image`); otherwise the decoded image, which nobody else
holds, is flipped in place. The transforms drawn are the same either way.

Bad input follows one policy (:class:`~mappers.skip_policy.SkipLog`): with
``skip_bad_images`` / ``skip_bad_annotations`` the step returns None (MapDataset uses another
record), counts it and warns once per file; otherwise the typed error propagates.

Example:
    >>> steps = [LoadImage(), ApplyAugmentations([]), AnnotationsToInstances(), ToTensor()]
    >>> [type(s).__name__ for s in steps]
    ['LoadImage', 'ApplyAugmentations', 'AnnotationsToInstances', 'ToTensor']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import numpy as np
import torch

from catalog.errors import RecordFormatError
from catalog.registry import Registry
from catalog.validation import check_int

from . import transforms as T
from .errors import ImageReadError, PipelineStepError
from .proposals import proposals_to_instances
from .image_io import (
    image_to_tensor,
    read_segmentation,
    read_sized_image,
    record_image_size,
    record_name,
)
from .skip_policy import SkipLog, SkippingStep
from .training_instances import InstanceOptions, InstanceOptionValues
from .transforms.owned_image import OwnedImageAugInput, apply_planned_image, reduced_decode_size

__all__ = [
    "TRANSFORMS",
    "AnnotationsToInstances",
    "ApplyAugmentations",
    "LoadImage",
    "LoadProposals",
    "PlannedLoad",
    "ToTensor",
]

#: Registry of pipeline steps usable as ``{"type": "Name", ...}`` in a Compose config.
TRANSFORMS = Registry("transform")

_FORMATS = ("RGB", "BGR", "L")


@TRANSFORMS.register()
class LoadImage(SkippingStep):
    """Read ``results[key]`` into ``results["image"]`` (HWC uint8 numpy) and check its size.

    Also reads ``sem_seg_file_name`` into ``results["sem_seg"]`` when present. Fills
    ``height``/``width`` when the record lacks them; a malformed height/width is a
    RecordFormatError, a size that differs from the image's an ImageSizeMismatchError.

    Args:
        format: "RGB", "BGR" or "L".
        key: the record key holding the path.
        skip_bad_images: an unreadable image returns None (MapDataset refetches) instead
            of raising ImageReadError; counted in ``num_skipped``, one warning per file.
        decoder: force a JPEG decoder (see :func:`~mappers.image_io.read_image`).
        reduced_decode: when the following ApplyAugmentations shrinks the image at least 2x
            on both sides (planned before decoding), decode the JPEG at 1/2, 1/4 or 1/8 scale
            (never below the output size) and resize from there: much cheaper for small
            training scales, pixels close to (not equal to) a full decode.

    Raises:
        ValueError: an unknown format.
    """

    def __init__(
        self,
        format: str = "RGB",
        key: str = "file_name",
        skip_bad_images: bool = False,
        decoder: str | None = None,
        reduced_decode: bool = False,
    ) -> None:
        if format not in _FORMATS:
            raise ValueError(f"LoadImage: format must be 'RGB', 'BGR' or 'L', got {format!r}")
        self.format = format
        self.key = key
        self.skip_bad_images = bool(skip_bad_images)
        self.decoder = decoder
        self.reduced_decode = bool(reduced_decode)
        self.skips = SkipLog("LoadImage")

    def __call__(self, results: dict[str, Any]) -> dict[str, Any] | None:
        results = dict(results)
        return self.load(results, record_image_size(results))

    def load(
        self,
        results: dict[str, Any],
        size: tuple[int, int] | None,
        min_size: tuple[int, int] | None = None,
    ) -> dict[str, Any] | None:
        """Read the image into ``results`` (modified; the caller passes its own copy).

        ``size`` is the record's checked (h, w) (None: unknown); ``min_size`` allows a
        reduced JPEG decode down to that size.
        """
        if self.key != "file_name":
            if self.key not in results:
                raise RecordFormatError(
                    f"LoadImage: record ({record_name(results)}) has no key {self.key!r}"
                )
            results["file_name"] = results[self.key]
        try:
            results["image"] = read_sized_image(results, size, self.format, self.decoder, min_size)
        except ImageReadError as exc:
            if not self.skip_bad_images:
                raise
            self.skips.record(exc, exc.path, "image")
            return None
        if "sem_seg_file_name" in results:
            results["sem_seg"] = read_segmentation(results.pop("sem_seg_file_name"))
        return results

    def fuse_with_next(self, step: Any) -> PlannedLoad | None:
        """The step Compose runs for this one and ``step`` together (None: not fusable)."""
        return PlannedLoad(self, step) if isinstance(step, ApplyAugmentations) else None

    def __repr__(self) -> str:
        return f"LoadImage(format={self.format!r}, key={self.key!r})"


#: The augmentations a config names: every name in ``mappers.transforms.__all__``.
AUGMENTATIONS = Registry("augmentation", module=T)


def _build_augmentation(entry: Any, index: int) -> Any:
    if not isinstance(entry, Mapping):
        return entry
    if "type" not in entry:
        raise PipelineStepError(f"ApplyAugmentations entry {index}: no 'type' key in {entry!r}")
    name = entry["type"]
    try:
        target = name if callable(name) else AUGMENTATIONS.get(name)
    except KeyError as exc:  # RegistryKeyError: lists close matches
        raise PipelineStepError(f"ApplyAugmentations entry {index}: {exc}") from exc
    kwargs = {k: v for k, v in entry.items() if k != "type"}
    try:
        return target(**kwargs)
    except TypeError as exc:
        raise PipelineStepError(
            f"ApplyAugmentations entry {index}: cannot build {name!r} from {kwargs!r}: {exc}"
        ) from exc


def _transforms_of(results: dict[str, Any]) -> T.Transform:
    """The transforms applied so far (``results["transforms"]``), else the identity."""
    transforms = results.get("transforms")
    return T.NoOpTransform() if transforms is None else transforms


def _chain(results: dict[str, Any], transforms: T.TransformList) -> None:
    previous = results.get("transforms")
    results["transforms"] = (
        transforms if previous is None else T.TransformList([previous, transforms])
    )


@TRANSFORMS.register()
class ApplyAugmentations:
    """Apply augmentations to ``results["image"]`` (and ``sem_seg``); store ``transforms``.

    Args:
        augmentations: Augmentation / Transform objects, or ``{"type": "RandomFlip", ...}``
            dicts naming classes of :mod:`mappers.transforms`.

    The transforms used are stored in ``results["transforms"]`` (a TransformList, chained
    after any earlier one), for AnnotationsToInstances and for mapping predictions back.
    """

    def __init__(self, augmentations: Sequence[Any]) -> None:
        built = [_build_augmentation(a, i) for i, a in enumerate(augmentations)]
        self.augmentations = T.AugmentationList(built)

    def __call__(self, results: dict[str, Any]) -> dict[str, Any]:
        if "image" not in results:
            raise RecordFormatError(
                f"ApplyAugmentations: record ({record_name(results)}) has no 'image'; put "
                "LoadImage before it"
            )
        results = dict(results)
        self.augment(results, T.AugInput(results["image"], sem_seg=results.get("sem_seg")))
        return results

    def augment(self, results: dict[str, Any], aug_input: T.AugInput) -> None:
        """Draw and apply the augmentations on ``aug_input``; store the outputs in ``results``."""
        transforms = self.augmentations(aug_input)
        results["image"] = aug_input.image
        if aug_input.sem_seg is not None:
            results["sem_seg"] = aug_input.sem_seg
        _chain(results, transforms)

    def __repr__(self) -> str:
        return f"ApplyAugmentations({self.augmentations!r})"


class PlannedLoad:
    """LoadImage then ApplyAugmentations, with the transforms drawn before decoding.

    Built by :class:`~mappers.compose.Compose` (see the module notes); the output is the
    two steps' output, the image equal up to rounding (a flip is applied before a resize).

    Args:
        load: the LoadImage step.
        augment: the ApplyAugmentations step that follows it.
    """

    def __init__(self, load: LoadImage, augment: ApplyAugmentations) -> None:
        self.load = load
        self.augment = augment
        self._channels = 1 if load.format == "L" else 3

    def __call__(self, results: dict[str, Any]) -> dict[str, Any] | None:
        results = dict(results)
        size = record_image_size(results)  # RecordFormatError for a malformed height/width
        plan = None
        if size is not None and "sem_seg_file_name" not in results:
            plan = self.augment.augmentations.plan((size[0], size[1], self._channels))
        min_size = None
        if plan is not None and self.load.reduced_decode:
            min_size = reduced_decode_size(plan)
        loaded = self.load.load(results, size, min_size)
        if loaded is None:
            return None
        image = loaded["image"]
        if plan is None and size is None and "sem_seg" not in loaded:
            plan = self.augment.augmentations.plan(image.shape)  # the size is known now
        if plan is None:
            self.augment.augment(loaded, OwnedImageAugInput(image, sem_seg=loaded.get("sem_seg")))
            return loaded
        loaded["image"] = apply_planned_image(loaded["image"], plan)
        _chain(loaded, plan)
        return loaded

    def __repr__(self) -> str:
        return f"PlannedLoad({self.load!r}, {self.augment!r})"


def _loaded_image_size(results: dict[str, Any], step: str) -> tuple[int, int]:
    """(height, width) of ``results["image"]`` (HxWxC array or CxHxW tensor).

    Raises:
        RecordFormatError: there is no image yet (``step`` must come after LoadImage).
    """
    image = results.get("image")
    if image is None:
        raise RecordFormatError(
            f"{step}: record ({record_name(results)}) has no 'image'; it must come after LoadImage"
        )
    height, width = image.shape[-2:] if isinstance(image, torch.Tensor) else np.shape(image)[:2]
    return int(height), int(width)


@TRANSFORMS.register()
class AnnotationsToInstances(SkippingStep):
    """Transform ``results["annotations"]`` with ``results["transforms"]`` into ``instances``.

    Crowd annotations are dropped, empty instances filtered (``filter_empty``). Without a
    ``transforms`` key the annotations are used as they are; a record without an
    ``annotations`` key passes without ``instances`` (as detectron2's DatasetMapper does;
    an empty list gives empty instances).

    Args:
        filter_empty: drop empty instances.
        skip_bad_annotations: a malformed annotation (RecordFormatError) makes the step
            return None (MapDataset uses another record), counted in ``num_skipped`` with
            one warning per file; otherwise the error propagates.
        **options: the keyword options of :class:`~mappers.training_instances.InstanceOptions`
            (``use_instance_mask``, ``use_keypoint``, ``instance_mask_format``,
            ``keypoint_hflip_indices``, ``recompute_boxes``).
    """

    def __init__(
        self,
        *,
        filter_empty: bool = True,
        skip_bad_annotations: bool = False,
        **options: Unpack[InstanceOptionValues],
    ) -> None:
        self.options = InstanceOptions("AnnotationsToInstances", **options)
        self.filter_empty = bool(filter_empty)
        self.skip_bad_annotations = bool(skip_bad_annotations)
        self.skips = SkipLog("AnnotationsToInstances")

    def __call__(self, results: dict[str, Any]) -> dict[str, Any] | None:
        results = dict(results)
        image_size = _loaded_image_size(results, "AnnotationsToInstances")
        if "annotations" not in results:
            return results
        transforms = _transforms_of(results)
        annotations = [dict(a) for a in results.pop("annotations") or []]
        try:
            results["instances"] = self.options.instances(
                annotations,
                transforms,
                image_size,
                file_name=results.get("file_name"),
                filter_empty=self.filter_empty,
            )
        except RecordFormatError as exc:
            if not self.skip_bad_annotations:
                raise
            self.skips.record(exc, results.get("file_name"), "annotations")
            return None
        return results

    def __repr__(self) -> str:
        opts = self.options
        return (
            f"AnnotationsToInstances(use_instance_mask={opts.use_instance_mask}, "
            f"use_keypoint={opts.use_keypoint}, instance_mask_format="
            f"{opts.instance_mask_format!r})"
        )


@TRANSFORMS.register()
class LoadProposals:
    """Turn precomputed proposals of the record into ``results["proposals"]`` (Instances).

    Reads ``proposal_boxes``, ``proposal_objectness_logits`` and ``proposal_bbox_mode``,
    moves the boxes with ``results["transforms"]``, clips them to the image, drops empty
    ones and keeps the first ``topk`` (they are expected sorted by score, as detectron2's
    proposal files are). Records without proposals pass unchanged.

    Args:
        topk: how many proposals to keep.
        min_box_size: proposals with a side at most this are dropped.
    """

    def __init__(self, topk: int, min_box_size: float = 0.0) -> None:
        self.topk = check_int(topk, "topk", minimum=0, error=ValueError, where="LoadProposals")
        self.min_box_size = float(min_box_size)

    def __call__(self, results: dict[str, Any]) -> dict[str, Any]:
        if "proposal_boxes" not in results:
            return results
        results = dict(results)
        size = _loaded_image_size(results, "LoadProposals")
        results["proposals"] = proposals_to_instances(
            results,
            _transforms_of(results),
            size,
            self.topk,
            self.min_box_size,
        )
        return results

    def __repr__(self) -> str:
        return f"LoadProposals(topk={self.topk})"


@TRANSFORMS.register()
class ToTensor:
    """Convert HWC numpy images in ``keys`` to CHW tensors (views, no copy); HW maps to tensors.

    ``sem_seg`` (HW) becomes an int64 tensor when present. A missing key is an error.
    """

    def __init__(self, keys: Sequence[str] = ("image",)) -> None:
        if isinstance(keys, str):
            keys = (keys,)
        self.keys = tuple(keys)

    def __call__(self, results: dict[str, Any]) -> dict[str, Any]:
        results = dict(results)
        for key in self.keys:
            if key not in results:
                raise RecordFormatError(
                    f"ToTensor: record ({record_name(results)}) has no key {key!r}"
                )
            value = results[key]
            if isinstance(value, np.ndarray):
                results[key] = image_to_tensor(value)
        sem_seg = results.get("sem_seg")
        if isinstance(sem_seg, np.ndarray):
            results["sem_seg"] = torch.as_tensor(sem_seg.astype(np.int64))
        return results

    def __repr__(self) -> str:
        return f"ToTensor(keys={self.keys!r})"
