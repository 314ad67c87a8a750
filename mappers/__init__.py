"""catmap.mappers: record dicts -> training samples.

``MapDataset`` applies a mapper with seeded, bounded refetch; ``DatasetMapper`` and ``Compose``
read the image, augment it (:mod:`mappers.transforms`) and turn the annotations into
``Instances`` (:mod:`mappers.structures`).

Example:
    >>> from mappers import DatasetFromList, DatasetMapper, MapDataset, transforms as T
    >>> mapper = DatasetMapper(True, augmentations=[T.ResizeShortestEdge(800, 1333),
    ...                                             T.RandomFlip()])
    >>> dataset = MapDataset(DatasetFromList(records), mapper)  # doctest: +SKIP
"""

from catalog._common import MissingDependencyError

from . import structures, transforms
from .annotations import (
    annotations_to_instances, filter_empty_instances, transform_instance_annotations
)
from .compose import Compose
from .dataset_mapper import TRANSFORMS, DatasetMapper
from .datasets import (
    DatasetFromList, MapDataset, ToIterableDataset, set_default_dataset_from_list_serialize_method,
)
from .errors import (
    ImageNotFoundError, ImageReadError, ImageSizeMismatchError, ImageTooLargeError,
    KeypointFlipError, MapFuncPickleError, MapperArgumentError, PipelineStepError,
    RefetchExhaustedError, StructureIndexError, StructureShapeError, UnsupportedImageFormatError
)
from .image_io import ImageLimits, get_image_limits, read_image, set_image_limits
from .instances import Instances
from .torchvision_targets import TorchvisionTargetError
from .transforms import TransformError

__all__ = [
    "TRANSFORMS", "Compose", "DatasetFromList", "DatasetMapper", "ImageLimits",
    "ImageNotFoundError", "ImageReadError", "ImageSizeMismatchError", "ImageTooLargeError",
    "Instances", "KeypointFlipError", "MapDataset", "MapFuncPickleError", "MapperArgumentError",
    "MissingDependencyError", "PipelineStepError", "RefetchExhaustedError",
    "StructureIndexError", "StructureShapeError", "ToIterableDataset", "TorchvisionTargetError",
    "TransformError", "UnsupportedImageFormatError", "annotations_to_instances",
    "filter_empty_instances", "get_image_limits", "read_image",
    "set_default_dataset_from_list_serialize_method", "set_image_limits", "structures",
    "transform_instance_annotations", "transforms"
]
