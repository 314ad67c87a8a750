"""Compose: an mmengine-style pipeline of dict -> dict steps, built from callables or configs.

Each entry of a pipeline is a callable taking and returning the sample dict, or a config dict
``{"type": "Name", **kwargs}`` resolved through the :data:`TRANSFORMS` registry. A step that
returns None ends the pipeline with None, which makes :class:`~mappers.datasets.MapDataset`
use another record.

Shipped steps (what :class:`~mappers.dataset_mapper.DatasetMapper` does, one job each):
``LoadImage``, ``ApplyAugmentations``, ``AnnotationsToInstances``, ``ToTensor``.

Example:
    >>> pipeline = Compose([
    ...     {"type": "LoadImage", "format": "RGB"},
    ...     {"type": "ApplyAugmentations", "augmentations": [
    ...         {"type": "ResizeShortestEdge", "short_edge_length": 800, "max_size": 1333},
    ...         {"type": "RandomFlip"}]},
    ...     {"type": "AnnotationsToInstances"},
    ...     {"type": "ToTensor"},
    ... ])
    >>> sample = pipeline(record)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from catalog.errors import RecordFormatError
from catalog.registry import Registry

from . import transforms as T
from ._function_pickle import unwrap, wrap_for_pickling
from .dataset_mapper import (
    _InstanceOptions,
    _record_name,
    image_to_tensor,
    read_record_image,
    read_segmentation,
)
from .errors import ImageReadError, PipelineStepError

__all__ = [
    "TRANSFORMS",
    "AnnotationsToInstances",
    "ApplyAugmentations",
    "Compose",
    "LoadImage",
    "ToTensor",
    "build_step",
]

logger = logging.getLogger(__name__)

#: Registry of pipeline steps usable as ``{"type": "Name", ...}`` in a Compose config.
TRANSFORMS = Registry("transform")

Step = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def _build_from_config(cfg: Mapping[str, Any], registry: Registry, where: str) -> Any:
    if "type" not in cfg:
        raise PipelineStepError(f"{where}: config dict {dict(cfg)!r} has no 'type' key")
    kwargs = dict(cfg)
    name = kwargs.pop("type")
    target = registry.get(name) if isinstance(name, str) else name
    try:
        return target(**kwargs)
    except TypeError as exc:
        raise PipelineStepError(f"{where}: cannot build {name!r} from {kwargs!r}: {exc}") from exc


def build_step(entry: Step | Mapping[str, Any], index: int = 0) -> Step:
    """Turn a pipeline entry (callable or ``{"type": ...}`` dict) into a callable step.

    Raises:
        RegistryKeyError: (a KeyError) the type is not registered; lists close matches.
        PipelineStepError: (a TypeError) the entry is neither, or its arguments are wrong.

    Example:
        >>> build_step({"type": "ToTensor"})
        ToTensor(keys=('image',))
    """
    if isinstance(entry, Mapping):
        return _build_from_config(entry, TRANSFORMS, f"Compose step {index}")
    if callable(entry):
        return wrap_for_pickling(entry)
    raise PipelineStepError(
        f"Compose step {index}: expected a callable or a {{'type': ...}} dict, got "
        f"{type(entry).__name__}: {entry!r}"
    )


class Compose:
    """Run dict -> dict steps in order; a step returning None ends the pipeline with None.

    Args:
        transforms: callables or ``{"type": "Name", **kwargs}`` dicts (see :data:`TRANSFORMS`).
            A single entry is accepted too.

    Example:
        >>> pipe = Compose([lambda d: {**d, "x": 1}, lambda d: d if d["x"] else None])
        >>> pipe({"file_name": "a.jpg"})
        {'file_name': 'a.jpg', 'x': 1}
    """

    def __init__(self, transforms: Sequence[Step | Mapping[str, Any]] | Step | Mapping) -> None:
        if isinstance(transforms, Mapping) or callable(transforms):
            transforms = [transforms]  # type: ignore[list-item]
        if not isinstance(transforms, Sequence) or isinstance(transforms, str):
            raise PipelineStepError(
                f"Compose: expected a list of steps, got {type(transforms).__name__}"
            )
        self.transforms: list[Step] = [build_step(t, i) for i, t in enumerate(transforms)]

    def __call__(self, data: dict[str, Any]) -> dict[str, Any] | None:
        for step in self.transforms:
            data = step(data)  # type: ignore[assignment]
            if data is None:
                return None
        return data

    def __len__(self) -> int:
        return len(self.transforms)

    def __repr__(self) -> str:
        if not self.transforms:
            return "Compose()"
        body = "".join(f"\n    {unwrap(step)!r}," for step in self.transforms)
        return f"Compose({body}\n)"


@TRANSFORMS.register()
class LoadImage:
    """Read ``results[key]`` into ``results["image"]`` (HWC uint8 numpy) and check its size.

    Also reads ``sem_seg_file_name`` into ``results["sem_seg"]`` when present. Fills
    ``height``/``width`` when the record lacks them.

    Args:
        format: "RGB", "BGR" or "L".
        key: the record key holding the path.
        skip_bad_images: an unreadable image returns None (MapDataset refetches) instead
            of raising ImageReadError; counted in ``num_skipped``.
        decoder: force a JPEG decoder.
    """

    def __init__(
        self,
        format: str = "RGB",
        key: str = "file_name",
        skip_bad_images: bool = False,
        decoder: str | None = None,
    ) -> None:
        if format not in ("RGB", "BGR", "L"):
            raise ValueError(f"LoadImage: format must be 'RGB', 'BGR' or 'L', got {format!r}")
        self.format = format
        self.key = key
        self.skip_bad_images = bool(skip_bad_images)
        self.decoder = decoder
        self.num_skipped = 0

    def __call__(self, results: dict[str, Any]) -> dict[str, Any] | None:
        results = dict(results)
        if self.key != "file_name":
            if self.key not in results:
                raise RecordFormatError(
                    f"LoadImage: record ({_record_name(results)}) has no key {self.key!r}"
                )
            results["file_name"] = results[self.key]
        try:
            results["image"] = read_record_image(results, self.format, decoder=self.decoder)
        except ImageReadError as exc:
            if not self.skip_bad_images:
                raise
            self.num_skipped += 1
            logger.warning(
                "LoadImage: skipping unreadable image (%s); %d skipped so far in this process",
                exc,
                self.num_skipped,
            )
            return None
        if "sem_seg_file_name" in results:
            results["sem_seg"] = read_segmentation(results.pop("sem_seg_file_name"))
        return results

    def __repr__(self) -> str:
        return f"LoadImage(format={self.format!r}, key={self.key!r})"


def _build_augmentation(entry: Any, index: int) -> Any:
    if isinstance(entry, Mapping):
        if "type" not in entry:
            raise PipelineStepError(f"ApplyAugmentations entry {index}: no 'type' key in {entry!r}")
        name = entry["type"]
        target = getattr(T, name, None) if isinstance(name, str) else name
        if target is None or (isinstance(name, str) and name not in T.__all__):
            import difflib

            close = difflib.get_close_matches(str(name), T.__all__, n=3, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise PipelineStepError(
                f"ApplyAugmentations entry {index}: no augmentation named {name!r} in "
                f"mappers.transforms.{hint}"
            )
        kwargs = {k: v for k, v in entry.items() if k != "type"}
        try:
            return target(**kwargs)
        except TypeError as exc:
            raise PipelineStepError(
                f"ApplyAugmentations entry {index}: cannot build {name!r} from {kwargs!r}: {exc}"
            ) from exc
    return entry


@TRANSFORMS.register()
class ApplyAugmentations:
    """Apply augmentations to ``results["image"]`` (and ``sem_seg``); store ``transforms``.

    Args:
        augmentations: Augmentation / Transform objects, or ``{"type": "RandomFlip", ...}``
            dicts naming classes of :mod:`mappers.transforms`.

    The transforms used are stored in ``results["transforms"]`` (a TransformList), for
    AnnotationsToInstances and for mapping predictions back at test time.
    """

    def __init__(self, augmentations: Sequence[Any]) -> None:
        built = [_build_augmentation(a, i) for i, a in enumerate(augmentations)]
        self.augmentations = T.AugmentationList(built)

    def __call__(self, results: dict[str, Any]) -> dict[str, Any]:
        if "image" not in results:
            raise RecordFormatError(
                f"ApplyAugmentations: record ({_record_name(results)}) has no 'image'; put "
                "LoadImage before it"
            )
        results = dict(results)
        aug_input = T.AugInput(results["image"], sem_seg=results.get("sem_seg"))
        transforms = self.augmentations(aug_input)
        previous = results.get("transforms")
        if previous is not None:
            transforms = T.TransformList([previous, transforms])
        results["image"] = aug_input.image
        if aug_input.sem_seg is not None:
            results["sem_seg"] = aug_input.sem_seg
        results["transforms"] = transforms
        return results

    def __repr__(self) -> str:
        return f"ApplyAugmentations({self.augmentations!r})"


@TRANSFORMS.register()
class AnnotationsToInstances(_InstanceOptions):
    """Transform ``results["annotations"]`` with ``results["transforms"]`` into ``instances``.

    Crowd annotations are dropped, empty instances filtered (``filter_empty``). Without a
    ``transforms`` key the annotations are used as they are. Arguments as in DatasetMapper.
    """

    def __init__(
        self,
        use_instance_mask: bool = False,
        use_keypoint: bool = False,
        instance_mask_format: str = "polygon",
        keypoint_hflip_indices: Sequence[int] | None = None,
        recompute_boxes: bool = False,
        filter_empty: bool = True,
    ) -> None:
        if instance_mask_format not in ("polygon", "bitmask"):
            raise ValueError(
                "AnnotationsToInstances: instance_mask_format must be 'polygon' or 'bitmask', "
                f"got {instance_mask_format!r}"
            )
        if recompute_boxes and not use_instance_mask:
            raise ValueError("AnnotationsToInstances: recompute_boxes needs use_instance_mask")
        self._store_instance_options(
            use_instance_mask,
            use_keypoint,
            instance_mask_format,
            keypoint_hflip_indices,
            recompute_boxes,
        )
        self.filter_empty = bool(filter_empty)

    def __call__(self, results: dict[str, Any]) -> dict[str, Any]:
        results = dict(results)
        image = results.get("image")
        if image is None:
            raise RecordFormatError(
                f"AnnotationsToInstances: record ({_record_name(results)}) has no 'image'; "
                "it must come after LoadImage"
            )
        if isinstance(image, torch.Tensor):
            image_size = tuple(image.shape[-2:])
        else:
            image_size = tuple(np.shape(image)[:2])
        transforms = results.get("transforms") or T.NoOpTransform()
        annotations = [dict(a) for a in results.pop("annotations", None) or []]
        results["instances"] = self._training_instances(
            annotations,
            transforms,
            image_size,  # type: ignore[arg-type]
            file_name=results.get("file_name"),
            filter_empty=self.filter_empty,
        )
        return results

    def __repr__(self) -> str:
        return (
            f"AnnotationsToInstances(use_instance_mask={self.use_instance_mask}, "
            f"use_keypoint={self.use_keypoint}, instance_mask_format="
            f"{self.instance_mask_format!r})"
        )


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
                    f"ToTensor: record ({_record_name(results)}) has no key {key!r}"
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
