"""DatasetMapper: record dict -> model input (``__call__`` top to bottom), the steps it
shares with :mod:`mappers.compose` pipelines (``LoadImage``, ``LoadProposals``) and the
planned read-and-augment of an image.

Example:
    >>> from mappers import transforms as T
    >>> mapper = DatasetMapper(True, augmentations=[T.ResizeShortestEdge(800, 1333),
    ...                                             T.RandomFlip()])
    >>> sample = mapper(record)  # doctest: +SKIP
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from catalog.box_mode import BoxMode
from catalog._common import (
    RecordFormatError, check_int, config_value, is_detectron2_config, plain_container,
    warn_limited)
from catalog.registry import Registry

from . import transforms as T
from .annotations import InstanceOptions, annotations_to_training_instances
from .errors import ImageReadError, MapperArgumentError, PipelineStepError
from .instances import Instances, as_detectron2_types
from .keypoint_annotations import create_keypoint_hflip_indices
from .image_io import (
    check_image_size, get_image_limits, image_to_tensor, read_file_bytes, read_record_image,
    read_segmentation, read_sized_image, record_image_size, record_name)
from .structures import Boxes
from .transforms.transform import (
    HFlipTransform, NoOpTransform, ResizeTransform, TransformList, VFlipTransform,
    as_transform_list)
from .transforms.resample import get_cv2

__all__ = [
    "AUGMENTATIONS", "TRANSFORMS", "annotations_to_training_instances", "apply_planned_image",
    "build_augmentations", "build_from_config", "check_image_size", "DatasetMapper",
    "image_output_space", "image_size_of", "image_to_tensor", "LoadImage", "LoadProposals",
    "read_and_augment", "read_record_image", "read_segmentation", "reduced_decode_size",
    "SkippingStep"
]

logger = logging.getLogger(__name__)

#: Pipeline steps usable as ``{"type": "Name", ...}`` in a Compose config.
TRANSFORMS = Registry("transform")
#: The augmentations a config names: every name in ``mappers.transforms.__all__``.
AUGMENTATIONS = Registry("augmentation", module=T)
_FORMATS = ("RGB", "BGR", "L")
_READ_AHEAD = 4 << 20  # a larger image file is read in the read pass (bytes held per batch)
_MAX_WARNED_FILES = 4096


class SkippingStep:
    """A step that may skip bad records (returns None, so MapDataset uses another one): it
    counts them in ``num_skipped`` and warns once per file, naming ``owner``."""

    owner = ""
    num_skipped = 0

    def _skip(self, exc: BaseException, file_name: object, what: str) -> None:
        self.num_skipped += 1
        warned = self.__dict__.setdefault("_warned", set())
        key = str(file_name)
        full = len(warned) >= _MAX_WARNED_FILES
        if key in warned or (full and self.num_skipped & (self.num_skipped - 1)):
            return
        if len(warned) < _MAX_WARNED_FILES:
            warned.add(key)
        warn_limited(
            logger,
            f"{self.owner}.skip_{what}",
            "%s: skipping a record with unusable %s, %s (%s); %d skipped so far in this process",
            self.owner, what, key, exc, self.num_skipped,
        )


def image_size_of(results: dict[str, Any], step: str) -> tuple[int, int]:
    """(height, width) of ``results["image"]`` (HxWxC array or CxHxW tensor)."""
    image = results.get("image")
    if image is None:
        raise RecordFormatError(
            f"{step}: record ({record_name(results)}) has no 'image'; it must come after LoadImage")
    height, width = image.shape[-2:] if isinstance(image, torch.Tensor) else np.shape(image)[:2]
    return int(height), int(width)


@TRANSFORMS.register()
class LoadImage(SkippingStep):
    """Read ``results[key]`` into ``results["image"]`` (HWC uint8) and check its size.

    Also reads ``sem_seg_file_name`` into ``sem_seg``. With ``skip_bad_images`` an unreadable
    image returns None instead of raising ImageReadError. ``reduced_decode``: see DatasetMapper.
    """

    def __init__(
        self,
        format: str = "RGB",
        key: str = "file_name",
        skip_bad_images: bool = False,
        decoder: str | None = None,
        reduced_decode: bool = False,
    ) -> None:
        if format not in _FORMATS:
            raise ValueError(f"LoadImage: format must be 'RGB', 'BGR' or 'L', got {format!r}")
        self.format = format
        self.key = key
        self.skip_bad_images = bool(skip_bad_images)
        self.decoder = decoder
        self.reduced_decode = bool(reduced_decode)
        self.owner = "LoadImage"

    def __call__(self, results: dict[str, Any]) -> dict[str, Any] | None:
        results = dict(results)
        return self.load(results, record_image_size(results))

    def load(
        self,
        results: dict[str, Any],
        size: tuple[int, int] | None,
        min_size: tuple[int, int] | None = None,
        data: bytes | None = None,
    ) -> dict[str, Any] | None:
        """Read the image into ``results`` (the caller's own copy); ``size``: the record's
        checked (h, w) or None; ``min_size`` allows a reduced JPEG decode down to it; ``data``:
        the file's bytes, read ahead."""
        if self.key != "file_name":
            if self.key not in results:
                raise RecordFormatError(
                    f"LoadImage: record ({record_name(results)}) has no key {self.key!r}")
            results["file_name"] = results[self.key]
        try:
            results["image"] = read_sized_image(results, size, self.format, self.decoder, min_size,
                                                data)
        except ImageReadError as exc:
            if not self.skip_bad_images:
                raise
            self._skip(exc, exc.path, "image")
            return None
        if "sem_seg_file_name" in results:
            results["sem_seg"] = read_segmentation(results.pop("sem_seg_file_name"))
        return results

    def __repr__(self) -> str:
        return f"LoadImage(format={self.format!r}, key={self.key!r})"


def build_from_config(entry: Mapping[str, Any], registry: Registry, where: str) -> Any:
    """Build ``{"type": name or class, **kwargs}`` through ``registry``; errors name ``where``."""
    if "type" not in entry:
        raise PipelineStepError(f"{where}: no 'type' key in {dict(entry)!r}")
    kwargs = plain_container(entry)  # a DictConfig's ListConfig values become lists
    name = kwargs.pop("type")
    target = registry.get(name) if isinstance(name, str) else name  # KeyError: close matches
    try:
        return target(**kwargs)
    except TypeError as exc:
        raise PipelineStepError(f"{where}: cannot build {name!r} from {kwargs!r}: {exc}") from exc


def build_augmentations(augmentations: Sequence[Any], owner: str) -> T.AugmentationList:
    """An AugmentationList of objects and ``{"type": ...}`` dicts (built through
    :data:`AUGMENTATIONS`); errors name ``owner``."""
    built = list(augmentations)
    for i, entry in enumerate(built):
        if isinstance(entry, Mapping):
            where = f"{owner} entry {i}"
            try:
                built[i] = build_from_config(entry, AUGMENTATIONS, where)
            except KeyError as exc:
                raise PipelineStepError(f"{where}: {exc}") from exc
    return T.AugmentationList(built)


_FUSABLE = frozenset({HFlipTransform, VFlipTransform, ResizeTransform, NoOpTransform})

#: Where a planned resize writes the output image: a loader worker sets a function
#: ``(shape, dtype) -> array or None`` handing out space in the batch's shared-memory slab,
#: so the image is resized straight into the memory the training process reads (no copy of
#: the batch afterwards). Unset (None): numpy allocates the image.
image_output_space: contextvars.ContextVar[
    Callable[[tuple[int, ...], np.dtype], np.ndarray | None] | None
] = contextvars.ContextVar("catmap_image_output_space", default=None)


def reduced_decode_size(transforms: TransformList) -> tuple[int, int] | None:
    """The output size when a plan of flips and one resize shrinks 2x or more on both sides
    (a JPEG can then be decoded at reduced scale); None for any other plan."""
    resizes = [t for t in transforms.transforms if type(t) is ResizeTransform]
    if len(resizes) != 1 or any(type(t) not in _FUSABLE for t in transforms.transforms):
        return None
    only = resizes[0]
    if 2 * only.new_h <= only.h and 2 * only.new_w <= only.w:
        return only.new_h, only.new_w
    return None


class _PreparedRecord(NamedTuple):
    """A record's copy, size, drawn transforms, instances, file bytes (``DatasetMapper.prepare``)
    and, once ``DatasetMapper.read`` ran, its image, sem_seg and transforms (False: skipped)."""

    sample: dict[str, Any]
    size: tuple[int, int] | None
    plan: TransformList | None
    instances: Instances | None
    data: bytes | None = None  # the image file's bytes, read ahead (until ``read``)
    loaded: tuple[np.ndarray, np.ndarray | None, TransformList] | bool | None = None


def apply_planned_image(
    image: np.ndarray, transforms: T.Transform | Sequence[T.Transform], *, owned: bool = False
) -> np.ndarray:
    """Apply planned transforms to a decoded image (flipped in place when ``owned``).

    A plan of flips and resizes flips first, with OpenCV (equal up to rounding; the resize
    then reads a dense array and 2-3x fewer bytes move); an image smaller than the one resize
    expects (reduced JPEG decode) is resized from its own size.

    Example:
        >>> plan = TransformList([ResizeTransform(4, 6, 2, 3), HFlipTransform(3)])
        >>> apply_planned_image(np.zeros((4, 6, 3), np.uint8), plan).shape
        (2, 3, 3)
    """
    transforms = as_transform_list(transforms)
    horizontal = vertical = False
    resizes = []
    for tfm in transforms.transforms:
        if type(tfm) not in _FUSABLE:
            return transforms.apply_image(image)
        horizontal ^= type(tfm) is HFlipTransform
        vertical ^= type(tfm) is VFlipTransform
        if type(tfm) is ResizeTransform:
            resizes.append(tfm)
    cv2 = get_cv2()
    if (horizontal or vertical) and cv2 is not None and image.flags.c_contiguous and (
        image.dtype == np.uint8 and image.ndim == 3 and 1 <= image.shape[2] <= 4 and image.size
    ):
        code = -1 if horizontal and vertical else 1 if horizontal else 0
        out = cv2.flip(image, code, dst=image if owned and image.flags.writeable else None)
        image = out[:, :, None] if out.ndim == 2 else out  # cv2 drops a channel axis of 1
    else:
        image = image[:, ::-1] if horizontal else image
        image = image[::-1] if vertical else image  # views: the resize makes them dense
    if len(resizes) == 1 and image.shape[:2] != (resizes[0].h, resizes[0].w):
        only = resizes[0]  # decoded at reduced scale: one resize to the planned output size
        resizes = [ResizeTransform(*image.shape[:2], only.new_h, only.new_w, only.interp,
                                   only.backend)]
    space = image_output_space.get()
    for number, tfm in enumerate(resizes, 1):  # the last one makes the output image
        image = tfm.apply_image(image, output_space=space if number == len(resizes) else None)
    return image


def _plan_record(
    results: dict[str, Any], load: LoadImage, augmentations: T.AugmentationList
) -> tuple[tuple[int, int] | None, TransformList | None]:
    """(the record's checked size, the transforms drawn from it): drawn before decoding when
    the size is known and the augmentations read only the shape, else (size or None, None)."""
    size = record_image_size(results)  # RecordFormatError for a malformed height/width
    if size is None or "sem_seg_file_name" in results:
        return size, None
    return size, augmentations.plan((size[0], size[1], 1 if load.format == "L" else 3))


def read_and_augment(
    results: dict[str, Any], load: LoadImage, augmentations: T.AugmentationList,
    planned: tuple[tuple[int, int] | None, TransformList | None] | None = None,
    data: bytes | None = None,
) -> tuple[np.ndarray, np.ndarray | None, TransformList] | None:
    """Read ``results``' image (and ``sem_seg_file_name``, popped) and augment it: (image,
    sem_seg, transforms), or None for a skipped image. The transforms are drawn from the
    record's size before decoding (:func:`_plan_record`, or ``planned``, its result) when the
    augmentations read only the shape: the same draws either way, the image equal up to
    rounding (a flip runs before a resize). ``data``: the image file's bytes, read ahead."""
    size, plan = _plan_record(results, load, augmentations) if planned is None else planned
    min_size = reduced_decode_size(plan) if plan is not None and load.reduced_decode else None
    if load.load(results, size, min_size, data) is None:
        return None
    image, sem_seg = results.pop("image"), results.pop("sem_seg", None)
    if plan is None and size is None and sem_seg is None:
        plan = augmentations.plan(image.shape)  # known now
    if plan is not None:
        return apply_planned_image(image, plan, owned=True), None, plan
    aug_input = T.AugInput(image, sem_seg=sem_seg)
    plan = augmentations(aug_input)
    return aug_input.image, aug_input.sem_seg, plan


@TRANSFORMS.register()
class LoadProposals:
    """The record's precomputed ``proposal_boxes`` / ``proposal_objectness_logits`` /
    ``proposal_bbox_mode`` (detectron2's LOAD_PROPOSALS) as ``proposals`` Instances: moved
    with ``transforms``, clipped, boxes with a side <= ``min_box_size`` dropped, the first
    ``topk`` kept. Records without proposals pass unchanged."""

    def __init__(self, topk: int, min_box_size: float = 0.0) -> None:
        self.topk = check_int(topk, "topk", minimum=0, error=ValueError, where="LoadProposals")
        self.min_box_size = float(min_box_size)

    def __call__(self, results: dict[str, Any]) -> dict[str, Any]:
        if "proposal_boxes" not in results:
            return results
        results = dict(results)
        transforms = results.get("transforms")
        transforms = T.NoOpTransform() if transforms is None else transforms
        results["proposals"] = self.proposals(
            results, transforms, image_size_of(results, "LoadProposals"))
        return results

    def proposals(
        self, results: dict[str, Any], transforms: T.Transform, image_size: tuple[int, int]
    ) -> Instances:
        """Pop the proposal keys of ``results`` (a copy) into Instances moved with
        ``transforms`` to an image of ``image_size``."""
        height, width = image_size
        name = record_name(results)
        try:
            boxes = np.asarray(results.pop("proposal_boxes"), dtype=np.float64).reshape(-1, 4)
            logits = np.asarray(results.pop("proposal_objectness_logits"), np.float32).reshape(-1)
            mode = BoxMode(results.pop("proposal_bbox_mode", BoxMode.XYXY_ABS))
        except KeyError as exc:
            raise RecordFormatError(f"record ({name}): missing proposal key {exc}") from None
        except (TypeError, ValueError) as exc:
            raise RecordFormatError(f"record ({name}): malformed proposals ({exc})") from None
        if len(logits) != len(boxes):
            raise RecordFormatError(
                f"record ({name}): {len(boxes)} 'proposal_boxes' but "
                f"{len(logits)} 'proposal_objectness_logits'")
        if mode != BoxMode.XYXY_ABS:
            boxes = np.asarray(BoxMode.convert(boxes, mode, BoxMode.XYXY_ABS), dtype=np.float64)
        if len(boxes):
            boxes = np.asarray(transforms.apply_box(boxes), dtype=np.float64)
            boxes = np.minimum(np.maximum(boxes, 0.0), (width, height, width, height))
        boxes32 = boxes.astype(np.float32)
        sides = boxes32[:, 2:] - boxes32[:, :2]
        keep = (sides[:, 0] > self.min_box_size) & (sides[:, 1] > self.min_box_size)
        proposals = Instances((height, width))
        proposals.proposal_boxes = Boxes(torch.from_numpy(boxes32[keep][: self.topk].copy()))
        proposals.objectness_logits = torch.from_numpy(logits[keep][: self.topk].copy())
        return proposals

    def __repr__(self) -> str:
        return f"LoadProposals(topk={self.topk})"


# ------------------------------------------------------------------------------ DatasetMapper

_UNSET: Any = object()
_OPTION_DEFAULTS: dict[str, Any] = {
    "augmentations": _UNSET,
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
_FLAGS = ("use_instance_mask", "use_keypoint", "recompute_boxes", "skip_bad_images",
          "skip_bad_annotations", "reduced_decode")
_INSTANCE_OPTIONS = ("use_instance_mask", "use_keypoint", "instance_mask_format",
                     "keypoint_hflip_indices", "recompute_boxes")


def _check_flag(value: Any, name: str, hint: str = "") -> bool:
    is_flag = type(value).__name__ in ("bool", "bool_") or (
        isinstance(value, int) and value in (0, 1))
    if not is_flag:
        raise MapperArgumentError(
            f"DatasetMapper: {name} must be True or False{hint}, got "
            f"{type(value).__name__} {value!r}",
            argument=name,
        )
    return bool(value)


def _resolve_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """All of DatasetMapper's options (``is_train`` included) from one constructor call:
    a config first (``is_train`` may follow; keywords override it), or ``is_train`` alone."""
    kwargs = dict(kwargs)
    unknown = sorted(set(kwargs) - set(_OPTION_DEFAULTS) - {"is_train", "cfg"})
    if unknown:
        raise MapperArgumentError(
            f"DatasetMapper got unexpected keyword argument(s) {unknown}; it takes cfg, "
            f"is_train and {sorted(_OPTION_DEFAULTS)}",
            argument=unknown[0],
        )
    positional = list(args)
    cfg = kwargs.pop("cfg", _UNSET)
    if cfg is _UNSET and positional and is_detectron2_config(positional[0]):
        cfg = positional.pop(0)
    if cfg is not _UNSET and not is_detectron2_config(cfg):
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
            "DatasetMapper got is_train both by position and by keyword", argument="is_train")
    is_train = _check_flag(
        positional[0] if positional else kwargs.pop("is_train", True), "is_train",
        " (the first argument may also be a detectron2-style config)",
    )
    kwargs.pop("is_train", None)
    options = kwargs if cfg is _UNSET else {**DatasetMapper.from_config(cfg, is_train), **kwargs}
    augmentations = options.get("augmentations", _UNSET)
    if augmentations is _UNSET:
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
    resolved = {**_OPTION_DEFAULTS, **options}  # options holds only known names (checked)
    for name in _FLAGS:
        resolved[name] = _check_flag(resolved[name], name)
    resolved["is_train"] = is_train
    return resolved


class DatasetMapper:
    """Map a detectron2 record to the dict a detection model takes (detectron2-compatible).

    Called as ``DatasetMapper(is_train, augmentations=[...], ...)`` or
    ``DatasetMapper(cfg, is_train=True)`` (keywords beside a config override it).

    ``skip_bad_images`` / ``skip_bad_annotations`` return None (MapDataset uses another
    record), counted in ``num_skipped`` (this process); ``reduced_decode`` decodes a JPEG at
    1/2, 1/4 or 1/8 scale when the augmentations shrink it that much (close to, not equal to,
    full decode). The steps, top to bottom, are in ``__call__``.

    Example:
        >>> DatasetMapper({"INPUT": {"MIN_SIZE_TEST": 600}}, is_train=False).augmentations
        AugmentationList[ResizeShortestEdge(short_edge_length=(600, 600), max_size=1333, sample_style='choice')]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        options = _resolve_arguments(args, kwargs)
        self.is_train: bool = options["is_train"]
        self.image_format: str = options["image_format"]
        self.skip_bad_images: bool = options["skip_bad_images"]
        self.decoder: str | None = options["decoder"]
        self.reduced_decode: bool = options["reduced_decode"]
        self.precomputed_proposal_topk: int | None = options["precomputed_proposal_topk"]
        if self.image_format not in _FORMATS:
            raise ValueError(
                "DatasetMapper: image_format must be 'RGB', 'BGR' or 'L', got "
                f"{self.image_format!r}")
        augmentations = options["augmentations"]
        if isinstance(augmentations, (T.Augmentation, T.Transform)):
            augmentations = [augmentations]
        self.augmentations = build_augmentations(augmentations, "ApplyAugmentations")
        self.skip_bad_annotations: bool = options["skip_bad_annotations"]
        instance_options = dict(zip(_INSTANCE_OPTIONS, map(options.get, _INSTANCE_OPTIONS)))
        self._options = InstanceOptions("DatasetMapper", **instance_options)
        self._load = LoadImage(self.image_format, skip_bad_images=self.skip_bad_images,
                               decoder=self.decoder, reduced_decode=self.reduced_decode)
        self._load.owner = "DatasetMapper"  # it counts and reports every skipped record
        topk = self.precomputed_proposal_topk
        self._proposals = LoadProposals(topk) if topk is not None else None
        mode = "training" if self.is_train else "inference"
        logger.info("DatasetMapper in %s mode, augmentations: %s", mode, self.augmentations)

    @property
    def uses_global_rngs(self) -> bool:
        """Whether mapping may draw from ``random``, numpy's or torch's global RNG. catmap's own
        augmentations draw only from the sample's generator, so a loader skips seeding those
        per sample; any other augmentation (or a subclass of this mapper) may use them."""
        if type(self) is not DatasetMapper:
            return True
        pending: list[T.Augmentation] = [self.augmentations]
        while pending:
            aug = pending.pop()
            if type(aug) is T.AugmentationList or type(aug) is T.RandomApply:
                pending.extend(aug.augs if type(aug) is T.AugmentationList else [aug.aug])
            elif type(aug).__module__ != T.RandomFlip.__module__:  # not augmentation_impl's
                return True
        return False

    def __call__(self, dataset_dict: dict[str, Any]) -> dict[str, Any] | None:
        """Map one record (left unmodified) to its keys plus ``image`` (CHW uint8), ``sem_seg``,
        ``instances`` (training), ``proposals``; None for a skipped record."""
        return self.finish(self.prepare(dataset_dict))

    def prepare(self, dataset_dict: dict[str, Any]) -> _PreparedRecord:
        """The part of mapping a record that needs no pixels: its copy, the transforms drawn
        from its size, the training instances, its file's bytes. A loader worker prepares a
        batch's records before decoding their images: between two images, this Python costs
        several times as much.

        Example:
            >>> mapper = DatasetMapper(is_train=True, augmentations=[])
            >>> mapper.prepare({"file_name": "a.jpg", "height": 4, "width": 6}).size
            (4, 6)
        """
        sample = dict(dataset_dict)
        size, plan = _plan_record(sample, self._load, self.augmentations)
        output_size, instances = None, None  # known for plans apply_planned_image fuses
        if plan is not None and _FUSABLE.issuperset(map(type, plan.transforms)):
            output_size = size  # the last resize's, if any (inline: fewer calls per record)
            for tfm in plan.transforms:
                if type(tfm) is ResizeTransform:
                    output_size = tfm.new_h, tfm.new_w
        annotations = sample.get("annotations")
        if self.is_train and annotations is not None and output_size is not None:
            try:
                instances = self._options.instances(list(map(dict, annotations)), plan,
                                                    output_size, file_name=sample.get("file_name"))
            except Exception:  # noqa: BLE001 (finish makes them again and raises as before)
                instances = None
        try:  # a local file's bytes (up to 4 MiB) now: the read pass then decodes back to back
            local = plan is not None and "://" not in os.fsdecode(sample["file_name"])
            limit = min(get_image_limits().max_bytes or _READ_AHEAD, _READ_AHEAD)
            data = read_file_bytes(sample["file_name"], limit) if local else None
        except Exception:  # noqa: BLE001 (missing, too large ...: read there, raised there)
            data = None
        return _PreparedRecord(sample, size, plan, instances, data)

    def read(self, prepared: _PreparedRecord) -> _PreparedRecord:
        """``prepared`` with its image read, decoded and augmented: a loader worker does a
        batch's pixel work back to back, so the rest of ``finish`` runs warm. On any error,
        ``prepared`` unchanged (``finish`` reads again and raises in its place); also without
        a plan (no record size): drawing from the decoded image needs the sample's scope."""
        if prepared.plan is None:
            return prepared
        try:
            loaded = read_and_augment(prepared.sample, self._load, self.augmentations,
                                      (prepared.size, prepared.plan), prepared.data)
        except Exception:  # noqa: BLE001
            return prepared
        return prepared._replace(data=None, loaded=loaded or False)

    def finish(self, prepared: _PreparedRecord) -> dict[str, Any] | None:
        """Map a prepared record (see :meth:`prepare`); None for a skipped record."""
        sample, loaded = prepared.sample, prepared.loaded
        if loaded is None:
            loaded = read_and_augment(sample, self._load, self.augmentations,
                                      (prepared.size, prepared.plan), prepared.data)
        if not loaded:
            return None
        image, sem_seg, transforms = loaded
        sample["image"] = image_to_tensor(image)  # CHW, sharing the image's memory
        if sem_seg is not None:
            sample["sem_seg"] = torch.as_tensor(sem_seg.astype(np.int64))
        annotations = sample.pop("annotations", None)
        if self.is_train and prepared.instances is not None:
            sample["instances"] = prepared.instances
        elif self.is_train and annotations is not None:
            try:
                sample["instances"] = self._options.instances(
                    list(map(dict, annotations)), transforms, image.shape[:2],
                    file_name=sample.get("file_name"),
                )
            except RecordFormatError as exc:
                if not self.skip_bad_annotations:
                    raise
                self._load._skip(exc, sample.get("file_name"), "annotations")
                return None
        if self._proposals is not None and "proposal_boxes" in sample:
            sample["proposals"] = self._proposals.proposals(sample, transforms, image.shape[:2])
        return as_detectron2_types(sample)  # detectron2's classes when detectron2 is imported

    @classmethod
    def from_config(cls, cfg: Any, is_train: bool = True) -> dict[str, Any]:
        """The keyword arguments a detectron2-style config gives (yacs, OmegaConf or a nested
        dict; detectron2's defaults for absent keys), as detectron2's ``from_config``.

        Example:
            >>> kwargs = DatasetMapper.from_config({"MODEL": {"MASK_ON": True}}, True)
            >>> kwargs["use_instance_mask"], kwargs["image_format"]
            (True, 'BGR')
        """
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
                    f"got {flip!r}")
            augs.append(T.RandomFlip(horizontal=flip == "horizontal", vertical=flip == "vertical"))
        mask_on = bool(config_value(cfg, "MODEL.MASK_ON", False))
        recompute_boxes = False
        if is_train and config_value(cfg, "INPUT.CROP.ENABLED", False):
            crop_type = config_value(cfg, "INPUT.CROP.TYPE", "relative_range")
            crop_size = config_value(cfg, "INPUT.CROP.SIZE", [0.9, 0.9])
            augs.insert(0, T.RandomCrop(crop_type, crop_size))
            recompute_boxes = mask_on  # boxes from the cropped masks, as detectron2
        keypoint_on = bool(config_value(cfg, "MODEL.KEYPOINT_ON", False))
        indices = None
        if keypoint_on:
            datasets = config_value(cfg, "DATASETS.TRAIN", ())
            indices = create_keypoint_hflip_indices(
                [datasets] if isinstance(datasets, str) else list(datasets))
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

    use_instance_mask = property(lambda self: self._options.use_instance_mask)
    use_keypoint = property(lambda self: self._options.use_keypoint)
    instance_mask_format = property(lambda self: self._options.instance_mask_format)
    keypoint_hflip_indices = property(lambda self: self._options.keypoint_hflip_indices)
    recompute_boxes = property(lambda self: self._options.recompute_boxes)

    @property
    def num_skipped(self) -> int:
        """Records skipped so far in this process (unreadable images, bad annotations)."""
        return self._load.num_skipped

    def __repr__(self) -> str:
        return (
            f"DatasetMapper(is_train={self.is_train}, augmentations={self.augmentations!r}, "
            f"image_format={self.image_format!r}, use_instance_mask={self.use_instance_mask}, "
            f"use_keypoint={self.use_keypoint}, instance_mask_format="
            f"{self.instance_mask_format!r}, recompute_boxes={self.recompute_boxes}, "
            f"skip_bad_images={self.skip_bad_images})")
