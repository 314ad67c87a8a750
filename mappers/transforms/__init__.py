"""catmap.mappers.transforms: deterministic transforms and random augmentations.

Same names, argument orders and conventions as ``detectron2.data.transforms``: a
:class:`Transform` maps an image and its annotations (coordinates, boxes, polygons,
segmentation maps) consistently; an :class:`Augmentation` draws a transform from an
:class:`AugInput` using the per-worker generator of :mod:`mappers.random_state`.

Example:
    >>> import numpy as np
    >>> from mappers import transforms as T
    >>> augs = T.AugmentationList([T.ResizeShortestEdge(800, 1333), T.RandomFlip()])
    >>> aug_input = T.AugInput(np.zeros((480, 640, 3), np.uint8))
    >>> tfms = augs(aug_input, rng=np.random.default_rng(0))
    >>> aug_input.image.shape
    (800, 1067, 3)
"""

from .augmentation import (
    AugInput,
    Augmentation,
    AugmentationList,
    RandomApply,
    apply_augmentations,
)
from .augmentation_planning import reads_shape_only
from .augmentations_affine import RandomExtent, RandomRotation
from .augmentations_color import RandomBrightness, RandomContrast, RandomSaturation
from .augmentations_crop import MinIoURandomCrop, RandomCrop_CategoryAreaConstraint
from .augmentations_geometry import RandomCrop, RandomFlip, Resize, ResizeShortestEdge
from .augmentations_lighting import RandomLighting
from .augmentations_scale import FixedSizeCrop, RandomResize, ResizeScale
from .transform import (
    BlendTransform,
    CropTransform,
    HFlipTransform,
    NoOpTransform,
    PadTransform,
    ResizeTransform,
    Transform,
    TransformError,
    TransformList,
    VFlipTransform,
)
from .transform_affine import ExtentTransform, RotationTransform
from .transform_color import ColorTransform, PILColorTransform

__all__ = [
    "AugInput",
    "Augmentation",
    "AugmentationList",
    "BlendTransform",
    "CropTransform",
    "HFlipTransform",
    "NoOpTransform",
    "PadTransform",
    "RandomApply",
    "RandomBrightness",
    "RandomContrast",
    "RandomCrop",
    "RandomFlip",
    "RandomSaturation",
    "Resize",
    "ResizeShortestEdge",
    "ResizeTransform",
    "Transform",
    "TransformError",
    "TransformList",
    "VFlipTransform",
    "apply_augmentations",
    "reads_shape_only",
    # detectron2's further augmentations and transforms
    "ColorTransform",
    "ExtentTransform",
    "FixedSizeCrop",
    "MinIoURandomCrop",
    "PILColorTransform",
    "RandomCrop_CategoryAreaConstraint",
    "RandomExtent",
    "RandomLighting",
    "RandomResize",
    "RandomRotation",
    "ResizeScale",
    "RotationTransform",
]
