"""Fuzz the format loaders (LVIS, Pascal VOC, COCO panoptic, Cityscapes, semantic
segmentation, OpenMMLab records): every mutated input gives records that pass the format's
oracle, or a :class:`~catalog._common.CatmapError`; never another exception, a hang or
malformed data accepted. Plus one regression test per loader fix the fuzzer led to.

The default run is short (a few hundred hypothesis examples); ``pytest -m slow`` runs
``tools/fuzz_loaders.py`` for 3,000 inputs per format, each in a child process with a timeout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import random
import sys
import time
import traceback

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog._common import AnnotationFormatError, CatmapError, DatasetFileNotFoundError
from catalog.formats.validate import CityscapesFormatError, PanopticFormatError
from tests.work_counting import WorkBudgetExceeded, count_calls
from tools.fuzz_formats import (
    FORMATS,
    PNG_CASE,
    instance_ids_png,
    mutate_format,
    mutate_xml,
    seeds,
    voc_xml,
)
from tools.fuzz_loaders import main
from tools.fuzz_oracles import PANOPTIC_META, lvis_reference, run_case, voc_reference

pytest.importorskip("PIL.Image")
pytest.importorskip("pycocotools.mask")
pytest.importorskip("cv2")

_SETTINGS = dict(deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_seed_loads_and_passes_its_oracle(fmt, tmp_path):
    for index, seed in enumerate(seeds(fmt)):
        assert run_case(fmt, seed, str(tmp_path)) == ("ok", [], ""), (fmt, index)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=40, **_SETTINGS)
@given(data=st.data())
def test_mutated_inputs_give_records_or_a_typed_error(fmt, data, tmp_path_factory):
    contents = seeds(fmt)
    seed = contents[data.draw(st.integers(0, len(contents) - 1), label="seed")]
    mutated, what = mutate_format(fmt, seed, data.draw(st.randoms(use_true_random=False)))
    summary, problems, detail = _run_case_watched(fmt, mutated, tmp_path_factory.mktemp(fmt), what)
    assert summary in ("ok", "typed") and not problems, (what, detail)


#: A liveness bound, not a performance one: a loader still busy with one input after this many
#: seconds is taken for hung (the inputs take milliseconds; the time is never asserted).
LIVENESS_SECONDS = 60.0


def _send_case(conn, fmt, data, tmp) -> None:
    try:
        conn.send(("result", run_case(fmt, data, tmp)))
    except BaseException:  # noqa: BLE001 - reported by the parent, as if raised in it
        conn.send(("raised", traceback.format_exc()))
    conn.close()


def _run_case_watched(fmt, data, tmp, what):
    """``run_case`` in a forked child, so that a hang (even inside C code) fails the test with
    a message instead of blocking the suite, and a crash of the process is seen as one."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_send_case, args=(writer, fmt, data, str(tmp)), daemon=True)
    child.start()
    writer.close()
    try:
        if not reader.poll(LIVENESS_SECONDS):
            child.kill()
            pytest.fail(f"the {fmt} loader hung on {what}: no answer in {LIVENESS_SECONDS:.0f} s")
        try:
            kind, answer = reader.recv()
        except EOFError:
            child.join()
            pytest.fail(f"the process running the {fmt} loader died on {what} "
                        f"(exit code {child.exitcode})")
        if kind == "raised":
            pytest.fail(f"run_case raised on {what}:\n{answer}")
        return answer
    finally:
        reader.close()
        child.join(LIVENESS_SECONDS)
        if child.is_alive():
            child.kill()
            child.join()


# ----------------------------------------------------------------------------- the oracles
def test_oracles_know_valid_from_malformed():
    assert voc_reference(voc_xml([("dog", (1, 2, 3, 4)), ("cat", (5, 5, 3, 3))]).encode()) == (
        "ok", 1, 1)
    for bad in ("1_0", "\u0661\u0662", "nan", "0x10", "1e400", ""):
        assert voc_reference(voc_xml([("dog", (1, 2, bad, 4))]).encode())[0] == "error", bad
    assert voc_reference(voc_xml([("lion", (1, 2, 3, 4))]).encode())[0] == "error"
    lvis = json.loads(seeds("lvis")[0])
    assert lvis_reference(json.dumps(lvis).encode()) == ("ok", {}, [(1, 1), (2, 1), (4, 1)])
    lvis["images"][0]["coco_url"] += "?x=1"
    assert lvis_reference(json.dumps(lvis).encode())[0] == "error"


def _sleep(*_args):
    time.sleep(60)


def _die(*_args):
    os._exit(3)


@pytest.mark.parametrize("stand_in, column", [(_sleep, 6), (_die, 5)])
def test_the_tool_counts_hangs_and_crashes(capsys, monkeypatch, stand_in, column):
    # the forked child runs the stand-in: a hang (killed after --timeout) or a dead child
    monkeypatch.setattr("tools.fuzz_oracles.run_case", stand_in)
    assert main(["--format", "voc", "--n", "2", "--timeout", "0.5"]) == 1
    header, row = capsys.readouterr().out.split("\n")[:2]
    assert header.split()[:7] == ["format", "seeds", "inputs", "ok", "typed", "untyped", "hang"]
    assert row.split()[0] == "voc" and row.split()[2] == "2" and row.split()[column] == "2"


def test_the_tool_runs_every_format_clean(capsys):
    # Every format but COCO has seeds of its own; COCO's come from ../shared/external (and are
    # fuzzed by tests/test_fuzz_coco.py), so a fresh clone without them still runs this test.
    formats = [arg for fmt in ("lvis", "voc", "panoptic", "cityscapes", "sem_seg", "openmmlab")
               for arg in ("--format", fmt)]
    assert main([*formats, "--n", "8", "--seed", "3"]) == 0, capsys.readouterr().out


# ----------------------------------------------------------- regressions: Pascal VOC / XML
@pytest.mark.parametrize("prolog, encoding", [
    ('<?xml version="1.0" encoding="x-unknown"?>', "utf-8"),  # was LookupError
    ('<?xml version="1.0" encoding="utf-16-le"?>', "utf-16-le"),  # was ValueError
])
def test_xml_in_an_unsupported_encoding_is_a_typed_error(tmp_path, prolog, encoding):
    data = (prolog + voc_xml([("dog", (1, 2, 3, 4))])).encode(encoding)
    assert run_case("voc", data, str(tmp_path))[:2] == ("typed", [])


@pytest.mark.parametrize("value", ["1_0", "\u0661\u0662", "\uff11\uff12", "0x10"])
def test_voc_numbers_must_be_plain_decimals(tmp_path, value):  # were accepted
    from catalog.formats.voc import load_voc_instances

    (tmp_path / "ImageSets" / "Main").mkdir(parents=True)
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "ImageSets" / "Main" / "t.txt").write_text("1\n")
    for xml in (voc_xml([("dog", (1, 2, value, 40))]), voc_xml([], size=(value, 10))):
        (tmp_path / "Annotations" / "1.xml").write_text(xml, encoding="utf-8")
        with pytest.raises(AnnotationFormatError, match="1.xml"):
            load_voc_instances(tmp_path, "t")


def test_xml_mutations_cover_the_attacks():
    rng, seed = random.Random(0), seeds("voc")[0]
    wanted = {"DOCTYPE lolz", "SYSTEM", "ENTITY % p", "depth 100000+", "attr 5000000",
              "200001 elements", "encoded utf-16", "xinclude", "&#xD800;"}
    for _ in range(3000):
        what = mutate_xml(seed, rng)[1]
        wanted = {w for w in wanted if w not in what}
        if not wanted:
            break
    assert not wanted


# ------------------------------------------------------------ regressions: COCO panoptic
def _panoptic(tmp_path, doc):
    from catalog.formats.panoptic import load_coco_panoptic_json

    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    return load_coco_panoptic_json(path, tmp_path / "img", tmp_path / "pan", PANOPTIC_META)


def test_panoptic_missing_first_png_is_a_typed_file_not_found_error(tmp_path):
    doc = {"annotations": [{"image_id": 1, "file_name": "1.png", "segments_info": []}]}
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "1.jpg").write_bytes(b"")
    with pytest.raises(DatasetFileNotFoundError, match="pan_seg_file_name") as info:
        _panoptic(tmp_path, doc)  # was a plain FileNotFoundError
    assert isinstance(info.value, CatmapError) and isinstance(info.value, FileNotFoundError)
    assert info.value.path.endswith("1.png")


@pytest.mark.parametrize("name", ["./", "sub/", "sub/.", "."])
def test_panoptic_file_name_must_name_a_file(tmp_path, name):
    doc = {"annotations": [{"image_id": 1, "file_name": name, "segments_info": []}]}
    with pytest.raises(PanopticFormatError, match="file_name"):
        _panoptic(tmp_path, doc)


def test_panoptic_duplicate_segment_id_in_a_long_list_is_found_fast(tmp_path):
    segments = [{"id": i, "category_id": 1} for i in range(60_000)] + [{"id": 59_999,
                                                                          "category_id": 1}]
    doc = {"annotations": [{"image_id": 1, "file_name": "1.png", "segments_info": segments}]}
    with _linear_scans(budget=10 * len(segments)) as scanned:
        with pytest.raises(PanopticFormatError, match="duplicate segment id") as info:
            _panoptic(tmp_path, doc)  # took about a minute (list.count per segment)
    assert info.value.segment_id == 59_999
    assert scanned[0] <= 2 * len(segments), scanned  # 60,000 scans of the list: 3.6e9


@contextlib.contextmanager
def _linear_scans(budget: int):
    """Count the elements that ``list.count``, ``list.index`` and ``list.remove`` (on lists and
    tuples) are called to scan inside the block; past ``budget``, the call that would scan
    fails the test at once instead of running for minutes. (``x in a_list`` is not seen.)"""
    scanned = [0]

    def profile(frame, event, arg):
        if event != "c_call" or getattr(arg, "__name__", "") not in ("count", "index", "remove"):
            return
        owner = getattr(arg, "__self__", None)
        if isinstance(owner, (list, tuple)):
            scanned[0] += len(owner)
            if scanned[0] > budget:
                raise WorkBudgetExceeded(f"more than {budget} list elements scanned")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield scanned
    finally:
        sys.setprofile(previous)


def test_voc_missing_xml_is_a_typed_file_not_found_error(tmp_path):
    from catalog.formats.voc import load_voc_instances

    (tmp_path / "ImageSets" / "Main").mkdir(parents=True)
    (tmp_path / "ImageSets" / "Main" / "t.txt").write_text("1\n")
    with pytest.raises(DatasetFileNotFoundError, match="entry 1") as info:
        load_voc_instances(tmp_path, "t")  # was a plain FileNotFoundError
    assert isinstance(info.value, FileNotFoundError) and info.value.path.endswith("1.xml")


# --------------------------------------------------------------- regressions: Cityscapes
def _cityscapes(tmp_path, doc, to_polygons=True):
    from catalog.formats.cityscapes import load_cityscapes_instances

    (tmp_path / "l" / "c").mkdir(parents=True)
    (tmp_path / "g" / "c").mkdir(parents=True)
    (tmp_path / "l" / "c" / "x_leftImg8bit.png").write_bytes(b"")
    (tmp_path / "g" / "c" / "x_gtFine_polygons.json").write_text(json.dumps(doc))
    return load_cityscapes_instances(tmp_path / "l", tmp_path / "g", True, to_polygons)


def test_cityscapes_huge_int_coordinate_is_a_typed_error(tmp_path):
    doc = {"imgHeight": 8, "imgWidth": 8,
           "objects": [{"label": "car", "polygon": [[10**400, 1], [2, 2], [3, 1]]}]}
    with pytest.raises(CityscapesFormatError, match="polygon"):  # was OverflowError
        _cityscapes(tmp_path, doc)


@pytest.mark.parametrize("key", ["label", "imgHeight"])
def test_cityscapes_deeply_nested_value_is_a_typed_error(tmp_path, key):
    nested = "[" * 1000 + "]" * 1000
    doc = {"imgHeight": 8, "imgWidth": 8, "objects": [{"label": "@@", "polygon": []}]}
    text = json.dumps(doc).replace('"@@"', nested) if key == "label" else json.dumps(
        dict(doc, imgHeight="@@")).replace('"@@"', nested)
    from catalog.formats.cityscapes import load_cityscapes_instances

    (tmp_path / "l" / "c").mkdir(parents=True)
    (tmp_path / "g" / "c").mkdir(parents=True)
    (tmp_path / "l" / "c" / "x_leftImg8bit.png").write_bytes(b"")
    (tmp_path / "g" / "c" / "x_gtFine_polygons.json").write_text(text)
    with pytest.raises(AnnotationFormatError, match="nested too deep"):  # refused by the parser
        load_cityscapes_instances(tmp_path / "l", tmp_path / "g")


def test_cityscapes_work_is_bounded(tmp_path, monkeypatch):
    side = 4096
    car = {"label": "car", "polygon": [[0, 0], [side - 1, 0], [side - 1, side - 1]]}
    doc = {"imgHeight": side, "imgWidth": side, "objects": [car] * 400}
    from PIL import Image, ImageDraw

    # the work, counted: the file is refused before any polygon is drawn (400 polygons of
    # 16 M pixels each took many minutes)
    drawn = count_calls(monkeypatch, ImageDraw.ImageDraw, "polygon", budget=0)
    canvases = count_calls(monkeypatch, Image, "new", budget=0)
    with pytest.raises(CityscapesFormatError, match="rasterization"):
        _cityscapes(tmp_path, doc)
    assert drawn.calls == canvases.calls == 0


@pytest.mark.parametrize("kind", ["truncate", "flip", "scattered"])
def test_cityscapes_instance_png_damaged_or_scattered_is_a_typed_error(tmp_path, kind):
    from catalog.formats.cityscapes import load_cityscapes_instances

    rng = random.Random(0)
    for _ in range(200):  # a png of this kind that does not load (most damaged ones do not)
        data, what = instance_ids_png(rng)
        if what.startswith(f"instanceIds png: {kind} ") and run_case(
                "cityscapes", data, str(tmp_path / "probe"))[0] != "ok":
            break
    else:
        pytest.fail(f"every {kind} png loads")
    (tmp_path / "l" / "c").mkdir(parents=True)
    (tmp_path / "g" / "c").mkdir(parents=True)
    (tmp_path / "l" / "c" / "x_leftImg8bit.png").write_bytes(b"")
    (tmp_path / "g" / "c" / "x_gtFine_instanceIds.png").write_bytes(data[len(PNG_CASE):])
    with pytest.raises(CityscapesFormatError, match="instanceIds"):  # were OSError / slow
        load_cityscapes_instances(tmp_path / "l", tmp_path / "g", from_json=False)


def test_cityscapes_rle_from_the_crop_equals_the_whole_image_encoding():
    from pycocotools import mask as mask_util

    from catalog.formats.cityscapes import _rle

    rng = np.random.default_rng(0)
    for _ in range(300):
        height, width = (int(v) for v in rng.integers(1, 25, 2))
        h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        y0, x0 = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
        crop = rng.random((h, w)) < rng.random()
        crop[rng.integers(0, h), rng.integers(0, w)] = True
        full = np.zeros((height, width), np.uint8, order="F")
        full[y0:y0 + h, x0:x0 + w] = crop
        expected = mask_util.encode(full)["counts"].decode("ascii")
        assert _rle(crop, x0, y0, height, width) == {"size": [height, width],
                                                     "counts": expected}


# ---------------------------------------------------------------------- regressions: LVIS
@pytest.mark.parametrize("url", ["http://h/val2017/x.jpg?v=1", "http://h/val2017/x.jpg#top",
                                 "http://h/x?p=/val2017/y.jpg", "http://h/val2017/..\\x.jpg",
                                 "http://h/val2017/a\\..\\..\\x.jpg"])
def test_lvis_coco_url_with_a_query_fragment_or_backslash_is_refused(tmp_path, url):
    from catalog.formats.coco import load_lvis_json

    doc = json.loads(seeds("lvis")[0])
    doc["images"][0]["coco_url"] = url
    (tmp_path / "l.json").write_text(json.dumps(doc))
    with pytest.raises(AnnotationFormatError, match="coco_url"):  # was accepted
        load_lvis_json(tmp_path / "l.json", tmp_path)


# ------------------------------------------------------------ regressions: OpenMMLab records
@pytest.mark.parametrize("where, key, value", [
    ("entry", "file_name", "../../etc/passwd"), ("entry", "image_id", {"a": 1}),
    ("entry", "annotations", [{"bbox": "x"}]), ("entry", "sem_seg_file_name", "/etc/x.png"),
    ("instance", "category_id", 99), ("instance", "bbox_mode", 1),
    ("instance", "iscrowd", 5), ("instance", "segmentation", "garbage"),
])
def test_openmmlab_keys_may_not_shadow_converted_ones(tmp_path, where, key, value):
    from catalog.formats.validate import AnnotationFieldError
    from catalog.formats.openmmlab import load_annotation_file

    doc = json.loads(seeds("openmmlab")[0])
    target = doc["data_list"][0] if where == "entry" else doc["data_list"][0]["instances"][0]
    target[key] = value
    (tmp_path / "a.json").write_text(json.dumps(doc))
    with pytest.raises(AnnotationFieldError, match=repr(key)) as info:  # were accepted
        load_annotation_file(tmp_path / "a.json")
    assert info.value.key == key and info.value.index == 0


def test_openmmlab_keys_equal_to_the_converted_ones_are_fine(tmp_path):
    from catalog.formats.openmmlab import load_annotation_file

    doc = json.loads(seeds("openmmlab")[0])
    entry = doc["data_list"][0]
    entry["file_name"], entry["image_id"] = entry["img_path"], entry["img_id"]
    entry["instances"][0].update(category_id=1, iscrowd=0, bbox_mode=0)
    (tmp_path / "a.json").write_text(json.dumps(doc))
    _, records = load_annotation_file(tmp_path / "a.json")
    assert records[0]["file_name"] == "a.jpg" and records[0]["annotations"][0]["category_id"] == 1


# ------------------------------------------------------------------------------ long run
@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_long_fuzz_run_finds_nothing(fmt, capsys):
    assert main(["--format", fmt, "--n", "3000", "--seed", "1"]) == 0, capsys.readouterr().out
