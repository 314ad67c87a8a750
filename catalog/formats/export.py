"""COCO export (a registered dataset written as a COCO instances file) and the COCO
evaluation bridge (predictions to COCO results, pycocotools' COCOeval on a dataset).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import io
import json
import logging
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..box_mode import BoxMode
from ..dataset_catalog import DatasetCatalog
from .._common import is_int, missing_dependency
from ..metadata import MetadataCatalog
from .files import parse_json, read_bytes
from .validate import CocoEvaluationError, CocoExportError, decode_rle_string

logger = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    """``value`` as plain Python (lists, ints, floats) for json: arrays and tensors too."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def polygons_area(polygons: Sequence[Sequence[float]]) -> float:
    """The summed shoelace area of polygons given as flat ``[x0, y0, x1, y1, ...]`` lists."""
    total = 0.0
    for polygon in polygons:
        xy = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
        x, y = xy[:, 0], xy[:, 1]
        total += 0.5 * abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))))
    return total


def rle_area(rle: Mapping[str, Any]) -> int:
    """The number of foreground pixels of an RLE dict (``counts`` compressed or not)."""
    counts = rle["counts"]
    if isinstance(counts, bytes):
        counts = counts.decode("ascii")
    runs = decode_rle_string(counts) if isinstance(counts, str) else [int(c) for c in counts]
    return int(sum(runs[1::2]))


def _reverse_map(metadata: Any, dataset_name: str | None = None) -> dict[int, int] | None:
    """Contiguous id -> dataset id from ``thing_dataset_id_to_contiguous_id`` (None when
    absent); with ``dataset_name``, a map that cannot be reversed is a CocoExportError."""
    if metadata is None:
        return None
    if isinstance(metadata, str):
        metadata = MetadataCatalog.get(metadata)
    id_map = metadata.get("thing_dataset_id_to_contiguous_id")
    if id_map is None:
        return None
    reverse = {int(v): int(k) for k, v in id_map.items()}
    if dataset_name is not None and len(reverse) != len(id_map):
        raise CocoExportError(
            f"dataset {dataset_name!r}: thing_dataset_id_to_contiguous_id maps two dataset ids "
            "to one contiguous id; the mapping cannot be reversed",
            dataset=dataset_name, key="thing_dataset_id_to_contiguous_id")
    return reverse


def _area(annotation: Mapping[str, Any], xywh: list[float], fail: Any) -> float:
    segmentation = annotation.get("segmentation")
    if segmentation is None:
        return float(xywh[2] * xywh[3])  # XYWH_ABS and XYWHA_ABS both hold w, h at 2, 3
    if isinstance(segmentation, Mapping):
        try:
            return float(rle_area(segmentation))
        except (KeyError, TypeError, ValueError) as exc:
            raise fail("segmentation", f"is not a valid RLE dict ({exc})") from None
    if isinstance(segmentation, (list, tuple)):
        try:
            return polygons_area(segmentation)
        except (TypeError, ValueError) as exc:
            raise fail("segmentation", f"is not a list of flat polygons ({exc})") from None
    raise fail("segmentation", f"must be polygons or an RLE dict, got {type(segmentation)}")


def _annotation(annotation: Any, image_id: Any, reverse: dict[int, int] | None,
                fail: Any) -> dict[str, Any]:
    if not isinstance(annotation, Mapping):
        raise fail("annotations", f"an annotation must be a dict, got {type(annotation)}")
    if "bbox" not in annotation or "bbox_mode" not in annotation:
        raise fail("bbox", "an annotation needs 'bbox' and 'bbox_mode'")
    bbox = _plain(annotation["bbox"])
    if not isinstance(bbox, list) or len(bbox) not in (4, 5):
        raise fail("bbox", f"must be 4 (or 5, rotated) numbers, got {bbox!r}")
    to_mode = BoxMode.XYWH_ABS if len(bbox) == 4 else BoxMode.XYWHA_ABS
    try:
        xywh = [float(v) for v in BoxMode.convert(bbox, annotation["bbox_mode"], to_mode)]
    except (TypeError, ValueError) as exc:
        raise fail("bbox", f"cannot be converted to {to_mode.name}: {exc}") from None
    if not all(map(math.isfinite, xywh)):
        raise fail("bbox", f"holds a value that is not finite: {bbox!r}")
    category = annotation.get("category_id")
    if not is_int(category):
        raise fail("category_id", f"must be an int, got {category!r}")
    if reverse is not None:
        if int(category) not in reverse:
            raise fail("category_id", f"contiguous id {category} is not in the metadata's "
                       "thing_dataset_id_to_contiguous_id")
        category = reverse[int(category)]
    out: dict[str, Any] = {"image_id": image_id, "bbox": [round(v, 3) for v in xywh],
                           "area": _area(annotation, xywh, fail),
                           "iscrowd": int(annotation.get("iscrowd", 0)),
                           "category_id": int(category)}
    if "keypoints" in annotation:
        keypoints = [float(v) for v in _plain(annotation["keypoints"])]
        if len(keypoints) % 3:
            raise fail("keypoints", "must hold 3 values (x, y, visibility) per keypoint")
        keypoints = [v if i % 3 == 2 else v - 0.5 for i, v in enumerate(keypoints)]
        out["keypoints"] = [int(v) if v.is_integer() else v for v in keypoints]
        out["num_keypoints"] = int(annotation.get(
            "num_keypoints", sum(1 for v in keypoints[2::3] if v > 0)))
    if "segmentation" in annotation and annotation["segmentation"] is not None:
        segmentation = annotation["segmentation"]
        if isinstance(segmentation, Mapping):
            counts = segmentation["counts"]
            segmentation = {
                "size": _plain(segmentation["size"]),
                "counts": counts.decode("ascii") if isinstance(counts, bytes) else _plain(counts)}
        else:
            segmentation = _plain(segmentation)
        out["segmentation"] = segmentation
    return out


def convert_to_coco_dict(dataset_name: str) -> dict[str, Any]:
    """The records of a registered dataset as a COCO instances dict."""
    records = DatasetCatalog.get(dataset_name)
    metadata = MetadataCatalog.get(dataset_name)
    classes = metadata.get("thing_classes")
    if classes is None:
        raise CocoExportError(
            f"dataset {dataset_name!r} has no 'thing_classes' in its metadata; COCO categories "
            "are made from them", dataset=dataset_name, key="thing_classes")
    reverse = _reverse_map(metadata, dataset_name)
    categories = [{"id": reverse.get(i, i) if reverse is not None else i, "name": str(name)}
                  for i, name in enumerate(classes)]
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for index, record in enumerate(records): 
        def fail(key: str, problem: str, index: int = index) -> CocoExportError:
            return CocoExportError(
                f"dataset {dataset_name!r}, record {index}: key {key!r} {problem}",
                dataset=dataset_name, index=index, key=key)

        for key in ("width", "height", "file_name"):
            if key not in record:
                raise fail(key, "is missing (COCO images need width, height and file_name)")
        image_id = _plain(record.get("image_id", index))
        images.append({
            "id": image_id, "width": int(record["width"]),
            "height": int(record["height"]), "file_name": str(record["file_name"])})
        for annotation in record.get("annotations") or []:
            out = _annotation(annotation, image_id, reverse, fail)
            annotations.append({"id": len(annotations) + 1, **out})
    logger.info("converted dataset %r: %d images, %d annotations", dataset_name, len(images),
                len(annotations))
    coco: dict[str, Any] = {
        "info": {
            "date_created": datetime.datetime.now().isoformat(),
            "description": f"COCO file written by catmap from dataset {dataset_name!r}",
        }, "images": images, "categories": categories, "licenses": None}
    if annotations:
        coco["annotations"] = annotations
    return coco


def _write_json(value: Any, path: str) -> None:
    """Write ``value`` as JSON atomically: a temporary file in the same directory, renamed."""
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(value, f, allow_nan=False)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def convert_to_coco_json(dataset_name: str, output_file: str | os.PathLike,
                         allow_cached: bool = True) -> None:
    """Write :func:`convert_to_coco_dict` of ``dataset_name`` to ``output_file``.

    Example:
        >>> convert_to_coco_json("my_val", "out/my_val_coco.json")  # doctest: +SKIP
    """
    from filelock import FileLock

    output_file = os.fspath(output_file)
    directory = os.path.dirname(os.path.abspath(output_file))
    os.makedirs(directory, exist_ok=True)
    with FileLock(output_file + ".lock"):
        if allow_cached and os.path.exists(output_file):
            logger.warning(
                "using the COCO file already at %r for dataset %r; delete it if the dataset "
                "changed", output_file, dataset_name)
            return
        _write_json(convert_to_coco_dict(dataset_name), output_file)
        logger.info("wrote dataset %r as COCO json to %r", dataset_name, output_file)


#: The evaluation kinds COCOeval knows, and the result field each needs.
IOU_TYPES = {"bbox": "bbox", "segm": "segmentation", "keypoints": "keypoints"}
#: The metrics reported per kind, in COCOeval's ``stats`` order (as detectron2 names them).
METRIC_NAMES = {"bbox": ("AP", "AP50", "AP75", "APs", "APm", "APl"),
                "segm": ("AP", "AP50", "AP75", "APs", "APm", "APl"),
                "keypoints": ("AP", "AP50", "AP75", "APm", "APl")}
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


def instances_to_coco_results(instances: Any, image_id: int | str,
                              metadata: Any = None) -> list[dict[str, Any]]:
    """One image's predictions as COCO result dicts."""
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
    results = [{"image_id": image_id, "category_id": c, "bbox": b, "score": float(s)}
               for c, b, s in zip(categories, xywh.tolist(), scores.tolist(), strict=True)]
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
    """Write COCO result dicts as a json list, atomically (a temporary file renamed)."""
    if isinstance(results, (str, bytes, Mapping)) or not all(
        isinstance(r, Mapping) for r in results
    ):
        raise CocoEvaluationError("results must be a list of COCO result dicts", key="results")
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        _write_json([dict(r) for r in results], path)
    except ValueError as exc:
        raise CocoEvaluationError(f"results cannot be written to {path!r}: {exc}",
                                  key="results") from None


def _read_json(path: str, what: str) -> Any:
    return parse_json(read_bytes(path, limit=MAX_JSON_BYTES, what=what), path)


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


def evaluate_coco(dataset_name: str, results: Sequence[Mapping[str, Any]] | str | os.PathLike,
                  iou_types: Iterable[str] = ("bbox", "segm", "keypoints"), *,
                  output_dir: str | os.PathLike | None = None, allow_cached: bool = True,
                  img_ids: Iterable[int] | None = None,
                  kpt_oks_sigmas: Sequence[float] | None = None) -> dict[str, dict[str, float]]:
    """Evaluate COCO results against a registered dataset with pycocotools' ``COCOeval``.

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
                f"{field!r}; {iou_type} needs it in every result", dataset=dataset_name, key=field)
        if iou_type == "keypoints" and not any(
                "keypoints" in a for a in coco_gt.dataset["annotations"][:1]):
            if not results:
                continue
            raise CocoEvaluationError(f"dataset {dataset_name!r} has no keypoints to evaluate "
                                      "keypoint results against", dataset=dataset_name,
                                      key="keypoints")
        answer[iou_type] = _metrics(
            _run(COCOeval, coco_gt, results, iou_type, img_ids, kpt_oks_sigmas, dataset_name)
            if results else None, iou_type, names)
    return answer


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
