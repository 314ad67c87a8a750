"""catmap.catalog: dataset and metadata catalogs, serialized record lists, annotation loaders.

``__all__`` below is the public catalog API (the contract of the design, the format loaders
and their typed errors). ``catalog.testing.isolated_catalogs`` is public too, for tests.

catmap's internal API
---------------------
These modules hold the utilities that ``catalog``, ``mappers`` and ``samplers`` share. They
are imported from their modules (never from ``catalog`` itself), are not catalog concepts,
and may change between releases:

- :mod:`catalog.errors`: ``CatmapError`` (base of every catmap error; pickles whole) and
  ``CatmapErrorWithFields`` (keyword fields as attributes), ``missing_dependency``.
- :mod:`catalog.validation`: the one set of argument checks (``check_int``, ``check_seed``,
  ``check_probability``, ``is_int`` ...), used by constructors and config builders alike.
- :mod:`catalog.seeding`: ``derive_seed`` and the numpy / torch generators derived from it.
- :mod:`catalog.registry`: ``Registry``, the one lookup by name with "did you mean"
  (transforms, samplers; the catalogs through :mod:`catalog.metadata`).
- :mod:`catalog.log_limits`: warnings limited per kind, counted across processes.
- :mod:`catalog.config_access` / :mod:`catalog.config_values`: reading detectron2-style and
  OmegaConf configs.
- :mod:`catalog.env_flags`: ``env_flag``, the one reader of on/off environment variables.
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

from .annotation_errors import AnnotationFieldError, AnnotationFieldTypeError, ParseDataInfoError
from .annotation_file import load_annotation_file, register_annotation_file
from .box_mode import BoxMode, BoxModeError
from .builtin_datasets import builtin_dataset_names, builtin_dataset_root
from .cityscapes import load_cityscapes_instances, load_cityscapes_semantic
from .coco import load_coco_json, register_coco_instances
from .coco_evaluation import evaluate_coco, instances_to_coco_results, write_coco_results
from .coco_export import convert_to_coco_dict, convert_to_coco_json
from .coco_panoptic import (
    load_coco_panoptic_json,
    merge_to_panoptic,
    register_coco_panoptic,
    register_coco_panoptic_separated,
)
from .dataset_catalog import DatasetCatalog, DatasetEntry
from .detection_dicts import get_detection_dataset_dicts
from .errors import (
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
from .format_errors import (
    CityscapesFormatError,
    CocoEvaluationError,
    CocoExportError,
    PanopticFormatError,
    SemSegPairingError,
)
from .lvis import load_lvis_json, register_lvis_instances
from .metadata import Metadata, MetadataCatalog
from .pascal_voc import load_voc_instances, register_pascal_voc
from .registry import RegistryKeyError
from .sem_seg import load_sem_seg, register_sem_seg
from .storage.cache import CacheCorruptError, CacheCorruptWarning, CacheSkippedWarning
from .storage.records import (
    ImmutableRecordsError,
    RecordColumns,
    SerializedList,
    SerializedListView,
    concat_records,
)
from .storage.sharing import this_rank_only
from .version import __version__

__all__ = [
    "load_sem_seg",
    "register_sem_seg",
    "load_coco_panoptic_json",
    "merge_to_panoptic",
    "register_coco_panoptic",
    "register_coco_panoptic_separated",
    "load_cityscapes_instances",
    "load_cityscapes_semantic",
    "convert_to_coco_dict",
    "convert_to_coco_json",
    "evaluate_coco",
    "instances_to_coco_results",
    "write_coco_results",
    "CityscapesFormatError",
    "CocoEvaluationError",
    "CocoExportError",
    "MissingDependencyError",
    "PanopticFormatError",
    "SemSegPairingError",
    "DatasetFileNotFoundError",
    "load_lvis_json",
    "register_lvis_instances",
    "load_voc_instances",
    "register_pascal_voc",
    "builtin_dataset_names",
    "builtin_dataset_root",
    "AnnotationFieldError",
    "AnnotationFieldTypeError",
    "ParseDataInfoError",
    "AnnotationFormatError",
    "BoxMode",
    "BoxModeError",
    "CacheCorruptError",
    "CacheCorruptWarning",
    "CacheError",
    "CacheSkippedWarning",
    "CatmapError",
    "DatasetCatalog",
    "DatasetEntry",
    "DatasetAlreadyRegisteredError",
    "DatasetNotRegisteredError",
    "EmptyDatasetError",
    "Metadata",
    "MetadataCatalog",
    "MetadataConflictError",
    "NestedLoadError",
    "RecordColumns",
    "ImmutableRecordsError",
    "RecordFormatError",
    "RegistryKeyError",
    "SerializedList",
    "SerializedListView",
    "SharedAttachError",
    "__version__",
    "concat_records",
    "get_detection_dataset_dicts",
    "load_annotation_file",
    "load_coco_json",
    "register_annotation_file",
    "register_coco_instances",
    "this_rank_only",
]
