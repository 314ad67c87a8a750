"""The COCO evaluation bridge: predictions to COCO results, and pycocotools' COCOeval against
a registered dataset.

:func:`instances_to_coco_results` turns one image's predictions (any object with
``pred_boxes``, ``scores``, ``pred_classes`` and optionally ``pred_masks`` /
``pred_keypoints``, as detectron2's and catmap's ``Instances``) into COCO result dicts;
:func:`write_coco_results` writes them; :func:`evaluate_coco` runs ``COCOeval`` and returns
detectron2's metric dicts (AP in percent, 0..100; NaN where a metric cannot be computed).

pycocotools is an optional dependency (``pip install "catmap[coco]"``); it is needed for
masks and for :func:`evaluate_coco` only.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .coco_export import convert_to_coco_dict, convert_to_coco_json
from .coco_json import parse_json_bytes
from .errors import missing_dependency
from .format_errors import CocoEvaluationError
from .metadata import MetadataCatalog
from .safe_parse import read_bytes
from .validation import is_int

__all__ = [
    "IOU_TYPES",
    "METRIC_NAMES",
    "evaluate_coco",
    "instances_to_coco_results",
    "write_coco_results",
]

logger = logging.getLogger(__name__)

#: The evaluation kinds COCOeval knows, and the result field each needs.
IOU_TYPES = {"bbox": "bbox", "segm": "segmentation", "keypoints": "keypoints"}
#: The metrics reported per kind, in COCOeval's ``stats`` order (as detectron2 names them).
METRIC_NAMES = {
    "bbox": ("AP", "AP50", "AP75", "APs", "APm", "APl"),
    "segm": ("AP", "AP50", "AP75", "APs", "APm", "APl"),
    "keypoints": ("AP", "AP50", "AP75", "APm", "APl"),
}
#: Largest results or ground-truth json file read.
MAX_JSON_BYTES = 4 * 1024**3


def _pycocotools() -> tuple[Any, Any, Any]:
    try:
        from pycocotools import mask as mask_util
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise missing_dependency("pycocotools", "coco", "COCO evaluation") from None
    return mask_util, COCO, COCOeval


def _field(instances: Any, name: str) -> Any:
    if isinstance(instances, Mapping):
        return instances.get(name)
    has = getattr(instances, "has", None)
    if callable(has):
        return getattr(instances, name) if has(name) else None
    return getattr(instances, name, None)


def _numpy(value: Any) -> np.ndarray:
    value = getattr(value, "tensor", value)  # Boxes / BitMasks / Keypoints keep a .tensor
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _reverse_map(metadata: Any) -> dict[int, int] | None:
    if metadata is None:
        return None
    if isinstance(metadata, str):
        metadata = MetadataCatalog.get(metadata)
    id_map = metadata.get("thing_dataset_id_to_contiguous_id")
    return None if id_map is None else {int(v): int(k) for k, v in id_map.items()}


def instances_to_coco_results(
    instances: Any, image_id: int | str, metadata: Any = None
) -> list[dict[str, Any]]:
    """One image's predictions as COCO result dicts.

    Args:
        instances: predictions with ``pred_boxes`` (XYXY_ABS; a ``Boxes``-like object with
            ``.tensor``, a tensor or an array of shape (N, 4)), ``scores`` (N,),
            ``pred_classes`` (N,, contiguous ids) and optionally ``pred_masks`` (N, H, W
            booleans, written as compressed RLE) and ``pred_keypoints`` (N, K, 3: x, y,
            score). Read through ``has``/attributes (``Instances``) or as a mapping.
        image_id: the image's id in the dataset (the record's ``image_id``).
        metadata: a dataset name, ``Metadata`` or mapping whose
            ``thing_dataset_id_to_contiguous_id`` maps classes back to dataset category ids;
            None keeps the contiguous ids.

    Returns:
        ``[{"image_id", "category_id", "bbox" (XYWH_ABS), "score", "segmentation"?,
        "keypoints"?}]``; keypoints are shifted back by 0.5, as detectron2 writes them.

    Raises:
        CocoEvaluationError: a field is missing or has the wrong shape, a value is not finite,
            or a class is not in the id map (names the image id and the field).
        MissingDependencyError: masks are given and pycocotools is not installed.

    Example:
        >>> import torch
        >>> preds = {"pred_boxes": torch.tensor([[10., 20., 30., 60.]]),
        ...          "scores": torch.tensor([0.5]), "pred_classes": torch.tensor([0])}
        >>> instances_to_coco_results(preds, 42, {"thing_dataset_id_to_contiguous_id": {7: 0}})
        [{'image_id': 42, 'category_id': 7, 'bbox': [10.0, 20.0, 20.0, 40.0], 'score': 0.5}]
    """
    if not (is_int(image_id) or isinstance(image_id, str)):
        raise CocoEvaluationError(f"image_id must be an int or a str, got {image_id!r}",
                                  image_id=image_id, key="image_id")
    image_id = image_id if isinstance(image_id, str) else int(image_id)
    num = len(instances) if not isinstance(instances, Mapping) else None

    def fail(key: str, problem: str) -> CocoEvaluationError:
        return CocoEvaluationError(f"predictions of image_id {image_id!r}: {key} {problem}",
                                   image_id=image_id, key=key)

    arrays: dict[str, np.ndarray] = {}
    for key in ("pred_boxes", "scores", "pred_classes", "pred_masks", "pred_keypoints"):
        value = _field(instances, key)
        if value is None:
            if key in ("pred_boxes", "scores", "pred_classes"):
                raise fail(key, "is missing (needed for every COCO result)")
            continue
        arrays[key] = _numpy(value)
    boxes, scores, classes = arrays["pred_boxes"], arrays["scores"], arrays["pred_classes"]
    num = len(boxes) if num is None else num
    if boxes.shape != (num, 4):
        raise fail("pred_boxes", f"must have shape ({num}, 4), got {boxes.shape}")
    for key, array in (("scores", scores), ("pred_classes", classes)):
        if array.shape != (num,):
            raise fail(key, f"must have shape ({num},), got {array.shape}")
    if not (np.isfinite(boxes).all() and np.isfinite(scores).all()):
        raise fail("pred_boxes/scores", "hold a value that is not finite")
    if num and not (np.issubdtype(classes.dtype, np.integer) or
                    np.array_equal(classes, np.round(classes))):
        raise fail("pred_classes", f"must be integer class ids, got dtype {classes.dtype}")
    reverse = _reverse_map(metadata)
    categories = [int(c) for c in classes.tolist()]
    if reverse is not None:
        unknown = sorted({c for c in categories if c not in reverse})
        if unknown:
            raise fail("pred_classes", f"holds contiguous ids {unknown} that are not in the "
                       f"metadata's thing_dataset_id_to_contiguous_id (0..{len(reverse) - 1})")
        categories = [reverse[c] for c in categories]
    xywh = boxes.astype(np.float64)
    xywh[:, 2:] -= xywh[:, :2]
    results = [
        {"image_id": image_id, "category_id": c, "bbox": b, "score": float(s)}
        for c, b, s in zip(categories, xywh.tolist(), scores.tolist(), strict=True)
    ]
    if "pred_masks" in arrays and num:
        masks = arrays["pred_masks"]
        if masks.ndim != 3 or len(masks) != num:
            raise fail("pred_masks", f"must have shape ({num}, H, W), got {masks.shape}")
        mask_util = _pycocotools()[0]
        rles = mask_util.encode(np.asfortranarray(masks.transpose(1, 2, 0) > 0.5, np.uint8))
        for result, rle in zip(results, rles, strict=True):
            result["segmentation"] = {"size": [int(v) for v in rle["size"]],
                                      "counts": rle["counts"].decode("ascii")}
    if "pred_keypoints" in arrays and num:
        keypoints = arrays["pred_keypoints"].astype(np.float64)
        if keypoints.ndim != 3 or keypoints.shape[0] != num or keypoints.shape[2] != 3:
            raise fail("pred_keypoints", f"must have shape ({num}, K, 3), got {keypoints.shape}")
        if not np.isfinite(keypoints).all():
            raise fail("pred_keypoints", "hold a value that is not finite")
        keypoints[:, :, :2] -= 0.5
        for result, points in zip(results, keypoints.reshape(num, -1).tolist(), strict=True):
            result["keypoints"] = points
    return results


def write_coco_results(results: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> None:
    """Write COCO result dicts as a json list, atomically (a temporary file renamed).

    Raises:
        CocoEvaluationError: ``results`` is not a list of dicts, or holds NaN/Infinity.

    Example:
        >>> write_coco_results(results, "out/coco_instances_results.json")  # doctest: +SKIP
    """
    if isinstance(results, (str, bytes, Mapping)) or not all(
        isinstance(r, Mapping) for r in results
    ):
        raise CocoEvaluationError("results must be a list of COCO result dicts", key="results")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump([dict(r) for r in results], f, allow_nan=False)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except ValueError as exc:
        raise CocoEvaluationError(f"results cannot be written to {path!r}: {exc}",
                                  key="results") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _read_json(path: str, what: str) -> Any:
    return parse_json_bytes(read_bytes(path, limit=MAX_JSON_BYTES, what=what), path)


def _ground_truth(dataset_name: str, output_dir: str | None, allow_cached: bool) -> dict:
    json_file = MetadataCatalog.get(dataset_name).get("json_file")
    if json_file is not None and os.path.isfile(json_file):
        data = _read_json(os.fspath(json_file), "COCO ground-truth file")
    elif output_dir is not None:
        path = os.path.join(os.fspath(output_dir), f"{dataset_name}_coco_format.json")
        convert_to_coco_json(dataset_name, path, allow_cached=allow_cached)
        data = _read_json(path, "COCO ground-truth file")
    else:
        data = convert_to_coco_dict(dataset_name)
    if type(data) is not dict or type(data.get("images")) is not list:
        raise CocoEvaluationError(
            f"dataset {dataset_name!r}: the ground truth is not a COCO dict with 'images'",
            dataset=dataset_name)
    return data


def _check_results(results: list[Any], coco_gt: Any, dataset_name: str) -> None:
    image_ids, category_ids = set(coco_gt.getImgIds()), set(coco_gt.getCatIds())
    for index, result in enumerate(results):
        image_id = result.get("image_id") if isinstance(result, dict) else None
        problem = None
        if not isinstance(result, dict):
            problem, key = "is not a dict", "results"
        elif image_id not in image_ids:
            problem, key = "has an image_id that is not in the dataset", "image_id"
        elif result.get("category_id") not in category_ids:
            problem, key = (f"has category_id {result.get('category_id')!r}, not a dataset "
                            "category (map contiguous ids back through metadata)", "category_id")
        elif type(result.get("score")) not in (int, float) or not math.isfinite(result["score"]):
            problem, key = "needs a finite number 'score'", "score"
        elif result.get("bbox") is not None and not _four_numbers(result["bbox"]):
            problem, key = "has a 'bbox' that is not 4 finite numbers [x, y, w, h]", "bbox"
        if problem is not None:
            raise CocoEvaluationError(
                f"dataset {dataset_name!r}: result {index} (image_id {image_id!r}) {problem}",
                dataset=dataset_name, image_id=image_id, key=key)


def _four_numbers(value: Any) -> bool:
    return (
        type(value) is list
        and len(value) == 4
        and all(type(v) in (int, float) and math.isfinite(v) for v in value)
    )


def _metrics(coco_eval: Any, iou_type: str, names: list[str]) -> dict[str, float]:
    stats = coco_eval.stats if coco_eval is not None else None
    out = {
        name: (float(stats[i] * 100) if stats is not None and stats[i] >= 0 else float("nan"))
        for i, name in enumerate(METRIC_NAMES[iou_type])
    }
    if coco_eval is None or len(names) <= 1:
        return out
    precision = coco_eval.eval["precision"]  # (iou, recall, category, area range, max dets)
    for index, name in enumerate(names):
        values = precision[:, :, index, 0, -1]
        values = values[values > -1]
        out[f"AP-{name}"] = float(values.mean() * 100) if values.size else float("nan")
    return out


def evaluate_coco(
    dataset_name: str,
    results: Sequence[Mapping[str, Any]] | str | os.PathLike,
    iou_types: Iterable[str] = ("bbox", "segm", "keypoints"),
    *,
    output_dir: str | os.PathLike | None = None,
    allow_cached: bool = True,
    img_ids: Iterable[int] | None = None,
    kpt_oks_sigmas: Sequence[float] | None = None,
) -> dict[str, dict[str, float]]:
    """Evaluate COCO results against a registered dataset with pycocotools' ``COCOeval``.

    The ground truth is the metadata's ``json_file`` when it exists; otherwise the dataset's
    records are converted (:func:`convert_to_coco_json` into ``output_dir`` when given, else
    in memory). As detectron2 does, ``segm`` is evaluated without the results' boxes (so mask
    areas decide small/medium/large). A kind in ``iou_types`` whose field no result carries
    (``segmentation``, ``keypoints``), or ``keypoints`` on a dataset without keypoints, is
    skipped and absent from the answer.

    Args:
        dataset_name: the registered dataset.
        results: COCO result dicts with dataset category ids (see
            :func:`instances_to_coco_results`), or the path of a results json file.
        iou_types: kinds to evaluate, among ``"bbox"``, ``"segm"``, ``"keypoints"``.
        output_dir: where to keep the converted ground truth (reused when ``allow_cached``).
        allow_cached: reuse a converted ground-truth file already in ``output_dir``.
        img_ids: evaluate on these image ids only.
        kpt_oks_sigmas: per-keypoint OKS sigmas (COCO's 17 person sigmas by default).

    Returns:
        ``{iou_type: {"AP", "AP50", "AP75", "APs", "APm", "APl", "AP-<class>"...}}`` in percent
        (``APs`` is absent for keypoints); NaN where COCOeval gives -1 or there are no results.

    Raises:
        MissingDependencyError: pycocotools is not installed.
        CocoEvaluationError: a result names an image or category the dataset lacks, a kind is
            unknown, only some results carry a kind's field, or the keypoint counts differ.
        CocoExportError, DatasetNotRegisteredError: from converting the dataset.

    Example:
        >>> results = []
        >>> for record, output in zip(records, outputs):  # doctest: +SKIP
        ...     results += instances_to_coco_results(output["instances"], record["image_id"],
        ...                                          "my_val")
        >>> evaluate_coco("my_val", results)["bbox"]["AP"]  # doctest: +SKIP
        37.2
    """
    _, COCO, COCOeval = _pycocotools()
    iou_types = list(dict.fromkeys(iou_types))
    unknown = [t for t in iou_types if t not in IOU_TYPES]
    if unknown:
        raise CocoEvaluationError(f"unknown iou_types {unknown}; choose among {list(IOU_TYPES)}",
                                  dataset=dataset_name, key="iou_types")
    if isinstance(results, (str, os.PathLike)):
        results = _read_json(os.fspath(results), "COCO results file")
        if type(results) is not list:
            raise CocoEvaluationError("a COCO results file must hold a json list",
                                      dataset=dataset_name, key="results")
    results = [dict(r) if isinstance(r, Mapping) else r for r in results]
    gt = _ground_truth(dataset_name, None if output_dir is None else os.fspath(output_dir),
                       allow_cached)
    if "annotations" not in gt:
        logger.warning("dataset %r has no annotations to evaluate against", dataset_name)
        return {}
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
    _check_results(results, coco_gt, dataset_name)
    names = [c.get("name", str(c["id"])) for c in coco_gt.loadCats(sorted(coco_gt.getCatIds()))]
    answer: dict[str, dict[str, float]] = {}
    for iou_type in iou_types:
        field = IOU_TYPES[iou_type]
        carrying = sum(1 for r in results if r.get(field) is not None)
        if results and carrying == 0:
            logger.info("no result carries %r: %s not evaluated", field, iou_type)
            continue
        if carrying != len(results):
            raise CocoEvaluationError(
                f"dataset {dataset_name!r}: {carrying} of {len(results)} results carry "
                f"{field!r}; {iou_type} needs it in every result", dataset=dataset_name,
                key=field)
        if iou_type == "keypoints" and not _gt_has_keypoints(coco_gt):
            if not results:
                continue
            raise CocoEvaluationError(f"dataset {dataset_name!r} has no keypoints to evaluate "
                                      "keypoint results against", dataset=dataset_name,
                                      key="keypoints")
        answer[iou_type] = _metrics(
            _run(COCOeval, coco_gt, results, iou_type, img_ids, kpt_oks_sigmas, dataset_name)
            if results else None,
            iou_type,
            names,
        )
    return answer


def _gt_has_keypoints(coco_gt: Any) -> bool:
    return any("keypoints" in a for a in coco_gt.dataset["annotations"][:1])


def _run(COCOeval: Any, coco_gt: Any, results: list[dict], iou_type: str,
         img_ids: Iterable[int] | None, sigmas: Sequence[float] | None, dataset: str) -> Any:
    results = copy.deepcopy(results)  # loadRes adds keys to the dicts it gets
    if iou_type == "segm":
        for result in results:
            result.pop("bbox", None)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        coco_eval = COCOeval(coco_gt, coco_gt.loadRes(results), iou_type)
        if img_ids is not None:
            coco_eval.params.imgIds = list(img_ids)
        if iou_type == "keypoints":
            if sigmas is not None:
                coco_eval.params.kpt_oks_sigmas = np.asarray(sigmas, dtype=np.float64)
            expected = len(coco_eval.params.kpt_oks_sigmas)
            counts = {len(r["keypoints"]) // 3 for r in results}
            counts |= {len(a["keypoints"]) // 3 for a in coco_gt.dataset["annotations"]
                       if "keypoints" in a}
            if counts != {expected}:
                raise CocoEvaluationError(
                    f"dataset {dataset!r}: keypoint counts {sorted(counts)} in results and "
                    f"ground truth differ from the {expected} OKS sigmas (pass kpt_oks_sigmas)",
                    dataset=dataset, key="keypoints")
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    logger.info("COCO %s evaluation of %r:\n%s", iou_type, dataset, buffer.getvalue())
    return coco_eval
