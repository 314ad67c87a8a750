"""Annotation formats: COCO and LVIS, Pascal VOC, semantic segmentation and COCO panoptic,
Cityscapes, OpenMMLab 2.0 files, the builtin datasets, COCO export and evaluation."""

from .builtin import builtin_dataset_names, builtin_dataset_root
from .cityscapes import load_cityscapes_instances, load_cityscapes_semantic
from .coco import load_coco_json, load_lvis_json, register_coco_instances, register_lvis_instances
from .export import (
    convert_to_coco_dict,
    convert_to_coco_json,
    evaluate_coco,
    instances_to_coco_results,
    write_coco_results,
)
from .openmmlab import load_annotation_file, register_annotation_file
from .panoptic import (
    load_coco_panoptic_json,
    load_sem_seg,
    merge_to_panoptic,
    register_coco_panoptic,
    register_coco_panoptic_separated,
    register_sem_seg,
)
from .validate import (
    AnnotationFieldError,
    AnnotationFieldTypeError,
    CityscapesFormatError,
    CocoEvaluationError,
    CocoExportError,
    PanopticFormatError,
    ParseDataInfoError,
    SemSegPairingError,
)
from .voc import load_voc_instances, register_pascal_voc
