"""catmap.catalog: dataset and metadata catalogs, serialized record lists, annotation loaders."""

from .annotation_file import load_annotation_file, register_annotation_file
from .box_mode import BoxMode
from .coco import load_coco_json, register_coco_instances
from .dataset_catalog import DatasetCatalog, DatasetEntry
from .detection_dicts import get_detection_dataset_dicts
from .errors import (
    AnnotationFormatError,
    CacheError,
    CatmapError,
    DatasetAlreadyRegisteredError,
    DatasetNotRegisteredError,
    EmptyDatasetError,
    MetadataConflictError,
    RecordFormatError,
    SharedAttachError,
)
from .metadata import Metadata, MetadataCatalog
from .registry import Registry, RegistryKeyError
from .serialized_list import RecordColumns, SerializedList
from .version import __version__

__all__ = [
    "AnnotationFormatError",
    "BoxMode",
    "CacheError",
    "CatmapError",
    "DatasetCatalog",
    "DatasetEntry",
    "DatasetAlreadyRegisteredError",
    "DatasetNotRegisteredError",
    "EmptyDatasetError",
    "Metadata",
    "MetadataCatalog",
    "MetadataConflictError",
    "RecordColumns",
    "RecordFormatError",
    "Registry",
    "RegistryKeyError",
    "SerializedList",
    "SharedAttachError",
    "__version__",
    "get_detection_dataset_dicts",
    "load_annotation_file",
    "load_coco_json",
    "register_annotation_file",
    "register_coco_instances",
]
