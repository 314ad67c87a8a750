"""Augmentations: random policies that draw deterministic transforms from an AugInput.

An Augmentation reads the AugInput attributes its ``get_transform`` names, returns a
Transform and applies it in place. Draws come from ``mappers.random_state`` (the call's
``rng=``, else the per-worker generator), never numpy's global state.

Example:
    >>> from mappers.transforms import AugInput, AugmentationList, RandomFlip, Resize
    >>> aug_input = AugInput(np.zeros((40, 60, 3), np.uint8), boxes=np.array([[0, 0, 10, 10]]))
    >>> tfms = AugmentationList([RandomFlip(prob=1.0), Resize((20, 30))])(aug_input)
    >>> aug_input.image.shape, aug_input.boxes.tolist()
    ((20, 30, 3), [[25.0, 0.0, 30.0, 5.0]])
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..random_state import get_generator, use_generator
from .transform import (
    GeometryPreservingTransform,
    NoOpTransform,
    Transform,
    TransformList,
    _param_repr,
)


class AugInput:
    """An image (HxW or HxWxC array) with optional Nx4 XYXY_ABS ``boxes`` and HxW ``sem_seg``,
    transformed in place by :meth:`transform`; subclass it to carry more inputs."""

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
    """Base class: subclasses implement ``get_transform(self, <AugInput attribute names>)``
    (or set ``input_args``) and draw from :attr:`rng`.

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
    __jit_unused_properties__ = ["rng"]  # for torch.jit.script of static helpers

    #: ``get_transform`` reads only ``image.shape``, so it can be planned before decoding.
    #: Trusted only on the class defining ``get_transform``.
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
        return get_generator()

    def _rand_range(self, low: float = 1.0, high: float | None = None, size: Any = None) -> Any:
        """Uniform draw in [low, high); ``_rand_range(x)`` draws in [0, x)."""
        if high is None:
            low, high = 0.0, low
        return self.rng.uniform(low, high, size)

    def get_transform(self, *args: Any) -> Transform:
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
        """Draw a transform from ``aug_input`` (with ``rng`` if given), apply it in place."""
        with use_generator(rng):
            tfm = self.get_transform(*self._gather_inputs(aug_input))
        if not isinstance(tfm, Transform):
            raise _not_a_transform(self, tfm)
        aug_input.transform(tfm)
        return tfm

    def __repr__(self) -> str:
        return _param_repr(self, by_identity=True)

    # The repr leaves out the arguments that hold their very default object (detectron2's
    # rule); a pickle round trip keeps them so, hence the same repr.
    def __getstate__(self) -> dict[str, Any]:
        defaults = _init_defaults(type(self))
        held = [n for n, d in defaults.items() if self.__dict__.get(n, defaults) is d]
        return {**self.__dict__, "_default_args": held}

    def __setstate__(self, state: dict[str, Any]) -> None:
        defaults = _init_defaults(type(self))
        state = dict(state)
        state.update({n: defaults[n] for n in state.pop("_default_args", ())})
        self.__dict__.update(state)


def _init_defaults(cls: type) -> dict[str, Any]:
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


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


class AugmentationList(Augmentation):
    """Augmentations (or fixed Transforms, or nested lists) applied in order."""

    input_args = ()

    def __init__(self, augs: Sequence[Any]) -> None:
        if isinstance(augs, (Augmentation, Transform)):
            augs = [augs]
        self.augs: list[Augmentation] = []
        for index, aug in enumerate(augs):
            self.augs.append(aug if isinstance(aug, Augmentation) else _as_augmentation(aug, index))
        self._shape_only_for: tuple[Augmentation, ...] | None = None
        self._shape_only = False

    def __call__(self, aug_input: Any, rng: np.random.Generator | None = None) -> TransformList:
        with use_generator(rng):
            tfms = [aug(aug_input) for aug in self.augs]
        return TransformList(tfms)

    def get_transform(self, *args: Any) -> Transform:
        raise TypeError(
            "AugmentationList produces its transforms only when called on an AugInput: "
            "use augs(aug_input)"
        )

    def plan(
        self, image_shape: Sequence[int], rng: np.random.Generator | None = None
    ) -> TransformList | None:
        """The transforms for an image of ``image_shape`` drawn without the image: the same
        draws, in the same order, as calling the list. None when an augmentation is not
        shape-only (nothing drawn) or a transform cannot tell its output size."""
        key = tuple(self.augs)
        if getattr(self, "_shape_only_for", None) != key:  # checked once per list
            self._shape_only = reads_shape_only(self)
            self._shape_only_for = key
        if not self._shape_only:
            return None
        if rng is not None:
            with use_generator(rng):
                return self.plan(image_shape)
        drawn: list[Transform] = []
        size: tuple[int, int] | None = (int(image_shape[0]), int(image_shape[1]))
        rest = tuple(image_shape[2:])
        for aug in self.augs:
            if type(aug) is AugmentationList or type(aug) is RandomApply:
                size = _plan_into(aug, size, rest, drawn)
            else:  # inlined for the common flat list
                tfm = aug.get_transform(SimpleNamespace(shape=(*size, *rest)))
                if not isinstance(tfm, Transform):
                    raise _not_a_transform(aug, tfm)
                drawn.append(tfm)
                if not isinstance(tfm, GeometryPreservingTransform):  # those keep the size
                    size = tfm.output_size(*size)
            if size is None:
                return None
        return TransformList(drawn)

    def __len__(self) -> int:
        return len(self.augs)

    def __iter__(self):
        return iter(self.augs)

    def __repr__(self) -> str:
        return f"AugmentationList[{', '.join(repr(a) for a in self.augs)}]"


class RandomApply(Augmentation):
    """Apply an augmentation (or transform) with probability ``prob``, else do nothing."""

    def __init__(self, tfm_or_aug: Augmentation | Transform, prob: float = 0.5) -> None:
        check_prob("RandomApply", prob)
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


def apply_augmentations(
    augmentations: Sequence[Any], inputs: np.ndarray | AugInput
) -> tuple[np.ndarray | AugInput, TransformList]:
    """Apply augmentations to an image (returned augmented) or an AugInput (in place);
    return (result, transforms).
    """
    if isinstance(inputs, np.ndarray):
        aug_input = AugInput(inputs)
        tfms = aug_input.apply_augmentations(augmentations)
        return aug_input.image, tfms
    return inputs, inputs.apply_augmentations(augmentations)


def reads_shape_only(aug: Augmentation) -> bool:
    """Whether ``aug``'s transforms can be drawn from the image size alone: fixed transforms,
    lists and RandomApply of such, and ``get_transform(image)`` on a class declaring
    ``shape_only`` itself with the base ``__call__``.
    """
    if isinstance(aug, _TransformToAug):
        return True
    if isinstance(aug, AugmentationList):
        for inner in aug.augs:
            if not reads_shape_only(inner):
                return False
        return True
    if type(aug) is RandomApply:
        return reads_shape_only(aug.aug)
    owner = caller = None
    for k in type(aug).__mro__:  # the nearest classes defining get_transform and __call__
        if owner is None and "get_transform" in k.__dict__:
            owner = k
        if caller is None and "__call__" in k.__dict__:
            caller = k
    return (
        owner.__dict__.get("shape_only") is True
        and caller is Augmentation
        and aug._input_names() == ("image",)
    )


def _plan_into(
    aug: Augmentation, size: tuple[int, int], rest: tuple[int, ...], out: list[Transform]
) -> tuple[int, int] | None:
    """Append ``aug``'s transforms for an image of ``size``; return the size after them."""
    if isinstance(aug, AugmentationList):
        for inner in aug.augs:
            next_size = _plan_into(inner, size, rest, out)
            if next_size is None:
                return None
            size = next_size
        return size
    if type(aug) is RandomApply:
        if aug._rand_range() < aug.prob:
            return _plan_into(aug.aug, size, rest, out)
        out.append(NoOpTransform())
        return size
    tfm = aug.get_transform(SimpleNamespace(shape=(*size, *rest)))  # stands in for the image
    if not isinstance(tfm, Transform):
        raise _not_a_transform(aug, tfm)
    out.append(tfm)
    return tfm.output_size(*size)


def _not_a_transform(aug: Augmentation, tfm: Any) -> TypeError:
    return TypeError(
        f"{type(aug).__name__}.get_transform returned a {type(tfm).__name__}, "
        "expected a Transform or TransformList"
    )


# Argument checks the builtin augmentations share.
SAMPLE_STYLES = ("range", "choice")
COLOR_FORMATS = ("RGB", "BGR")


def check_one_of(value: Any, allowed: tuple[str, ...], name: str, owner: str) -> str:
    """``value`` if it is one of ``allowed``, else ValueError naming owner and argument."""
    if not isinstance(value, str) or value not in allowed:
        choices = " or ".join(repr(choice) for choice in allowed)
        raise ValueError(f"{owner}: {name} must be {choices}, got {value!r}")
    return value


def check_color_image(image: np.ndarray, image_format: str, owner: str) -> None:
    if len(image.shape) != 3 or image.shape[2] != 3:
        raise ValueError(f"{owner} needs an HxWx3 {image_format} image, got shape {image.shape}")


def check_prob(owner: str, prob: Any) -> None:
    try:
        ok = 0.0 <= float(prob) <= 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}: prob must be a number in [0, 1], got {prob!r}")
