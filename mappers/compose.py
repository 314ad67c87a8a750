"""Compose: an mmengine-style pipeline of dict -> dict steps, built from callables or configs.

Each entry of a pipeline is a callable taking and returning the sample dict, or a config dict
``{"type": "Name", **kwargs}`` resolved through the :data:`TRANSFORMS` registry. A step that
returns None ends the pipeline with None, which makes :class:`~mappers.datasets.MapDataset`
use another record.

Shipped steps (:mod:`mappers.pipeline_steps`, one job each): ``LoadImage``,
``ApplyAugmentations``, ``AnnotationsToInstances``, ``LoadProposals``, ``ToTensor``.
:class:`~mappers.dataset_mapper.DatasetMapper` is a preset of these steps.

A ``LoadImage`` step directly followed by an ``ApplyAugmentations`` step runs as one
:class:`~mappers.pipeline_steps.PlannedLoad` (transforms drawn from the record's size before
decoding when the augmentations read only the image's shape; flips before resizes); the
repr and ``transforms`` still list the steps as given.

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from catalog.config_values import is_config_container, plain_container
from catalog.registry import Registry

from ._function_pickle import unwrap, wrap_for_pickling
from .errors import PipelineStepError
from .pipeline_steps import (
    TRANSFORMS,
    AnnotationsToInstances,
    ApplyAugmentations,
    LoadImage,
    LoadProposals,
    ToTensor,
)

__all__ = [
    "TRANSFORMS",
    "AnnotationsToInstances",
    "ApplyAugmentations",
    "Compose",
    "LoadImage",
    "LoadProposals",
    "ToTensor",
    "build_step",
]

Step = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def _build_from_config(cfg: Mapping[str, Any], registry: Registry, where: str) -> Any:
    if "type" not in cfg:
        raise PipelineStepError(f"{where}: config dict {dict(cfg)!r} has no 'type' key")
    kwargs = plain_container(cfg)  # a DictConfig's ListConfig values become lists
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
        if is_config_container(transforms):  # a ListConfig / DictConfig of steps
            transforms = plain_container(transforms)
        if isinstance(transforms, Mapping) or callable(transforms):
            transforms = [transforms]  # type: ignore[list-item]
        if not isinstance(transforms, Sequence) or isinstance(transforms, str):
            raise PipelineStepError(
                f"Compose: expected a list of steps, got {type(transforms).__name__}"
            )
        self.transforms: list[Step] = [build_step(t, i) for i, t in enumerate(transforms)]
        self._run = _fuse(self.transforms)

    def __call__(self, data: dict[str, Any]) -> dict[str, Any] | None:
        for step in self._run:
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


def _fuse(steps: Sequence[Step]) -> list[Step]:
    """The steps to run: each step offering ``fuse_with_next`` joined with the next one."""
    out: list[Step] = []
    index = 0
    while index < len(steps):
        step = steps[index]
        fuse = getattr(step, "fuse_with_next", None)
        fused = fuse(steps[index + 1]) if fuse is not None and index + 1 < len(steps) else None
        out.append(fused if fused is not None else step)
        index += 2 if fused is not None else 1
    return out
