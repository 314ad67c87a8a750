"""Drawing augmentations' transforms from the image's size alone, before decoding.

Augmentations that read nothing of the image but its shape (they declare
:attr:`~mappers.transforms.Augmentation.shape_only`) can draw their transforms from the
record's height/width; each drawn transform says what size it produces
(``Transform.output_size``), which is the next augmentation's input shape. The draws are the
very generator calls, in the same order, that calling the augmentations on an AugInput
makes. Used through :meth:`~mappers.transforms.AugmentationList.plan`.

Example:
    >>> from mappers.transforms import AugmentationList, RandomFlip, Resize
    >>> reads_shape_only(AugmentationList([Resize((20, 30)), RandomFlip()]))
    True
"""

from __future__ import annotations

from collections.abc import Sequence

from .augmentation import Augmentation, AugmentationList, RandomApply, _TransformToAug
from .transform import NoOpTransform, Transform, TransformList

__all__ = ["plan_augmentations", "reads_shape_only"]


class _ShapeOnly:
    """Stands in for the image in ``get_transform`` of shape-only augmentations."""

    __slots__ = ("shape",)

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape


def reads_shape_only(aug: Augmentation) -> bool:
    """Whether ``aug``'s transforms can be drawn from the image's size alone.

    True for fixed transforms, for lists and :class:`RandomApply` of such augmentations,
    and for an augmentation whose ``get_transform`` takes only ``image`` on a class that
    declares :attr:`Augmentation.shape_only` itself, with the base ``__call__``.

    Example:
        >>> from mappers.transforms import RandomFlip, RandomContrast
        >>> reads_shape_only(RandomFlip()), reads_shape_only(RandomContrast(0.5, 1.5))
        (True, False)
    """
    if isinstance(aug, _TransformToAug):
        return True
    if isinstance(aug, AugmentationList):
        return all(reads_shape_only(a) for a in aug.augs)
    if type(aug) is RandomApply:
        return reads_shape_only(aug.aug)
    mro = type(aug).__mro__
    owner = next(k for k in mro if "get_transform" in k.__dict__)
    caller = next(k for k in mro if "__call__" in k.__dict__)
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
    # shape-only augmentations take exactly ``image`` (fixed transforms take anything)
    tfm = aug.get_transform(_ShapeOnly((*size, *rest)))
    if not isinstance(tfm, Transform):
        raise TypeError(
            f"{type(aug).__name__}.get_transform returned a {type(tfm).__name__}, "
            "expected a Transform or TransformList"
        )
    out.append(tfm)
    return tfm.output_size(*size)


def plan_augmentations(
    augmentations: AugmentationList, image_shape: Sequence[int]
) -> TransformList | None:
    """Draw the transforms of shape-only augmentations for an image of ``image_shape``.

    Draws from the current generator (see :mod:`mappers.random_state`). The caller checks
    :func:`reads_shape_only` first.

    Returns:
        The transforms, or None when a drawn transform cannot tell its output size (the
        generator has advanced then).
    """
    drawn: list[Transform] = []
    size = (int(image_shape[0]), int(image_shape[1]))
    if _plan_into(augmentations, size, tuple(image_shape[2:]), drawn) is None:
        return None
    return TransformList(drawn)
