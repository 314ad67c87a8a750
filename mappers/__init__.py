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
    LoadProposals,
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
from .image_io import (
    ImageLimits,
    available_jpeg_decoders,
    decode_image,
    get_image_limits,
    get_max_image_pixels,
    is_remote_path,
    limit_opencv_threads,
    read_image,
    set_image_limits,
    set_max_image_pixels,
)
from .instances import Instances
from .instances_from_annotations import (
    annotations_to_instances,
    annotations_to_instances_rotated,
    filter_empty_instances,
)
from .keypoint_flip import KeypointFlipError, create_keypoint_hflip_indices
from .mapper_config import MapperArgumentError
from .mask_rasterize import MissingDependencyError, polygons_to_bitmask, rle_to_bitmask
from .pickled_list import PickledList
from .random_state import get_generator, seed_generator, use_generator
from .record_source import HasRecords, records_of
from .structures import (
    BitMasks,
    Boxes,
    BoxMode,
    ImageList,
    Keypoints,
    PolygonMasks,
    ROIMasks,
    RotatedBoxes,
    StructureIndexError,
    StructureShapeError,
    pairwise_ioa,
    pairwise_iou,
)
from .torchvision_targets import (
    TorchvisionTargetError,
    to_torchvision_batch,
    to_torchvision_detection,
)
from .transforms import TransformError

__all__ = [
    "TRANSFORMS",
    "AnnotationsToInstances",
    "ApplyAugmentations",
    "BitMasks",
    "BoxMode",
    "Boxes",
    "Compose",
    "DatasetFromList",
    "DatasetMapper",
    "HasRecords",
    "ImageLimits",
    "ImageList",
    "ImageNotFoundError",
    "ImageReadError",
    "ImageSizeMismatchError",
    "ImageTooLargeError",
    "Instances",
    "KeypointFlipError",
    "Keypoints",
    "LoadImage",
    "LoadProposals",
    "MapDataset",
    "MapFuncPickleError",
    "MapIterableDataset",
    "MapperArgumentError",
    "MissingDependencyError",
    "PickledList",
    "PipelineStepError",
    "PolygonMasks",
    "ROIMasks",
    "RefetchExhaustedError",
    "RotatedBoxes",
    "StructureIndexError",
    "StructureShapeError",
    "ToIterableDataset",
    "ToTensor",
    "TorchvisionTargetError",
    "TransformError",
    "UnsupportedImageFormatError",
    "annotations_to_instances",
    "annotations_to_instances_rotated",
    "available_jpeg_decoders",
    "check_image_size",
    "create_keypoint_hflip_indices",
    "decode_image",
    "filter_empty_instances",
    "get_generator",
    "get_image_limits",
    "get_max_image_pixels",
    "is_remote_path",
    "limit_opencv_threads",
    "pairwise_ioa",
    "pairwise_iou",
    "polygons_to_bitmask",
    "read_image",
    "read_segmentation",
    "records_of",
    "rle_to_bitmask",
    "seed_generator",
    "set_image_limits",
    "set_max_image_pixels",
    "to_torchvision_batch",
    "to_torchvision_detection",
    "transform_annotations",
    "transform_instance_annotations",
    "transform_keypoint_annotations",
    "transforms",
    "use_generator",
]
