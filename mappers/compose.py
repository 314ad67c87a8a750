"""mmengine-style pipelines: :class:`Compose` runs dict -> dict steps in order, built from
callables or ``{"type": "Name", ...}`` dicts of :data:`~mappers.dataset_mapper.TRANSFORMS`.
``DatasetMapper`` is a preset of these steps (``LoadImage``, ``ApplyAugmentations``,
``AnnotationsToInstances``, ``LoadProposals``, ``ToTensor``).

Example:
    >>> pipe = Compose([{"type": "LoadImage"}, {"type": "ApplyAugmentations", "augmentations":
    ...     [{"type": "RandomFlip"}]}, {"type": "AnnotationsToInstances"}, {"type": "ToTensor"}])
    >>> len(pipe)
    4
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from catalog._common import RecordFormatError, is_config_container, plain_container

from . import transforms as T
from .annotations import InstanceOptions
from .dataset_mapper import (
    TRANSFORMS, LoadImage, SkippingStep, build_augmentations, build_from_config, image_size_of,
    read_and_augment
)
from .datasets import unwrap, wrap_for_pickling
from .errors import PipelineStepError
from .image_io import image_to_tensor, record_name

__all__ = [
    "AnnotationsToInstances", "ApplyAugmentations", "Compose", "PlannedLoad", "ToTensor",
    "chain_transforms",
]


def chain_transforms(results: dict[str, Any], transforms: T.TransformList) -> None:
    """Append ``transforms`` to ``results["transforms"]`` (one chain per record)."""
    previous = results.get("transforms")
    chained = transforms if previous is None else T.TransformList([previous, transforms])
    results["transforms"] = chained


@TRANSFORMS.register()
class ApplyAugmentations:
    """Apply augmentations (objects or ``{"type": "RandomFlip", ...}`` dicts) to ``image`` and
    ``sem_seg``; the transforms drawn are chained into ``results["transforms"]``."""

    def __init__(self, augmentations: Sequence[Any]) -> None:
        self.augmentations = build_augmentations(augmentations, "ApplyAugmentations")

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
        chain_transforms(results, transforms)

    def __repr__(self) -> str:
        return f"ApplyAugmentations({self.augmentations!r})"


class PlannedLoad:
    """LoadImage then ApplyAugmentations as one step (:func:`read_and_augment`); Compose runs
    the two steps as one of these."""

    def __init__(self, load: LoadImage, augment: ApplyAugmentations) -> None:
        self.load = load
        self.augment = augment

    def __call__(self, results: dict[str, Any]) -> dict[str, Any] | None:
        results = dict(results)
        loaded = read_and_augment(results, self.load, self.augment.augmentations)
        if loaded is None:
            return None
        results["image"] = loaded[0]
        if loaded[1] is not None:
            results["sem_seg"] = loaded[1]
        chain_transforms(results, loaded[2])
        return results

    def __repr__(self) -> str:
        return f"PlannedLoad({self.load!r}, {self.augment!r})"


@TRANSFORMS.register()
class AnnotationsToInstances(SkippingStep):
    """Transform ``annotations`` with ``transforms`` into ``instances`` (crowd dropped, empty
    instances filtered with ``filter_empty``). A record without ``annotations`` passes as it is.

    With ``skip_bad_annotations`` a malformed annotation (RecordFormatError) returns None.
    ``**options``: those of :class:`~mappers.annotations.InstanceOptions`.
    """

    def __init__(
        self, *, filter_empty: bool = True, skip_bad_annotations: bool = False, **options: Any
    ) -> None:
        self.options = InstanceOptions("AnnotationsToInstances", **options)
        self.filter_empty = bool(filter_empty)
        self.skip_bad_annotations = bool(skip_bad_annotations)
        self.owner = "AnnotationsToInstances"

    def __call__(self, results: dict[str, Any]) -> dict[str, Any] | None:
        results = dict(results)
        image_size = image_size_of(results, "AnnotationsToInstances")
        if "annotations" not in results:
            return results
        transforms = results.get("transforms")
        transforms = T.NoOpTransform() if transforms is None else transforms
        annotations = [dict(a) for a in results.pop("annotations") or []]
        try:
            results["instances"] = self.options.instances(
                annotations, transforms, image_size,
                file_name=results.get("file_name"), filter_empty=self.filter_empty,
            )
        except RecordFormatError as exc:
            if not self.skip_bad_annotations:
                raise
            self._skip(exc, results.get("file_name"), "annotations")
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
class ToTensor:
    """HWC numpy images in ``keys`` to CHW tensors (views, no copy); ``sem_seg`` to int64."""

    def __init__(self, keys: Sequence[str] = ("image",)) -> None:
        self.keys = (keys,) if isinstance(keys, str) else tuple(keys)

    def __call__(self, results: dict[str, Any]) -> dict[str, Any]:
        results = dict(results)
        for key in self.keys:
            if key not in results:
                raise RecordFormatError(
                    f"ToTensor: record ({record_name(results)}) has no key {key!r}"
                )
            if isinstance(results[key], np.ndarray):
                results[key] = image_to_tensor(results[key])
        sem_seg = results.get("sem_seg")
        if isinstance(sem_seg, np.ndarray):
            results["sem_seg"] = torch.as_tensor(sem_seg.astype(np.int64))
        return results

    def __repr__(self) -> str:
        return f"ToTensor(keys={self.keys!r})"


Step = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def _build_step(entry: Step | Mapping[str, Any], index: int) -> Step:
    if isinstance(entry, Mapping):
        return build_from_config(entry, TRANSFORMS, f"Compose step {index}")
    if callable(entry):
        return wrap_for_pickling(entry)
    raise PipelineStepError(
        f"Compose step {index}: expected a callable or a {{'type': ...}} dict, got "
        f"{type(entry).__name__}: {entry!r}"
    )


class Compose:
    """Run dict -> dict steps in order; a step returning None ends the pipeline with None
    (MapDataset then uses another record). Entries are callables or ``{"type": "Name", ...}``
    dicts of :data:`TRANSFORMS`; a LoadImage directly followed by ApplyAugmentations runs as
    one :class:`PlannedLoad`.

    Example:
        >>> pipe = Compose([lambda d: {**d, "x": 1}, lambda d: d if d["x"] else None])
        >>> pipe({"file_name": "a.jpg"})
        {'file_name': 'a.jpg', 'x': 1}
    """

    def __init__(self, transforms: Sequence[Step | Mapping[str, Any]] | Step | Mapping) -> None:
        if is_config_container(transforms):  # a ListConfig / DictConfig of steps
            transforms = plain_container(transforms)
        if isinstance(transforms, Mapping) or callable(transforms):
            transforms = [transforms]  # type: ignore[list-item]
        if not isinstance(transforms, Sequence) or isinstance(transforms, str):
            raise PipelineStepError(
                f"Compose: expected a list of steps, got {type(transforms).__name__}"
            )
        self.transforms: list[Step] = [_build_step(t, i) for i, t in enumerate(transforms)]
        self._run: list[Step] = []
        for step in self.transforms:
            previous = self._run[-1] if self._run else None
            if isinstance(step, ApplyAugmentations) and isinstance(previous, LoadImage):
                self._run[-1] = PlannedLoad(previous, step)
            else:
                self._run.append(step)

    def __call__(self, data: dict[str, Any]) -> dict[str, Any] | None:
        for step in self._run:
            data = step(data)  # type: ignore[assignment]
            if data is None:
                return None
        return data

    def __len__(self) -> int:
        return len(self.transforms)

    def __repr__(self) -> str:
        body = "".join(f"\n    {unwrap(step)!r}," for step in self.transforms)
        return f"Compose({body}\n)" if body else "Compose()"
