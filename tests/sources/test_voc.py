"""The Pascal VOC source (sources/voc.py): VOCdevkit/VOC20xx, ImageSets/Main split lists,
annotation XMLs as objects/bbox (VOC's 1-based pixels), objects/label (VOC's 20 classes, or
those found), objects/is_difficult, objects/is_truncated and objects/pose; hostile XML refused
by name. Packed under every --resize-mode, --no-upscale, --max-side and as it is (an
EXIF-turned JPEG kept), each box is its object's own pixels in the packed image, with its own
flags and pose.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.errors import ImageError, SourceError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.sources import classlist, scan
from shardpack.sources.voc import VOC_CLASSES
from tests.packing.test_boxes import BOXES, TALL, TALL_BOXES, _photo
from tests.sources.test_yolo import (
    CASES,
    check_boxes,
    packed,
    refused_as_all_skipped,
    turned_jpeg,
    write,
)

CLASS_OF = {"red": "car", "green": "dog", "blue": "person"}
# The annotated photos' objects: (class, box, difficult, truncated, pose); the turned one's
# boxes are of the photo as displayed.
WIDE = [(CLASS_OF[c], box, 0, int(c == "blue"), "Unspecified") for c, box in BOXES.items()]
TURNED = [("car", TALL_BOXES["red"], 1, 0, "Rear"), ("dog", TALL_BOXES["green"], 0, 0, "Frontal"),
          ("person", TALL_BOXES["blue"], 0, 1, "Left")]  # fmt: skip
# An entity that would expand a billion times: refused before it is parsed.
BOMB = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<annotation><size><width>20</width><height>20</height></size><object><name>&lol2;</name>
<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object></annotation>
"""


def voc_xml(height: int, width: int, objects: list[tuple], segmented: int = 0) -> str:
    """An annotation of objects (class, [ymin, xmin, ymax, xmax) in 0-based pixels, difficult,
    truncated, pose) as VOC writes them: the first and last pixel inside, counted from 1."""
    rows = "".join(
        f"<object><name>{name}</name><pose>{pose}</pose><truncated>{truncated}</truncated>"
        f"<difficult>{difficult}</difficult><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin>"
        f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox><part><name>hand</name></part></object>"
        for name, (y0, x0, y1, x1), difficult, truncated, pose in objects
    )
    return (f"<annotation><folder>VOC2007</folder><size><width>{width}</width><height>{height}"
            f"</height><depth>3</depth></size><segmented>{segmented}</segmented>{rows}"
            "</annotation>")  # fmt: skip


def _jpeg(pixels: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()


@pytest.fixture(scope="module")
def voc(tmp_path_factory) -> Path:
    """VOCdevkit/VOC2007: a wide photo (blue past the top), an EXIF-turned one whose annotation
    describes it as displayed, one whose annotation gives it its stored size (LabelImg's, which
    ignores EXIF), one without objects, one without an XML and an entity bomb."""
    src = tmp_path_factory.mktemp("voc")
    year = src / "VOCdevkit/VOC2007"
    files = {"wide": (_jpeg(_photo()), voc_xml(200, 400, WIDE, segmented=1)),
             "turned": (turned_jpeg(_photo(420, 260, TALL)), voc_xml(420, 260, TURNED)),
             "stored": (turned_jpeg(_photo(420, 260, TALL)), voc_xml(260, 420, TURNED)),
             "empty": (_jpeg(_photo(objects={})), voc_xml(200, 400, [])),
             "unannotated": (_jpeg(_photo(60, 80, {})), None),
             "bomb": (_jpeg(_photo()), BOMB)}  # fmt: skip
    for name, (image, xml) in files.items():
        write(year / f"JPEGImages/{name}.jpg", image)
        if xml is not None:
            write(year / f"Annotations/{name}.xml", xml)
    main = year / "ImageSets/Main"
    write(main / "train.txt", "wide\nturned\nstored\nbomb\n")
    write(main / "val.txt", "empty\nunannotated\n")
    write(main / "trainval.txt", "wide\nturned\nbomb\nempty\nunannotated\n")  # train and val
    write(main / "car_train.txt", "wide  1\nturned -1\n")  # a class's list: not a split
    return src


@pytest.fixture(scope="module", params=CASES, ids=lambda o: "-".join(map(str, o.values())))
def voc_packed(voc: Path, tmp_path_factory, request) -> tuple[dict, dict, dict]:
    """The VOC set packed once per case: (options, summary, records by file name)."""
    result, records = packed(voc, tmp_path_factory.mktemp("out"), request.param)
    return request.param, result, {key.split("/")[-1]: r for key, r in records.items()}


def test_voc_boxes_and_flags_follow_the_pixels(voc_packed):
    options, result, records = voc_packed
    assert set(records) == {"wide.jpg", "turned.jpg", "empty.jpg", "unannotated.jpg"}
    assert records["wide.jpg"]["key"] == "VOCdevkit/VOC2007/JPEGImages/wide.jpg"
    colours = {name: colour for colour, name in CLASS_OF.items()}
    names = [colours.get(name, name) for name in VOC_CLASSES]  # VOC's 20: TFDS's numbers
    kept = 0
    for key, objects in (("wide.jpg", WIDE), ("turned.jpg", TURNED)):
        record = records[key]
        check_boxes(record, names)
        rows = list(zip([VOC_CLASSES[i] for i in record["objects/label"]],
                        record["objects/is_difficult"].tolist(),
                        record["objects/is_truncated"].tolist(), record["objects/pose"],
                        strict=True))  # fmt: skip
        classes = {row[0] for row in rows}  # each kept object's row its own, in order
        assert rows == [(c, d, t, p) for c, _, d, t, p in objects if c in classes]
        kept += len(rows)
    dropped = len(WIDE) + len(TURNED) - kept
    assert result["boxes_dropped"] == ({"cropped away": dropped} if dropped else {})
    assert dropped == (2 if options.get("resize_mode") == "center-crop" else 0)
    for key in ("empty.jpg", "unannotated.jpg"):
        assert records[key]["objects/bbox"].shape == (0, 4) and records[key]["objects/pose"] == []
    bomb, stored = result["skipped_items"]
    assert bomb["key"].endswith("bomb.jpg") and "Annotations/bomb.xml: declares a DOCTYPE" in (
        bomb["reason"])  # fmt: skip
    # its boxes were normalised by the stored sides and landed elsewhere, kept or turned
    assert stored["key"].endswith("stored.jpg") and stored["reason"].startswith(
        "its annotations in VOCdevkit/VOC2007/Annotations/stored.xml are of a 420x260 image, "
        "but the image is 260x420 as displayed: its EXIF orientation 6 turns the 420x260 it "
        "stores a quarter")  # fmt: skip
    warnings = "\n".join(result["warnings"])
    assert "1 image with no object in an annotation XML kept as negatives" in warnings
    assert "1 image without an annotation XML kept with no objects" in warnings
    assert "<part> (9)" in warnings and "1 image is segmented" in warnings


def test_a_hostile_xml_stops_a_run_that_fails_on_errors(voc: Path, tmp_path: Path):
    with pytest.raises(ImageError, match=r"bomb\.jpg: .*bomb\.xml: declares a DOCTYPE"):
        pack(voc, tmp_path / "fail", PackOptions(workers=1, on_error="fail"))


def test_roboflow_s_export_is_a_voc_dataset_each_split_s_images_beside_their_xmls(tmp_path):
    """train/, valid/, test/ of images beside their XMLs (Roboflow's VOC export): each folder
    a split. It was not recognised: 'no images found; expected SRC/<split>/<class>/<image>'."""
    objects = [("zebra", (0, 0, 10, 20), 0, 0, "Left"), ("ant", (5, 10, 20, 40), 1, 0, "x")]
    for split, name in (("train", "a_jpg.rf.1"), ("valid", "b_jpg.rf.2")):
        write(tmp_path / f"{split}/{name}.jpg", _jpeg(_photo(20, 40, {})))
        write(tmp_path / f"{split}/{name}.xml", voc_xml(20, 40, objects))
    write(tmp_path / "valid/lost.xml", voc_xml(20, 40, objects))  # its image: none
    write(tmp_path / "README.roboflow.txt", "exported")
    dataset = scan(tmp_path)
    assert dataset.kind == "voc" and dataset.warnings[0].startswith(
        "1 annotation XML matches no image (the first: valid/lost.xml)")  # fmt: skip
    keys = {split: [item.key for item in items] for split, items in dataset.splits.items()}
    assert keys == {"train": ["train/a_jpg.rf.1.jpg"], "valid": ["valid/b_jpg.rf.2.jpg"]}
    for (item,) in dataset.splits.values():
        np.testing.assert_allclose(item.fields["objects/bbox"],
                                   [0, 0, 0.5, 0.5, 0.25, 0.25, 1, 1])  # fmt: skip


def test_a_voc_year_folder_of_other_classes_and_no_split_lists(tmp_path: Path):
    """SRC the year folder itself, classes not VOC's (sorted as found), no ImageSets: every
    image in split train; a box's conversion from 1-based pixels, and bad XML by name."""
    objects = [("zebra", (0, 0, 10, 20), 0, 0, "Left"), ("ant", (5, 10, 20, 40), 1, 0, "x")]
    xmls = {"a": voc_xml(20, 40, objects), "b": "<annotation><size>", "c": "<box/>",
            "d": voc_xml(20, 40, [("ant", (0, 0, 10, 20), 0, 0, "Left")]).replace(
                "<xmax>20</xmax>", "<xmax>twenty</xmax>"),
            # far past the image: refused by the worker as no normalised box, the XML unnamed
            "e": voc_xml(20, 40, [("ant", (0, 0, 10, 200), 0, 0, "Left")])}  # fmt: skip
    for name, xml in xmls.items():
        write(tmp_path / f"JPEGImages/{name}.jpg", _jpeg(_photo(20, 40, {})))
        write(tmp_path / f"Annotations/{name}.xml", xml)
    write(tmp_path / "Annotations/lost.xml", voc_xml(20, 40, objects))  # its image: none
    dataset = scan(tmp_path)
    assert dataset.kind == "voc" and dataset.schema["objects/label"].classes == ("ant", "zebra")
    assert dataset.warnings[0] == ("1 annotation XML matches no image (the "
                                   "first: Annotations/lost.xml): not packed; add the image, or "
                                   "remove the XML")  # fmt: skip
    (item,) = dataset.splits["train"]
    assert item.fields["objects/label"] == (1, 0) and item.fields["objects/is_difficult"] == (0, 1)
    np.testing.assert_allclose(item.fields["objects/bbox"],
                               [0, 0, 0.5, 0.5, 0.25, 0.25, 1, 1])  # fmt: skip
    reasons = dict(dataset.skipped)
    assert "Annotations/b.xml: is not well-formed XML" in reasons["JPEGImages/b.jpg"]
    assert "root element is <box>, not <annotation>" in reasons["JPEGImages/c.jpg"]
    assert "d.xml object 0 (ant): <bndbox/xmax> is 'twenty'" in reasons["JPEGImages/d.jpg"]
    assert reasons["JPEGImages/e.jpg"] == (
        "Annotations/e.xml object 0 (ant): its bndbox reaches 5 of the image's side, more than "
        "a side past its edge (<size> 40x20); fix the box or the size")  # fmt: skip
    with pytest.raises(SourceError, match="drop classes="):
        scan(tmp_path, PackOptions(classes=("ant",)))
    with pytest.raises(SourceError, match="holds no Annotations/ folder beside JPEGImages/"):
        scan(tmp_path / "JPEGImages", PackOptions(source="voc"))


def test_two_images_of_one_id_pack_the_one_voc_reads_and_skip_the_other_naming_both(tmp_path):
    """a.jpg beside a.png and a.bmp, with one a.xml: one was packed and the others left out
    unsaid (the first by name: a.bmp before a.jpg, which VOC's devkit, TFDS and detectron2
    read). a.jpg is packed; each other is skipped naming it, the XML and the fix. Without a
    .jpg, the first by name."""
    objects = [("ant", (0, 0, 10, 20), 0, 0, "Left")]
    for name in ("a.jpg", "a.png", "a.bmp", "b.png", "b.bmp"):
        write(tmp_path / f"JPEGImages/{name}", cv2.imencode(name[-4:], _photo(20, 40, {}))[1])
    for name in ("a", "b"):
        write(tmp_path / f"Annotations/{name}.xml", voc_xml(20, 40, objects))
    write(tmp_path / "ImageSets/Main/train.txt", "a\nb\n")
    dataset = scan(tmp_path)
    assert [item.key for item in dataset.splits["train"]] == ["JPEGImages/a.jpg",
                                                              "JPEGImages/b.bmp"]  # fmt: skip
    fix = "give this one a name of its own, or remove it"
    assert dict(dataset.skipped) == {
        f"JPEGImages/{twin}": f"has the image id of JPEGImages/{kept}, taken for it ({why}): an "
        f"id names one image, annotated by Annotations/{kept[0]}.xml; {fix}"
        for twin, kept, why in (("a.bmp", "a.jpg", "as VOC's readers read <id>.jpg"),
                                ("a.png", "a.jpg", "as VOC's readers read <id>.jpg"),
                                ("b.png", "b.bmp", "the first by name"))
    }  # fmt: skip


def test_a_doctype_is_refused_in_any_encoding_and_after_any_prolog(tmp_path: Path):
    """A DOCTYPE in UTF-16, or after 5,000 bytes of comment, is refused unparsed as one in the
    first bytes of UTF-8 is: both were parsed, their entities expanded."""
    xml = voc_xml(20, 40, [("&e;", (0, 0, 10, 20), 0, 0, "Left")])
    doctype = '<!DOCTYPE annotation [<!ENTITY e "dog">]>'
    xmls = {"wide": ('<?xml version="1.0" encoding="UTF-16"?>' + doctype + xml).encode("utf-16"),
            "late": f"<!--{'x' * 5000}-->{doctype}{xml}",
            "plain": ('<?xml version="1.0" encoding="UTF-16"?>' + xml.replace(
                "&e;", "dog")).encode("utf-16")}  # fmt: skip
    for name, data in xmls.items():
        write(tmp_path / f"JPEGImages/{name}.jpg", _jpeg(_photo(20, 40, {})))
        write(tmp_path / f"Annotations/{name}.xml", data)
    dataset = scan(tmp_path)
    reasons = dict(dataset.skipped)
    for name in ("wide", "late"):
        assert f"Annotations/{name}.xml: declares a DOCTYPE" in reasons[f"JPEGImages/{name}.jpg"]
    (item,) = dataset.splits["train"]  # UTF-16 without one is read
    assert item.key == "JPEGImages/plain.jpg" and item.fields["objects/label"] == (11,)


def test_an_xml_in_a_multi_byte_encoding_is_read_or_skipped_not_a_traceback(tmp_path: Path):
    """GBK (Chinese labelling tools write it) is read with Python's codecs, which expat lacks;
    an encoding neither reads skips its image: both were a ValueError's traceback."""
    xml = voc_xml(20, 40, [("狗", (0, 0, 10, 20), 0, 0, "Left")])
    xmls = {
        "gbk": ('<?xml version="1.0" encoding="GBK"?>' + xml).encode("gbk"),
        "wide": ('<?xml version="1.0" encoding="utf-16-be"?>' + xml).encode("utf-16-be"),
        # codecs whose decode fails with a UnicodeError, not its UnicodeDecodeError subclass
        "puny": ('<?xml version="1.0" encoding="punycode"?>' + xml).encode(),
        "undefined": ('<?xml version="1.0" encoding="undefined"?>' + xml).encode(),
    }
    for name, data in xmls.items():
        write(tmp_path / f"JPEGImages/{name}.jpg", _jpeg(_photo(20, 40, {})))
        write(tmp_path / f"Annotations/{name}.xml", data)
    dataset = scan(tmp_path)
    (item,) = dataset.splits["train"]
    assert item.key == "JPEGImages/gbk.jpg" and dataset.schema["objects/label"].classes == ("狗",)
    reasons = dict(dataset.skipped)
    assert reasons["JPEGImages/wide.jpg"] == (
        "Annotations/wide.xml: cannot be read (multi-byte encodings are not supported); save "
        "it as UTF-8")  # fmt: skip
    for name in ("puny", "undefined"):
        assert reasons[f"JPEGImages/{name}.jpg"].startswith(
            f"Annotations/{name}.xml: cannot be read in the encoding it declares, {name}"
        )


def test_a_class_name_no_line_can_hold_skips_its_image_naming_the_xml(tmp_path: Path):
    """A <name> with a line break (`&#10;`) stopped the whole run naming SRC alone, not the XML
    that holds it; it skips its image, naming the XML and the object, as a bad box does."""
    for name, label in (("a", "dog"), ("b", "ant&#10;eater")):
        write(tmp_path / f"JPEGImages/{name}.jpg", _jpeg(_photo(20, 40, {})))
        write(tmp_path / f"Annotations/{name}.xml",
              voc_xml(20, 40, [(label, (0, 0, 10, 20), 0, 0, "Left")]))  # fmt: skip
    dataset = scan(tmp_path)
    assert [item.key for item in dataset.splits["train"]] == ["JPEGImages/a.jpg"]
    assert dict(dataset.skipped)["JPEGImages/b.jpg"] == (
        "Annotations/b.xml object 0 (ant\\neater): the class name 'ant\\neater' holds a "
        "control character or a line break, but class names are written one per line: rename it"
    )


def test_more_class_names_than_the_limit_are_one_line(tmp_path: Path, monkeypatch):
    """The names found were taken whole, where every other source counts its classes."""
    for n, label in enumerate(("ant", "bee", "cow")):
        write(tmp_path / f"JPEGImages/{n}.jpg", _jpeg(_photo(20, 40, {})))
        write(tmp_path / f"Annotations/{n}.xml",
              voc_xml(20, 40, [(label, (0, 0, 10, 20), 0, 0, "Left")]))  # fmt: skip
    monkeypatch.setattr(classlist, "MAX_CLASSES", 2)
    with pytest.raises(SourceError, match=r": the annotations' <name>s make 3 classes, over"):
        scan(tmp_path)


def test_a_src_inside_a_voc_folder_is_told_to_pass_it_and_one_beside_it_is_not(tmp_path: Path):
    """JPEGImages/ of a year folder: pass the year. A dataset beside ~/data/VOCdevkit (a flat
    folder, a class folder of ~/data/flowers) lies in ~/data, not inside the VOC set: its
    error said to pass ~/data, the VOC set."""
    year = tmp_path / "VOCdevkit/VOC2012"
    write(year / "Annotations/a.xml", voc_xml(20, 40, []))
    write(year / "JPEGImages/a.jpg", _jpeg(_photo(20, 40, {})))
    for beside in ("flat/x.jpg", "flowers/daisy/x.jpg"):
        write(tmp_path / beside, _jpeg(_photo(20, 40, {})))
    with pytest.raises(SourceError, match=f"it lies inside a Pascal VOC .*, {year}: pass that$"):
        scan(year / "JPEGImages")
    for src in ("flat", "flowers/daisy"):
        with pytest.raises(SourceError) as caught:
            scan(tmp_path / src)
        assert "lies inside" not in str(caught.value) and "VOC" not in str(caught.value)


def test_a_set_whose_every_xml_is_bad_says_its_images_were_skipped_not_missing(tmp_path):
    """Every image there and every XML broken: the run said 'no image found in JPEGImages/',
    sending the user to look for images that were there."""
    jpeg = _jpeg(_photo(20, 40, {}))
    files = {**{f"JPEGImages/{n}.jpg": jpeg for n in "ab"},
             **{f"Annotations/{n}.xml": "<annotation" for n in "ab"}}  # fmt: skip
    first = "JPEGImages/a.jpg: Annotations/a.xml: is not well-formed XML"
    refused_as_all_skipped(files, tmp_path / "src", first)
