"""DatasetMapper's arguments: from a detectron2-style config, or checked from a plain call.

``DatasetMapper(cfg, is_train=True)`` reads the keys detectron2's ``DatasetMapper.from_config``
reads (yacs ``CfgNode``, OmegaConf ``DictConfig`` or a plain nested dict; detectron2's
defaults for absent keys), without depending on detectron2:

=====================================  ==================================================
``INPUT.MIN_SIZE_TRAIN`` / ``_TEST``   ResizeShortestEdge lengths (train / test)
``INPUT.MAX_SIZE_TRAIN`` / ``_TEST``   its ``max_size``
``INPUT.MIN_SIZE_TRAIN_SAMPLING``      its ``sample_style`` in training ("choice" in test)
``INPUT.RANDOM_FLIP``                  "horizontal" / "vertical" / "none" (training only)
``INPUT.CROP.ENABLED/TYPE/SIZE``       a RandomCrop first (training only)
``INPUT.FORMAT`` / ``INPUT.MASK_FORMAT``  ``image_format`` / ``instance_mask_format``
``MODEL.MASK_ON`` / ``KEYPOINT_ON``    ``use_instance_mask`` / ``use_keypoint``
``MODEL.LOAD_PROPOSALS``               ``precomputed_proposal_topk`` from
                                       ``MODEL.RPN.POST_NMS_TOPK_TRAIN`` / ``_TEST``
``DATASETS.TRAIN``                     keypoint flip indices from the datasets' metadata
=====================================  ==================================================

With a crop and masks, boxes are recomputed from the cropped masks (as detectron2 does).

Example:
    >>> kwargs = mapper_kwargs_from_config({"INPUT": {"MIN_SIZE_TRAIN": [640, 800]}}, True)
    >>> kwargs["augmentations"]
    [ResizeShortestEdge(short_edge_length=(640, 800), max_size=1333, sample_style='choice'), RandomFlip(prob=0.5)]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from catalog.config_access import config_value, is_detectron2_config
from catalog.errors import CatmapError

from . import transforms as T
from .keypoint_flip import create_keypoint_hflip_indices

__all__ = [
    "OPTION_DEFAULTS",
    "UNSET",
    "MapperArgumentError",
    "mapper_kwargs_from_config",
    "resolve_call",
]


class MapperArgumentError(CatmapError, TypeError):
    """DatasetMapper was called with a wrong argument (unknown, missing or of a wrong type).

    Attributes:
        argument: the name of the argument at fault.
    """

    def __init__(self, message: str, *, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


#: Marks an argument that was not given.
UNSET: Any = object()

#: DatasetMapper's keyword arguments and their defaults (``augmentations`` is required).
OPTION_DEFAULTS: dict[str, Any] = {
    "augmentations": UNSET,
    "image_format": "RGB",
    "use_instance_mask": False,
    "use_keypoint": False,
    "instance_mask_format": "polygon",
    "keypoint_hflip_indices": None,
    "recompute_boxes": False,
    "precomputed_proposal_topk": None,
    "skip_bad_images": False,
    "skip_bad_annotations": False,
    "decoder": None,
    "reduced_decode": False,
}
_BOOLS = (
    "use_instance_mask",
    "use_keypoint",
    "recompute_boxes",
    "skip_bad_images",
    "skip_bad_annotations",
    "reduced_decode",
)


def _is_flag(value: Any) -> bool:
    return type(value).__name__ in ("bool", "bool_") or (isinstance(value, int) and value in (0, 1))


def resolve_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """All of DatasetMapper's arguments (``is_train`` included) from one constructor call.

    ``args`` are the positional arguments: a detectron2-style config first (then
    ``is_train`` may follow, and keywords override what the config gives), or ``is_train``
    alone. The config may also come as ``cfg=``.

    Raises:
        MapperArgumentError: an unknown keyword, extra positional arguments, no
            ``augmentations`` in a plain call, or a flag that is not a bool.
    """
    kwargs = dict(kwargs)
    unknown = sorted(set(kwargs) - set(OPTION_DEFAULTS) - {"is_train", "cfg"})
    if unknown:
        raise MapperArgumentError(
            f"DatasetMapper got unexpected keyword argument(s) {unknown}; it takes cfg, "
            f"is_train and {sorted(OPTION_DEFAULTS)}",
            argument=unknown[0],
        )
    positional = list(args)
    cfg = kwargs.pop("cfg", UNSET)
    if cfg is UNSET and positional and is_detectron2_config(positional[0]):
        cfg = positional.pop(0)
    if cfg is not UNSET and not is_detectron2_config(cfg):
        raise MapperArgumentError(
            "DatasetMapper: cfg must be a detectron2-style config (a mapping with INPUT, "
            f"MODEL, DATASETS ... sections), got {type(cfg).__name__}",
            argument="cfg",
        )
    if len(positional) > 1:
        raise MapperArgumentError(
            f"DatasetMapper takes at most a config and is_train by position; got "
            f"{len(positional)} more positional arguments (pass augmentations and the others "
            "by keyword)",
            argument="augmentations",
        )
    if positional and "is_train" in kwargs:
        raise MapperArgumentError(
            "DatasetMapper got is_train both by position and by keyword", argument="is_train"
        )
    is_train = positional[0] if positional else kwargs.pop("is_train", True)
    kwargs.pop("is_train", None)
    if not _is_flag(is_train):
        raise MapperArgumentError(
            "DatasetMapper: is_train must be True or False (the first argument may also be a "
            f"detectron2-style config), got {type(is_train).__name__} {is_train!r}",
            argument="is_train",
        )
    is_train = bool(is_train)
    options = kwargs
    if cfg is not UNSET:
        options = {**mapper_kwargs_from_config(cfg, is_train), **kwargs}
    augmentations = options.get("augmentations", UNSET)
    if augmentations is UNSET:
        raise MapperArgumentError(
            "DatasetMapper needs augmentations=[...] (a list, possibly empty) when it is not "
            "built from a config",
            argument="augmentations",
        )
    if isinstance(augmentations, (str, bytes, Mapping)) or not (
        isinstance(augmentations, (T.Augmentation, T.Transform))
        or hasattr(augmentations, "__iter__")
    ):
        raise MapperArgumentError(
            "DatasetMapper: augmentations must be a list of Augmentation / Transform objects, "
            f"got {type(augmentations).__name__}",
            argument="augmentations",
        )
    resolved = {name: options.get(name, default) for name, default in OPTION_DEFAULTS.items()}
    for name in _BOOLS:
        if not _is_flag(resolved[name]):
            raise MapperArgumentError(
                f"DatasetMapper: {name} must be True or False, got "
                f"{type(resolved[name]).__name__} {resolved[name]!r}",
                argument=name,
            )
        resolved[name] = bool(resolved[name])
    resolved["is_train"] = is_train
    return resolved


def _resize_and_flip(cfg: Any, is_train: bool) -> list[T.Augmentation]:
    """detectron2's ``build_augmentation``: ResizeShortestEdge, then RandomFlip in training."""
    if is_train:
        min_size = config_value(cfg, "INPUT.MIN_SIZE_TRAIN", (800,))
        max_size = config_value(cfg, "INPUT.MAX_SIZE_TRAIN", 1333)
        style = config_value(cfg, "INPUT.MIN_SIZE_TRAIN_SAMPLING", "choice")
    else:
        min_size = config_value(cfg, "INPUT.MIN_SIZE_TEST", 800)
        max_size = config_value(cfg, "INPUT.MAX_SIZE_TEST", 1333)
        style = "choice"
    augs: list[T.Augmentation] = [T.ResizeShortestEdge(min_size, max_size, style)]
    flip = config_value(cfg, "INPUT.RANDOM_FLIP", "horizontal")
    if is_train and flip != "none":
        if flip not in ("horizontal", "vertical"):
            raise ValueError(
                "config key INPUT.RANDOM_FLIP must be 'horizontal', 'vertical' or 'none', "
                f"got {flip!r}"
            )
        augs.append(T.RandomFlip(horizontal=flip == "horizontal", vertical=flip == "vertical"))
    return augs


def mapper_kwargs_from_config(cfg: Any, is_train: bool = True) -> dict[str, Any]:
    """The keyword arguments of DatasetMapper that a detectron2-style config describes.

    Args:
        cfg: yacs ``CfgNode``, OmegaConf ``DictConfig``, plain nested dict or attribute
            object; absent keys take detectron2's defaults.
        is_train: training (augment, keep annotations) or inference.

    Raises:
        ValueError: a config value out of range (named with its key).
        KeypointFlipError: KEYPOINT_ON and the training datasets' metadata lacks the
            keypoint names / flip map.
    """
    augs = _resize_and_flip(cfg, is_train)
    recompute_boxes = False
    mask_on = bool(config_value(cfg, "MODEL.MASK_ON", False))
    if is_train and config_value(cfg, "INPUT.CROP.ENABLED", False):
        crop_type = config_value(cfg, "INPUT.CROP.TYPE", "relative_range")
        crop_size = config_value(cfg, "INPUT.CROP.SIZE", [0.9, 0.9])
        augs.insert(0, T.RandomCrop(crop_type, crop_size))
        recompute_boxes = mask_on
    keypoint_on = bool(config_value(cfg, "MODEL.KEYPOINT_ON", False))
    indices = None
    if keypoint_on:
        datasets = config_value(cfg, "DATASETS.TRAIN", ())
        names = [datasets] if isinstance(datasets, str) else list(datasets)
        indices = create_keypoint_hflip_indices(names)
    topk = None
    if config_value(cfg, "MODEL.LOAD_PROPOSALS", False):
        key = "MODEL.RPN.POST_NMS_TOPK_TRAIN" if is_train else "MODEL.RPN.POST_NMS_TOPK_TEST"
        topk = int(config_value(cfg, key, 2000 if is_train else 1000))
    return {
        "is_train": is_train,
        "augmentations": augs,
        "image_format": config_value(cfg, "INPUT.FORMAT", "BGR"),
        "use_instance_mask": mask_on,
        "instance_mask_format": config_value(cfg, "INPUT.MASK_FORMAT", "polygon"),
        "use_keypoint": keypoint_on,
        "keypoint_hflip_indices": indices,
        "recompute_boxes": recompute_boxes,
        "precomputed_proposal_topk": topk,
    }
