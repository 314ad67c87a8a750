"""catmap.mappers.transforms: deterministic transforms and random augmentations.

Names, argument orders and conventions of ``detectron2.data.transforms``: a Transform maps
an image and its annotations consistently; an Augmentation draws a Transform from an AugInput.

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
    AugInput, Augmentation, AugmentationList, RandomApply, apply_augmentations, reads_shape_only
)
from .augmentation_impl import (
    FixedSizeCrop, MinIoURandomCrop, RandomBrightness, RandomContrast, RandomCrop,
    RandomCrop_CategoryAreaConstraint, RandomExtent, RandomFlip, RandomLighting, RandomResize,
    RandomRotation, RandomSaturation, Resize, ResizeScale, ResizeShortestEdge,
    gen_crop_transform_with_instance
)
from .transform import (
    HFlipTransform, NoOpTransform, ResizeTransform, ScaleTransform, Transform, TransformError,
    TransformList, VFlipTransform
)
from .transform_affine import CropTransform, ExtentTransform, PadTransform, RotationTransform
from .transform_color import BlendTransform, ColorTransform, PILColorTransform

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
    "ScaleTransform",
    "gen_crop_transform_with_instance",
]
