"""Pascal VOC loader: detectron2's box convention, difficult objects, hardened XML parsing."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import AnnotationFormatError, BoxMode, DatasetCatalog, MetadataCatalog
from catalog.formats.voc import VOC_CLASSES, load_voc_instances, register_pascal_voc
from catalog.formats.files import MAX_XML_BYTES, parse_xml_bytes, read_xml_file

EXTERNAL_VOC = Path("/work/shared/external/voc")


def voc_xml(objects: list[tuple], size: tuple[int, int] | None = (300, 400)) -> str:
    """A VOC annotation: objects are (name, xmin, ymin, xmax, ymax, difficult)."""
    parts = ["<annotation>", "<folder>VOC2007</folder>", "<filename>x.jpg</filename>"]
    if size is not None:
        parts.append(f"<size><width>{size[1]}</width><height>{size[0]}</height>"
                     "<depth>3</depth></size>")
    for name, x1, y1, x2, y2, difficult in objects:
        parts.append(
            f"<object><name>{name}</name><pose>Left</pose><truncated>0</truncated>"
            f"<difficult>{difficult}</difficult><bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin>"
            f"<xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox>"
            "<part><name>head</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax>"
            "<ymax>2</ymax></bndbox></part></object>"
        )
    parts.append("</annotation>")
    return "\n".join(parts)


def make_voc(root: Path, annotations: dict[str, str], split: str = "trainval") -> Path:
    (root / "Annotations").mkdir(parents=True)
    (root / "ImageSets" / "Main").mkdir(parents=True)
    (root / "JPEGImages").mkdir()
    for file_id, text in annotations.items():
        (root / "Annotations" / f"{file_id}.xml").write_text(text)
    (root / "ImageSets" / "Main" / f"{split}.txt").write_text("\n".join(annotations) + "\n")
    return root


def test_records_follow_detectron2_conventions(tmp_path: Path) -> None:
    root = make_voc(tmp_path / "VOC2007", {
        "000005": voc_xml([("dog", 48, 240, 195, 371, 0), ("person", 1, 1, 400, 300, 1)]),
        "000002": voc_xml([("train", 139, 200, 207, 301, 0)], size=(500, 335)),
    })
    records = load_voc_instances(root, "trainval", VOC_CLASSES)
    assert [r["image_id"] for r in records] == ["000005", "000002"]  # split file order
    first = records[0]
    assert first["file_name"] == os.path.join(str(root), "JPEGImages", "000005.jpg")
    assert (first["height"], first["width"]) == (300, 400)
    dog, person = first["annotations"]
    assert dog == {"category_id": VOC_CLASSES.index("dog"), "bbox": [47.0, 239.0, 195.0, 371.0],
                   "bbox_mode": BoxMode.XYXY_ABS}
    # difficult objects are kept; (1, W) spans the whole image: coordinates (0, W)
    assert person["bbox"] == [0.0, 0.0, 400.0, 300.0]
    assert records[1]["annotations"][0]["category_id"] == VOC_CLASSES.index("train")


def test_custom_class_names_and_missing_size(tmp_path: Path, caplog) -> None:
    root = make_voc(tmp_path / "voc", {"a": voc_xml([("b", 1, 2, 3, 4, 0)], size=None)}, "val")
    with caplog.at_level(logging.WARNING):
        records = load_voc_instances(root, "val", ["a", "b"])
    assert "height" not in records[0] and "width" not in records[0]
    assert records[0]["annotations"][0]["category_id"] == 1
    assert "no 'size/height'" in caplog.text


def test_empty_boxes_are_skipped_and_counted(tmp_path: Path, caplog) -> None:
    root = make_voc(tmp_path / "voc", {"a": voc_xml([("cat", 5, 5, 4, 9, 0), ("cat", 5, 5, 5, 5, 0)])})
    with caplog.at_level(logging.WARNING):
        records = load_voc_instances(root, "trainval")
    assert [a["bbox"] for a in records[0]["annotations"]] == [[4.0, 4.0, 5.0, 5.0]]
    assert "skipped 1 objects with an empty box" in caplog.text


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (voc_xml([("unicorn", 1, 2, 3, 4, 0)]), "class 'unicorn'"),
        (voc_xml([("cat", "x", 2, 3, 4, 0)]), "bndbox/xmin"),
        (voc_xml([("cat", 1, "nan", 3, 4, 0)]), "bndbox/ymin"),
        (voc_xml([("cat", 1, 2, 3, 4, 0)], size=(0, 5)), "size/height"),
        (voc_xml([("cat", 1, 2, 3, 4, 0)], size=(5, 2**21)), "size/width"),
        (voc_xml([]).replace("</annotation>", "<object><pose/></object></annotation>"),
         "no 'name'"),
        (voc_xml([]).replace("</annotation>", "<object><name>cat</name></object></annotation>"),
         "no 'bndbox'"),
        (voc_xml([("cat", 1, 2, 3, 4, 0)]).replace("<xmin>", "<xmax>"), "not well-formed"),
    ],
)
def test_malformed_annotations_raise_typed_errors(tmp_path: Path, text: str, pattern: str):
    root = make_voc(tmp_path / "voc", {"img": text})
    with pytest.raises(AnnotationFormatError, match=pattern) as info:
        load_voc_instances(root, "trainval")
    assert "img.xml" in str(info.value)


@pytest.mark.parametrize("file_id", ["../escape", "a b", "..", "sub\\x"])
def test_image_ids_must_be_plain_names(tmp_path: Path, file_id: str) -> None:
    root = make_voc(tmp_path / "voc", {"ok": voc_xml([])})
    (root / "ImageSets" / "Main" / "trainval.txt").write_text(f"ok\n{file_id}\n")
    with pytest.raises(AnnotationFormatError, match="entry 2"):
        load_voc_instances(root, "trainval")


def test_missing_files_raise_file_not_found(tmp_path: Path) -> None:
    root = make_voc(tmp_path / "voc", {"a": voc_xml([])})
    with pytest.raises(FileNotFoundError):
        load_voc_instances(root, "test")
    (root / "ImageSets" / "Main" / "trainval.txt").write_text("a\nb\n")
    with pytest.raises(FileNotFoundError, match="b.xml"):
        load_voc_instances(root, "trainval")
    with pytest.raises(ValueError):
        load_voc_instances(root, "../x")


BOMB = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i + 1} "{("&lol" + (str(i) if i else "") + ";") * 10}">'
              for i in range(8))
    + "]><annotation><filename>&lol8;</filename></annotation>"
)


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (BOMB.encode(), "document type declaration"),
        (b'<?xml version="1.0"?><!DOCTYPE a SYSTEM "file:///etc/passwd"><a>&x;</a>', "DTD"),
        (b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]><a>&x;</a>',
         "DTD"),
        ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>'
         .encode("utf-16"), "DTD"),
        (b"<a>&undefined;</a>", "undefined entity"),
        (b"<a>" * 100 + b"</a>" * 100, "deeper"),
        (b"<a><b></a>", "not well-formed"),
    ],
)
def test_hostile_xml_is_refused(data: bytes, pattern: str) -> None:
    with pytest.raises(AnnotationFormatError, match=pattern):
        parse_xml_bytes(data, "hostile.xml")


def test_hostile_xml_in_a_dataset_names_the_file(tmp_path: Path) -> None:
    root = make_voc(tmp_path / "voc", {"bomb": BOMB})
    with pytest.raises(AnnotationFormatError, match="bomb.xml.*document type"):
        load_voc_instances(root, "trainval")


def test_xml_size_is_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big.xml"
    big.write_bytes(b"<a>" + b" " * MAX_XML_BYTES + b"</a>")
    with pytest.raises(AnnotationFormatError, match="limit"):
        read_xml_file(str(big))
    assert read_xml_file(str(big), limit=2 * MAX_XML_BYTES).tag == "a"


def test_entities_and_character_references_without_dtd() -> None:
    root = parse_xml_bytes(b"<a><name>cat &amp; dog&#33;</name><!-- c --><?pi x?></a>", "x")
    assert root.find("name").text == "cat & dog!"


def test_register_pascal_voc(tmp_path: Path) -> None:
    root = make_voc(tmp_path / "VOC2012", {"1": voc_xml([("cat", 1, 2, 3, 4, 0)])}, "val")
    register_pascal_voc("voc_test_val", root, "val", 2012)
    meta = MetadataCatalog.get("voc_test_val")
    assert meta.thing_classes == list(VOC_CLASSES)
    assert (meta.dirname, meta.year, meta.split) == (str(root), 2012, "val")
    records = DatasetCatalog.get("voc_test_val")
    assert len(records) == 1 and records[0]["annotations"][0]["bbox"] == [0.0, 1.0, 3.0, 4.0]


@pytest.mark.skipif(not EXTERNAL_VOC.is_dir(), reason="external VOC samples not present")
def test_real_voc_samples_load(tmp_path: Path) -> None:
    for year in ("VOC2007", "VOC2012"):
        dirname = EXTERNAL_VOC / "mmyolo_VOCdevkit" / year
        for split in ("trainval", "test"):
            records = load_voc_instances(dirname, split)
            assert len(records) == 1 and records[0]["height"] == 500
            assert records[0]["annotations"]
    # every other collected VOC xml parses and loads with its own class names
    root = make_voc(tmp_path / "voc", {})
    ids, names = [], set()
    for xml_file in sorted(EXTERNAL_VOC.glob("*/*.xml")):
        shutil.copy(xml_file, root / "Annotations" / xml_file.name)
        ids.append(xml_file.stem)
        names |= {o.findtext("name").strip() for o in read_xml_file(str(xml_file)).iter("object")}
    (root / "ImageSets" / "Main" / "all.txt").write_text("\n".join(ids))
    records = load_voc_instances(root, "all", sorted(names))
    assert len(records) == len(ids) >= 10
    assert sum(len(r["annotations"]) for r in records) >= 10


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=200).map(lambda t: f"<a>{t}</a>".encode()))
def test_any_bytes_parse_or_raise_the_typed_error(data: bytes) -> None:
    try:
        root = parse_xml_bytes(data, "fuzz.xml")
    except AnnotationFormatError as error:
        assert "fuzz.xml" in str(error)
    else:
        assert root.tag
