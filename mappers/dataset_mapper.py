"""DatasetMapper: record dict -> model input (image tensor + Instances), detectron2-compatible.

A preset of the Compose steps of :mod:`mappers.pipeline_steps` (one pipeline
implementation): ``LoadImage`` → ``ApplyAugmentations`` → ``AnnotationsToInstances`` (training)
→ ``LoadProposals`` (with precomputed proposals) → ``ToTensor``. What it does:

1. copy the record (the caller's dict is never modified);
2. read the image (:func:`~mappers.image_io.read_image`, fast JPEG path, EXIF orientation)
   and check its size against the record's ``height`` / ``width``;
3. apply the augmentations to the image (and ``sem_seg`` when the record has a
   ``sem_seg_file_name``);
4. return ``image`` as a CHW uint8 tensor, plus in training ``instances`` built from the
   non-crowd annotations transformed the same way (empty instances filtered out;
   ``gt_boxes`` a :class:`~mappers.structures.Boxes`).

When every augmentation reads only the image's shape (resizes, flips, crops), the transforms
are drawn from the record's height/width before decoding, so a JPEG can be decoded at
reduced scale (``reduced_decode``) and flipped before it is resized (see
:class:`~mappers.pipeline_steps.PlannedLoad`).

``DatasetMapper(cfg, is_train)`` builds it from a detectron2-style config
(:mod:`mappers.mapper_config`).

The image tensor is a CHW *view* of the HWC array the augmentations produced (strides
``(1, W*C, C)``), not a copy: a contiguous CHW copy costs about as much as the resize. Models
normalize the image first, which produces a new contiguous tensor anyway; call
``.contiguous()`` if you need one.

Threads: torch runs one thread in DataLoader workers by itself. OpenCV is set to one thread
when catmap first imports it and again by the loader builders before workers start (see
``mappers.opencv_threads``): calling into OpenCV's pool inside a forked worker deadlocks when
the parent had already used it.
"""

from __future__ import annotations

import logging
from typing import Any

from . import transforms as T
from .compose import Compose
from .mapper_config import mapper_kwargs_from_config, resolve_call
from .pipeline_steps import (
    AnnotationsToInstances,
    ApplyAugmentations,
    LoadImage,
    LoadProposals,
    ToTensor,
)
from .image_io import (
    check_image_size,
    image_to_tensor,
    read_record_image,
    read_segmentation,
)
from .training_instances import InstanceOptions, annotations_to_training_instances

__all__ = [
    "DatasetMapper",
    "annotations_to_training_instances",
    "check_image_size",
    "image_to_tensor",
    "read_record_image",
    "read_segmentation",
]

logger = logging.getLogger(__name__)


def _instance_option(name: str, doc: str) -> property:
    """A read-only DatasetMapper attribute that shows one of its instance options."""
    return property(lambda mapper: getattr(mapper._instances.options, name), doc=doc)


class DatasetMapper:
    """Map a detectron2 record to the dict a detection model takes.

    Called as detectron2's: ``DatasetMapper(is_train, augmentations=[...], ...)`` or
    ``DatasetMapper(cfg, is_train=True)`` with a detectron2-style config (keywords given
    beside a config override what it says; see :meth:`from_config`).

    Args:
        is_train: training mode keeps annotations (as ``instances``); test mode drops them.
        augmentations: augmentations (or transforms) applied in order.
        image_format: "RGB", "BGR" or "L".
        use_instance_mask: keep ``segmentation`` and build ``gt_masks``.
        use_keypoint: keep ``keypoints`` and build ``gt_keypoints``.
        instance_mask_format: "polygon" or "bitmask".
        keypoint_hflip_indices: keypoint permutation applied after a horizontal flip (from
            metadata ``keypoint_flip_map``); needed with ``use_keypoint`` and flips.
        recompute_boxes: recompute boxes from the transformed masks (needs
            ``use_instance_mask``).
        precomputed_proposal_topk: keep this many of the record's precomputed proposals
            (``proposal_boxes`` ...) as ``proposals``; None: proposals are not read.
        skip_bad_images: an unreadable image makes the mapper return None (so MapDataset
            uses another record) and is counted in :attr:`num_skipped`, with one warning per
            file; otherwise :class:`~mappers.errors.ImageReadError` propagates.
        skip_bad_annotations: the same for a malformed annotation (RecordFormatError).
        decoder: force a JPEG decoder (see :func:`~mappers.image_io.read_image`).
        reduced_decode: when the augmentations shrink the image at least 2x in both sides
            (drawn before decoding from the record's height/width), decode the JPEG at 1/2,
            1/4 or 1/8 scale (never below the output size) and resize from there: much
            cheaper for small training scales, pixels close to (not equal to) a full decode.

    Returns (from ``__call__``):
        The record's keys plus ``image`` (CHW uint8 tensor, see the module notes), the
        original ``height``/``width``, ``sem_seg`` (int64 HxW tensor) when the record has a
        ``sem_seg_file_name``, in training ``instances``, and ``proposals`` when asked.
        None for a skipped record.

    Raises:
        MapperArgumentError: (a TypeError) a wrong call: an unknown keyword, too many
            positional arguments, no augmentations, a flag that is not a bool; names it.
        ValueError: an invalid option value or combination (at construction).
        ImageSizeMismatchError: the image's size differs from the record's.

    Example:
        >>> from mappers import transforms as T
        >>> mapper = DatasetMapper(True, augmentations=[T.ResizeShortestEdge(800, 1333),
        ...                                             T.RandomFlip()])
        >>> sample = mapper(record)  # doctest: +SKIP
        >>> sample["image"].shape, len(sample["instances"])  # doctest: +SKIP
        (torch.Size([3, 800, 1067]), 7)
        >>> DatasetMapper({"INPUT": {"MIN_SIZE_TEST": 600}}, is_train=False).augmentations
        AugmentationList[ResizeShortestEdge(short_edge_length=(600, 600), max_size=1333, sample_style='choice')]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        options = resolve_call(args, kwargs)
        self.is_train: bool = options["is_train"]
        self.image_format: str = options["image_format"]
        self.skip_bad_images: bool = options["skip_bad_images"]
        self.decoder: str | None = options["decoder"]
        self.reduced_decode: bool = options["reduced_decode"]
        if self.image_format not in ("RGB", "BGR", "L"):
            raise ValueError(
                "DatasetMapper: image_format must be 'RGB', 'BGR' or 'L', got "
                f"{self.image_format!r}"
            )
        self._load = LoadImage(
            self.image_format,
            skip_bad_images=self.skip_bad_images,
            decoder=self.decoder,
            reduced_decode=self.reduced_decode,
        )
        augmentations = options["augmentations"]
        if isinstance(augmentations, (T.Augmentation, T.Transform)):
            augmentations = [augmentations]
        self._augment = ApplyAugmentations(list(augmentations))
        instance_options = {
            name: options[name]
            for name in (
                "use_instance_mask",
                "use_keypoint",
                "instance_mask_format",
                "keypoint_hflip_indices",
                "recompute_boxes",
            )
        }
        InstanceOptions("DatasetMapper", **instance_options)  # errors name DatasetMapper
        self._instances = AnnotationsToInstances(
            **instance_options, skip_bad_annotations=options["skip_bad_annotations"]
        )
        for step in (self._load, self._instances):
            step.skips.owner = "DatasetMapper"
        steps: list[Any] = [self._load, self._augment]
        if self.is_train:
            steps.append(self._instances)
        topk = options["precomputed_proposal_topk"]
        self.precomputed_proposal_topk: int | None = topk
        if topk is not None:
            steps.append(LoadProposals(topk))
        steps.append(ToTensor())
        self.pipeline = Compose(steps)
        mode = "training" if self.is_train else "inference"
        logger.info("DatasetMapper in %s mode, augmentations: %s", mode, self.augmentations)

    @classmethod
    def from_config(cls, cfg: Any, is_train: bool = True) -> dict[str, Any]:
        """The keyword arguments a detectron2-style config gives (as detectron2's).

        Example:
            >>> kwargs = DatasetMapper.from_config({"MODEL": {"MASK_ON": True}}, True)
            >>> kwargs["use_instance_mask"], kwargs["image_format"]
            (True, 'BGR')
        """
        return mapper_kwargs_from_config(cfg, is_train)

    @property
    def augmentations(self) -> T.AugmentationList:
        """The augmentations applied, in order."""
        return self._augment.augmentations

    use_instance_mask = _instance_option("use_instance_mask", "Whether ``gt_masks`` is built.")
    use_keypoint = _instance_option("use_keypoint", "Whether ``gt_keypoints`` is built.")
    instance_mask_format = _instance_option("instance_mask_format", '"polygon" or "bitmask".')
    keypoint_hflip_indices = _instance_option(
        "keypoint_hflip_indices", "The keypoint permutation applied after a horizontal flip."
    )
    recompute_boxes = _instance_option(
        "recompute_boxes", "Whether boxes are recomputed from the transformed masks."
    )

    @property
    def num_skipped(self) -> int:
        """Records skipped so far in this process (unreadable images, bad annotations)."""
        return self._load.num_skipped + self._instances.num_skipped

    def __call__(self, dataset_dict: dict[str, Any]) -> dict[str, Any] | None:
        """Map one record (left unmodified); see the class docstring."""
        out = self.pipeline(dataset_dict)
        if out is None:
            return None
        out.pop("transforms", None)
        if not self.is_train:
            out.pop("annotations", None)
        return out

    def __repr__(self) -> str:
        return (
            f"DatasetMapper(is_train={self.is_train}, augmentations={self.augmentations!r}, "
            f"image_format={self.image_format!r}, use_instance_mask={self.use_instance_mask}, "
            f"use_keypoint={self.use_keypoint}, instance_mask_format="
            f"{self.instance_mask_format!r}, recompute_boxes={self.recompute_boxes}, "
            f"skip_bad_images={self.skip_bad_images})"
        )
