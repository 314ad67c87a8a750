"""catmap.catalog: dataset and metadata catalogs, serialized record lists, annotation loaders.

``__all__`` below is the public catalog API (the contract of the design, the format loaders
and their typed errors). ``catalog.testing.isolated_catalogs`` is public too, for tests.

catmap's internal API
---------------------
Utilities that ``catalog``, ``mappers`` and ``samplers`` share live in one internal module,
imported from there (never from ``catalog`` itself); they may change between releases:

- :mod:`catalog._common` errors: ``CatmapError`` (base of every catmap error; pickles whole),
  ``CatmapErrorWithFields`` (keyword fields as attributes), ``missing_dependency``.
- :mod:`catalog._common` checks: ``check_int``, ``check_seed``, ``is_int`` ..., used by
  constructors and config builders alike.
- :mod:`catalog._common` seeding: ``derive_seed`` and the generators derived from it.
- :mod:`catalog._log_limits` warnings: ``warn_limited``, limited per kind across processes.
- :mod:`catalog._common` configs: ``config_value``, ``plain_container`` (detectron2-style and
  OmegaConf configs).
- :mod:`catalog._common` switches: ``env_flag``, the one reader of on/off variables.
- :mod:`catalog.registry`: ``Registry``, the one lookup by name with "did you mean"
  (transforms, samplers; the catalogs through :mod:`catalog.metadata`).
- :mod:`catalog.storage.sharing` (``share_across_local_ranks``) and
  :mod:`catalog.storage.cache` (``DiskCache``, ``load_with_cache``): the load path's
  cross-rank sharing and cache, used by ``DatasetCatalog.get``.

Example:
    >>> from catalog import DatasetCatalog
    >>> from catalog.testing import isolated_catalogs
    >>> with isolated_catalogs():
    ...     DatasetCatalog.register("doc_toy", lambda: [{"file_name": "a.jpg"}])
    ...     len(DatasetCatalog.get("doc_toy"))
    1
"""

from .box_mode import BoxMode, BoxModeError
from .dataset_catalog import DatasetCatalog, DatasetEntry, get_detection_dataset_dicts
from ._common import (
    AnnotationFormatError,
    CacheError,
    CatmapError,
    DatasetAlreadyRegisteredError,
    DatasetFileNotFoundError,
    DatasetNotRegisteredError,
    EmptyDatasetError,
    MetadataConflictError,
    MissingDependencyError,
    NestedLoadError,
    RecordFormatError,
    SharedAttachError,
)
from .formats import (
    AnnotationFieldError,
    AnnotationFieldTypeError,
    CityscapesFormatError,
    CocoEvaluationError,
    CocoExportError,
    PanopticFormatError,
    ParseDataInfoError,
    SemSegPairingError,
    builtin_dataset_names,
    builtin_dataset_root,
    convert_to_coco_dict,
    convert_to_coco_json,
    evaluate_coco,
    instances_to_coco_results,
    load_annotation_file,
    load_cityscapes_instances,
    load_cityscapes_semantic,
    load_coco_json,
    load_coco_panoptic_json,
    load_lvis_json,
    load_sem_seg,
    load_voc_instances,
    merge_to_panoptic,
    register_annotation_file,
    register_coco_instances,
    register_coco_panoptic,
    register_coco_panoptic_separated,
    register_lvis_instances,
    register_pascal_voc,
    register_sem_seg,
    write_coco_results,
)
from .metadata import Metadata, MetadataCatalog
from .registry import RegistryKeyError
from .storage.cache import CacheCorruptError, CacheCorruptWarning, CacheSkippedWarning
from .storage.records import (
    ImmutableRecordsError,
    RecordColumns,
    SerializedList,
    SerializedListView,
    concat_records,
)
from .storage.sharing import this_rank_only
from .shards import ShardIndex, ShardWriteError, register_shards, verify_shards, write_shards
from .version import __version__

__all__ = ["load_sem_seg", "register_sem_seg", "load_coco_panoptic_json", "merge_to_panoptic",
           "register_coco_panoptic", "register_coco_panoptic_separated",
           "load_cityscapes_instances", "load_cityscapes_semantic", "convert_to_coco_dict",
           "convert_to_coco_json", "evaluate_coco", "instances_to_coco_results",
           "write_coco_results", "CityscapesFormatError", "CocoEvaluationError", "CocoExportError",
           "MissingDependencyError", "PanopticFormatError", "SemSegPairingError",
           "DatasetFileNotFoundError", "load_lvis_json", "register_lvis_instances",
           "load_voc_instances", "register_pascal_voc", "builtin_dataset_names",
           "builtin_dataset_root", "AnnotationFieldError", "AnnotationFieldTypeError",
           "ParseDataInfoError", "AnnotationFormatError", "BoxMode", "BoxModeError",
           "CacheCorruptError", "CacheCorruptWarning", "CacheError", "CacheSkippedWarning",
           "CatmapError", "DatasetCatalog", "DatasetEntry", "DatasetAlreadyRegisteredError",
           "DatasetNotRegisteredError", "EmptyDatasetError", "Metadata", "MetadataCatalog",
           "MetadataConflictError", "NestedLoadError", "RecordColumns", "ImmutableRecordsError",
           "RecordFormatError", "RegistryKeyError", "SerializedList", "SerializedListView",
           "SharedAttachError", "__version__", "concat_records", "get_detection_dataset_dicts",
           "load_annotation_file", "load_coco_json", "register_annotation_file",
           "register_coco_instances", "this_rank_only", "ShardIndex", "ShardWriteError",
           "register_shards", "verify_shards", "write_shards"]
