"""Augmentations: random policies that produce deterministic transforms from their inputs.

An :class:`Augmentation` looks at the inputs named in its ``get_transform`` signature (for
example ``image`` or ``image, boxes``), read from an :class:`AugInput`, and returns a
:class:`~mappers.transforms.transform.Transform`. Calling it on an ``AugInput`` also applies
that transform to every input in place and returns it, so the same transform can then be
applied to annotations.

Randomness: augmentations draw from :meth:`Augmentation.rng`, which is
``mappers.random_state.get_generator()``: the generator passed as ``rng=`` to the current
call, else the per-process generator (seeded per DataLoader worker). Never the global numpy
state.

Example:
    >>> import numpy as np
    >>> from mappers.transforms import AugInput, AugmentationList, RandomFlip, Resize
    >>> aug_input = AugInput(np.zeros((40, 60, 3), np.uint8), boxes=np.array([[0, 0, 10, 10]]))
    >>> augs = AugmentationList([RandomFlip(prob=1.0), Resize((20, 30))])
    >>> tfms = augs(aug_input, rng=np.random.default_rng(0))
    >>> aug_input.image.shape, aug_input.boxes.tolist()
    ((20, 30, 3), [[25.0, 0.0, 30.0, 5.0]])
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..random_state import get_generator, use_generator
from .transform import NoOpTransform, Transform, TransformList, _param_repr

__all__ = [
    "Augmentation",
    "AugInput",
    "AugmentationList",
    "RandomApply",
    "apply_augmentations",
]


class AugInput:
    """The inputs augmentations read and transform: an image, optional boxes and sem_seg.

    Attributes are transformed in place by :meth:`transform`. Subclass it to carry more
    inputs (any attribute an augmentation's ``get_transform`` names is looked up here).

    Args:
        image: HxW or HxWxC numpy array (uint8 or float).
        boxes: optional Nx4 XYXY_ABS boxes.
        sem_seg: optional HxW segmentation map.

    Raises:
        TypeError: ``image`` is not a numpy array.
        ValueError: ``image`` is not 2-D or 3-D, or sem_seg's size differs from the image's.

    Example:
        >>> AugInput(np.zeros((4, 5, 3), np.uint8)).image.shape
        (4, 5, 3)
    """

    def __init__(
        self,
        image: np.ndarray,
        *,
        boxes: np.ndarray | None = None,
        sem_seg: np.ndarray | None = None,
    ) -> None:
        if not isinstance(image, np.ndarray):
            raise TypeError(f"AugInput: image must be a numpy array, got {type(image).__name__}")
        if image.ndim not in (2, 3):
            raise ValueError(f"AugInput: image must be HxW or HxWxC, got shape {image.shape}")
        if sem_seg is not None and tuple(np.shape(sem_seg)[:2]) != image.shape[:2]:
            raise ValueError(
                f"AugInput: sem_seg has size {tuple(np.shape(sem_seg)[:2])} but the image "
                f"has size {image.shape[:2]}"
            )
        self.image = image
        self.boxes = boxes
        self.sem_seg = sem_seg

    def transform(self, tfm: Transform) -> None:
        """Apply ``tfm`` to the image, boxes and sem_seg, in place."""
        self.image = tfm.apply_image(self.image)
        if self.boxes is not None:
            self.boxes = tfm.apply_box(self.boxes)
        if self.sem_seg is not None:
            self.sem_seg = tfm.apply_segmentation(self.sem_seg)

    def apply_augmentations(self, augmentations: Sequence[Any]) -> TransformList:
        """Apply augmentations (or transforms) in order; return the transforms used."""
        return AugmentationList(augmentations)(self)

    def __repr__(self) -> str:
        boxes = None if self.boxes is None else np.shape(self.boxes)
        sem_seg = None if self.sem_seg is None else np.shape(self.sem_seg)
        return f"AugInput(image={self.image.shape}, boxes={boxes}, sem_seg={sem_seg})"


class Augmentation:
    """Base class of augmentations.

    Subclasses implement ``get_transform(self, <input names>)`` returning a Transform; the
    parameter names say which AugInput attributes it receives (override the class attribute
    ``input_args`` to choose them explicitly). Random draws go through :attr:`rng` (or
    :meth:`_rand_range`) so that they follow the seeding rules.

    The repr lists the constructor arguments (read from same-named attributes): the first
    always, the others when they differ from their defaults, e.g. ``RandomFlip(prob=0.5)``.

    Example:
        >>> from mappers.transforms import HFlipTransform
        >>> class AlwaysFlip(Augmentation):
        ...     def get_transform(self, image):
        ...         return HFlipTransform(image.shape[1])
        >>> t = AlwaysFlip()(AugInput(np.zeros((2, 3), np.uint8)))
        >>> t
        HFlipTransform(width=3)
    """

    input_args: tuple[str, ...] | None = None

    #: True when ``get_transform`` reads nothing of its input but ``image.shape`` (and draws
    #: from :attr:`rng`): its transform can then be drawn from the image size before the
    #: image is decoded (:meth:`AugmentationList.plan`). Only trusted on the class that
    #: defines ``get_transform``: a subclass overriding it is not shape-only unless it says so.
    shape_only: bool = False

    @classmethod
    def _input_names(cls) -> tuple[str, ...]:
        if cls.input_args is not None:
            return tuple(cls.input_args)
        cached = cls.__dict__.get("_cached_input_names")
        if cached is not None:
            return cached
        names = []
        for name, param in inspect.signature(cls.get_transform).parameters.items():
            if name == "self":
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(
                    f"{cls.__name__}.get_transform takes *args/**kwargs; set the class "
                    "attribute input_args to the AugInput attribute names it needs"
                )
            names.append(name)
        result = tuple(names)
        cls._cached_input_names = result
        return result

    @property
    def rng(self) -> np.random.Generator:
        """The generator to draw from now (see ``mappers.random_state.get_generator``)."""
        return get_generator()

    def _rand_range(self, low: float = 1.0, high: float | None = None, size: Any = None) -> Any:
        """Uniform draw in [low, high); ``_rand_range(x)`` draws in [0, x)."""
        if high is None:
            low, high = 0.0, low
        return self.rng.uniform(low, high, size)

    def get_transform(self, *args: Any) -> Transform:
        """Return the transform to apply given the inputs named in the signature."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement get_transform (or __call__)"
        )

    def _gather_inputs(self, aug_input: Any) -> list[Any]:
        values = []
        for name in self._input_names():
            if not hasattr(aug_input, name):
                raise AttributeError(
                    f"{type(self).__name__}.get_transform needs the input {name!r}, but the "
                    f"{type(aug_input).__name__} given has no attribute {name!r}"
                )
            values.append(getattr(aug_input, name))
        return values

    def __call__(self, aug_input: Any, rng: np.random.Generator | None = None) -> Transform:
        """Draw a transform from ``aug_input``, apply it to the input in place, return it.

        Args:
            aug_input: an AugInput (or any object with the attributes get_transform needs
                and a ``transform(tfm)`` method).
            rng: generator to draw from for this call; default: the current generator.

        Raises:
            AttributeError: aug_input lacks an input get_transform names.
            TypeError: get_transform returned something that is not a Transform.
        """
        with use_generator(rng):
            tfm = self.get_transform(*self._gather_inputs(aug_input))
        if not isinstance(tfm, Transform):
            raise TypeError(
                f"{type(self).__name__}.get_transform returned a {type(tfm).__name__}, "
                "expected a Transform or TransformList"
            )
        aug_input.transform(tfm)
        return tfm

    def __repr__(self) -> str:
        return _param_repr(self, always_first=True)


class _TransformToAug(Augmentation):
    """An augmentation that always returns the given transform."""

    input_args = ()

    def __init__(self, tfm: Transform) -> None:
        self.tfm = tfm

    def get_transform(self, *args: Any) -> Transform:
        return self.tfm

    def __repr__(self) -> str:
        return repr(self.tfm)


def _as_augmentation(item: Any, index: int) -> Augmentation:
    if isinstance(item, Augmentation):
        return item
    if isinstance(item, Transform):
        return _TransformToAug(item)
    if isinstance(item, (list, tuple)):
        return AugmentationList(item)
    raise TypeError(
        f"augmentation {index} is a {type(item).__name__}; expected an Augmentation, a "
        "Transform or a list of them"
    )


def _planning() -> Any:
    """The module :mod:`~mappers.transforms.augmentation_planning` (it imports this one)."""
    module = sys.modules.get(f"{__package__}.augmentation_planning")
    if module is None:
        from . import augmentation_planning as module
    return module


class AugmentationList(Augmentation):
    """Apply augmentations in order; each sees the inputs as the previous ones left them.

    Args:
        augs: Augmentations, Transforms (always applied) or nested lists of them.

    Raises:
        TypeError: an element is none of these.

    Example:
        >>> from mappers.transforms import RandomFlip, ResizeShortestEdge
        >>> AugmentationList([RandomFlip(), ResizeShortestEdge(800, 1333)])
        AugmentationList[RandomFlip(prob=0.5), ResizeShortestEdge(short_edge_length=(800, 800), max_size=1333)]
    """

    input_args = ()

    def __init__(self, augs: Sequence[Any]) -> None:
        if isinstance(augs, (Augmentation, Transform)):
            augs = [augs]
        self.augs: list[Augmentation] = [_as_augmentation(a, i) for i, a in enumerate(augs)]
        self._shape_only_for: tuple[Augmentation, ...] | None = None
        self._shape_only = False

    def __call__(self, aug_input: Any, rng: np.random.Generator | None = None) -> TransformList:
        """Apply every augmentation to ``aug_input`` in place; return the transforms used.

        Args:
            aug_input: the AugInput to transform.
            rng: generator every augmentation draws from during this call; default: the
                current generator.
        """
        with use_generator(rng):
            tfms = [aug(aug_input) for aug in self.augs]
        return TransformList(tfms)

    def get_transform(self, *args: Any) -> Transform:
        """Not available: the augmentations of a list each need the previous one's output.

        Raises:
            TypeError: always; call the list on an AugInput instead.
        """
        raise TypeError(
            "AugmentationList produces its transforms only when called on an AugInput: "
            "use augs(aug_input)"
        )

    def plan(
        self, image_shape: Sequence[int], rng: np.random.Generator | None = None
    ) -> TransformList | None:
        """Draw the transforms for an image of ``image_shape`` without the image itself.

        Possible when every augmentation reads only the image's shape (see
        :attr:`Augmentation.shape_only`) and every drawn transform knows its
        ``output_size``. The draws are the very calls, in the same order, that calling the
        list on an AugInput makes, so the transforms are the same.

        Args:
            image_shape: (h, w) or (h, w, c) of the image the transforms will apply to.
            rng: generator to draw from; default: the current generator.

        Returns:
            The transforms, or None when planning is not possible (nothing was drawn when an
            augmentation is not shape-only; otherwise the generator may have advanced).

        Example:
            >>> from mappers.transforms import RandomFlip, Resize
            >>> len(AugmentationList([Resize((20, 30)), RandomFlip(1.0)]).plan((10, 15, 3)))
            2
        """
        key = tuple(self.augs)
        if getattr(self, "_shape_only_for", None) != key:  # checked once per list
            self._shape_only = _planning().reads_shape_only(self)
            self._shape_only_for = key
        if not self._shape_only:
            return None
        if rng is None:  # the current generator
            return _planning().plan_augmentations(self, image_shape)
        with use_generator(rng):
            return _planning().plan_augmentations(self, image_shape)

    def __len__(self) -> int:
        return len(self.augs)

    def __iter__(self):
        return iter(self.augs)

    def __repr__(self) -> str:
        return f"AugmentationList[{', '.join(repr(a) for a in self.augs)}]"


class RandomApply(Augmentation):
    """Apply an augmentation (or transform) with probability ``prob``, else do nothing.

    Args:
        tfm_or_aug: the Augmentation or Transform to apply.
        prob: probability in [0, 1].

    Raises:
        ValueError: prob is outside [0, 1].
        TypeError: tfm_or_aug is neither an Augmentation nor a Transform.

    Example:
        >>> from mappers.transforms import RandomFlip
        >>> RandomApply(RandomFlip(prob=1.0), prob=0.3)
        RandomApply(tfm_or_aug=RandomFlip(prob=1.0), prob=0.3)
    """

    def __init__(self, tfm_or_aug: Augmentation | Transform, prob: float = 0.5) -> None:
        try:
            prob_value = float(prob)
        except (TypeError, ValueError):
            raise ValueError(
                f"RandomApply: prob must be a number in [0, 1], got {prob!r}"
            ) from None
        if not 0.0 <= prob_value <= 1.0:
            raise ValueError(f"RandomApply: prob must be in [0, 1], got {prob!r}")
        if not isinstance(tfm_or_aug, (Augmentation, Transform)):
            raise TypeError(
                f"RandomApply wraps an Augmentation or a Transform, got {type(tfm_or_aug).__name__}"
            )
        self.tfm_or_aug = tfm_or_aug
        self.aug = _as_augmentation(tfm_or_aug, 0)
        self.prob = prob

    @property
    def input_args(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.aug._input_names()

    def _input_names(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.aug._input_names()

    def get_transform(self, *args: Any) -> Transform:
        if self._rand_range() < self.prob:
            return self.aug.get_transform(*args)
        return NoOpTransform()

    def __call__(self, aug_input: Any, rng: np.random.Generator | None = None) -> Transform:
        with use_generator(rng):
            if self._rand_range() < self.prob:
                return self.aug(aug_input)
        return NoOpTransform()

    def __repr__(self) -> str:
        return f"RandomApply(tfm_or_aug={self.tfm_or_aug!r}, prob={self.prob})"


def apply_augmentations(
    augmentations: Sequence[Any], inputs: np.ndarray | AugInput
) -> tuple[np.ndarray | AugInput, TransformList]:
    """Apply augmentations to an image or an AugInput; return (result, transforms).

    A bare image gives the augmented image back; an AugInput is transformed in place and
    returned.

    Example:
        >>> from mappers.transforms import Resize
        >>> image, tfms = apply_augmentations([Resize((2, 3))], np.zeros((4, 6), np.uint8))
        >>> image.shape, len(tfms)
        ((2, 3), 1)
    """
    if isinstance(inputs, np.ndarray):
        aug_input = AugInput(inputs)
        tfms = aug_input.apply_augmentations(augmentations)
        return aug_input.image, tfms
    return inputs, inputs.apply_augmentations(augmentations)
