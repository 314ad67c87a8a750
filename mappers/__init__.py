"""catmap.mappers: record dicts -> training samples.

Datasets that apply a mapper (with seeded, bounded refetch), image reading with a fast JPEG
path, transforms and augmentations applied consistently to images and annotations,
``Instances``, and the ready-made ``DatasetMapper`` / ``Compose`` pipelines.

Example:
    >>> from mappers import DatasetFromList, DatasetMapper, MapDataset, transforms as T
    >>> mapper = DatasetMapper(True, augmentations=[T.ResizeShortestEdge(800, 1333),
    ...                                             T.RandomFlip()])
    >>> dataset = MapDataset(DatasetFromList(records), mapper)  # doctest: +SKIP
"""

from . import transforms
from .annotations import (
    KeypointFlipError,
    MissingDependencyError,
    annotations_to_instances,
    create_keypoint_hflip_indices,
    filter_empty_instances,
    polygons_to_bitmask,
    rle_to_bitmask,
    transform_annotations,
    transform_instance_annotations,
    transform_keypoint_annotations,
)
from .compose import (
    TRANSFORMS,
    AnnotationsToInstances,
    ApplyAugmentations,
    Compose,
    LoadImage,
    ToTensor,
)
from .dataset_mapper import DatasetMapper, check_image_size, read_segmentation
from .datasets import DatasetFromList, MapDataset, MapIterableDataset, ToIterableDataset
from .errors import (
    ImageNotFoundError,
    ImageReadError,
    ImageSizeMismatchError,
    ImageTooLargeError,
    MapFuncPickleError,
    PipelineStepError,
    RefetchExhaustedError,
    UnsupportedImageFormatError,
)
from .image_header import get_max_image_pixels, set_max_image_pixels
from .image_io import available_jpeg_decoders, decode_image, read_image
from .instances import Instances
from .opencv_threads import limit_opencv_threads
from .random_state import get_generator, seed_generator, use_generator
from .transforms import TransformError

__all__ = [
    "get_max_image_pixels",
    "set_max_image_pixels",
    "TRANSFORMS",
    "AnnotationsToInstances",
    "ApplyAugmentations",
    "Compose",
    "DatasetFromList",
    "DatasetMapper",
    "ImageNotFoundError",
    "ImageReadError",
    "ImageSizeMismatchError",
    "ImageTooLargeError",
    "Instances",
    "KeypointFlipError",
    "LoadImage",
    "MapDataset",
    "MapFuncPickleError",
    "MapIterableDataset",
    "MissingDependencyError",
    "PipelineStepError",
    "RefetchExhaustedError",
    "ToIterableDataset",
    "ToTensor",
    "TransformError",
    "UnsupportedImageFormatError",
    "annotations_to_instances",
    "available_jpeg_decoders",
    "check_image_size",
    "create_keypoint_hflip_indices",
    "decode_image",
    "filter_empty_instances",
    "get_generator",
    "limit_opencv_threads",
    "polygons_to_bitmask",
    "read_image",
    "read_segmentation",
    "rle_to_bitmask",
    "seed_generator",
    "transform_annotations",
    "transform_instance_annotations",
    "transform_keypoint_annotations",
    "transforms",
    "use_generator",
]
