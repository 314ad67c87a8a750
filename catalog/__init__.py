"""catmap.catalog: dataset and metadata catalogs, serialized record lists, annotation loaders."""

from .annotation_errors import AnnotationFieldError, AnnotationFieldTypeError, ParseDataInfoError
from .annotation_file import load_annotation_file, register_annotation_file
from .box_mode import BoxMode
from .cache_config import CacheSkippedWarning
from .coco import load_coco_json, register_coco_instances
from .dataset_catalog import DatasetCatalog, DatasetEntry
from .detection_dicts import get_detection_dataset_dicts
from .disk_cache import CacheCorruptError, CacheCorruptWarning, DiskCache, load_with_cache
from .errors import (
    AnnotationFormatError,
    CacheError,
    CatmapError,
    DatasetAlreadyRegisteredError,
    DatasetNotRegisteredError,
    EmptyDatasetError,
    MetadataConflictError,
    NestedLoadError,
    RecordFormatError,
    SharedAttachError,
)
from .local_share import share_across_local_ranks
from .metadata import Metadata, MetadataCatalog
from .record_views import SerializedListView, concat_records
from .registry import Registry, RegistryKeyError
from .serialized_list import RecordColumns, SerializedList
from .version import __version__

__all__ = [
    "AnnotationFieldError",
    "AnnotationFieldTypeError",
    "ParseDataInfoError",
    "AnnotationFormatError",
    "BoxMode",
    "CacheCorruptError",
    "CacheCorruptWarning",
    "CacheError",
    "CacheSkippedWarning",
    "CatmapError",
    "DatasetCatalog",
    "DatasetEntry",
    "DiskCache",
    "DatasetAlreadyRegisteredError",
    "DatasetNotRegisteredError",
    "EmptyDatasetError",
    "Metadata",
    "MetadataCatalog",
    "MetadataConflictError",
    "NestedLoadError",
    "RecordColumns",
    "RecordFormatError",
    "Registry",
    "RegistryKeyError",
    "SerializedList",
    "SerializedListView",
    "SharedAttachError",
    "__version__",
    "concat_records",
    "get_detection_dataset_dicts",
    "load_annotation_file",
    "load_coco_json",
    "load_with_cache",
    "register_annotation_file",
    "register_coco_instances",
    "share_across_local_ranks",
]
