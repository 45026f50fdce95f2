"""The YOLO source (sources/yolo.py): Ultralytics' layouts and data.yaml, label rows (boxes and
segmentation polygons) as objects/bbox and objects/label, polygons as the instance-id `mask`,
images without objects kept and counted. Packed under every --resize-mode, --no-upscale,
--max-side and as it is (an EXIF-turned JPEG kept), each box is its object's own pixels in the
packed image and the mask is pycocotools' drawing of the polygons taken where Pillow takes the
pixels, within one pixel.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from PIL import Image

from shardpack.errors import ImageError, SourceError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from shardpack.sources import classlist, scan
from shardpack.sources.yolo import label_path
from tests.helpers import run_cli
from tests.packing.test_boxes import (
    BOXES,
    COLOURS,
    MODES,
    TALL,
    TALL_BOXES,
    TARGET,
    _photo,
    oracle_sizes,
)

NAMES = ["red", "green", "blue"]
# Every geometry a pack gives an image: each --resize-mode, one without enlarging (a pad to
# more than either photo: they keep their size, on a border), --max-side (libjpeg's scaled
# decode of the turned JPEG), and none (--encode keep: the turned JPEG stored as it is).
CASES = [
    *({"resize": TARGET, "resize_mode": mode} for mode in MODES),
    {"resize": (480, 480), "resize_mode": "pad", "upscale": False},
    {"max_side": 150},
    {"encode": "keep"},
]


def _row(name: str, box: tuple, height: int, width: int) -> str:
    """A YOLO row: class cx cy w h, normalised, of a [ymin, xmin, ymax, xmax) pixel box."""
    ymin, xmin, ymax, xmax = box
    cx, cy = (xmin + xmax) / 2 / width, (ymin + ymax) / 2 / height
    values = (cx, cy, (xmax - xmin) / width, (ymax - ymin) / height)
    return f"{NAMES.index(name)} " + " ".join(f"{v:.6f}" for v in values)


def diamond(box: tuple) -> list[tuple[float, float]]:
    """(x, y) pixel points of a diamond touching each side of the box (its bounding box)."""
    ymin, xmin, ymax, xmax = box
    ym, xm = (ymin + ymax) / 2, (xmin + xmax) / 2
    return [(xmin, ym), (xm, ymin), (xmax, ym), (xm, ymax)]


def notched(box: tuple) -> list[tuple[float, float]]:
    """A U filling the box but for a notch from the middle of its top (not convex)."""
    ymin, xmin, ymax, xmax = box
    x1, x2, ym = xmin + (xmax - xmin) / 3, xmax - (xmax - xmin) / 3, (ymin + ymax) / 2
    return [(xmin, ymin), (x1, ymin), (x1, ym), (x2, ym), (x2, ymin), (xmax, ymin), (xmax, ymax),
            (xmin, ymax)]  # fmt: skip


def _polygon(name: str, points: list, height: int, width: int) -> str:
    """A segmentation row (class x1 y1 x2 y2 ..., normalised) of (x, y) pixel points."""
    return f"{NAMES.index(name)} " + " ".join(f"{x / width:.6f} {y / height:.6f}"
                                             for x, y in points)  # fmt: skip


# The labelled images as displayed: (height, width, each object's polygon by colour); the wide
# photo's label file mixes box rows (red, blue) with a polygon; the turned photo's blue reaches
# past the top.
SHAPES = {
    "images/train/wide.png": (200, 400, {"green": diamond(BOXES["green"])}),
    "images/train/turned.jpg": (420, 260, {"red": notched(TALL_BOXES["red"]),
                                           "green": diamond(TALL_BOXES["green"]),
                                           "blue": diamond(TALL_BOXES["blue"])}),
}  # fmt: skip


def pixel_boxes(record: dict) -> dict[str, np.ndarray]:
    """Each coloured object's box [ymin, xmin, ymax, xmax] in pixels, read off the packed
    image's own pixels (an oracle independent of shardpack's arithmetic), by colour name."""
    pixels = record["image"][..., ::-1].astype(int)  # RGB as decoded: BGR like COLOURS
    found = {}
    for colour, bgr in COLOURS.items():
        ys, xs = np.nonzero(np.all(np.abs(pixels - bgr) < 60, axis=-1))
        if len(ys) > 4:  # a resampled edge's stray pixel is no object
            found[colour] = np.array([ys.min(), xs.min(), ys.max() + 1, xs.max() + 1])
    return found


def check_boxes(record: dict, names: list[str]) -> None:
    """The record's objects/bbox are its objects' pixels (within a pixel, the resampled edge),
    labelled by their colour's name; an object cut away has no box left."""
    height, width = record["image"].shape[:2]
    boxes = record["objects/bbox"] * [height, width, height, width]
    got = dict(zip([names[i] for i in record["objects/label"]], boxes, strict=True))
    seen = pixel_boxes(record)
    assert sorted(got) == sorted(seen), (got, seen)
    for colour, box in got.items():
        np.testing.assert_allclose(box, seen[colour], atol=1.01, err_msg=colour)


def turned_jpeg(upright: np.ndarray) -> bytes:
    """`upright` (BGR) stored a quarter turn away, EXIF orientation 6 turning it back."""
    stored = Image.fromarray(np.ascontiguousarray(np.rot90(upright[..., ::-1], 1)))
    exif = Image.Exif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    stored.save(buffer, "JPEG", quality=95, exif=exif)
    return buffer.getvalue()


def write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


@pytest.fixture(scope="module")
def yolo(tmp_path_factory) -> Path:
    """images/{train,val} beside labels/: a wide PNG (its green object a polygon, blue past
    the top), an EXIF-turned JPEG, an image with an empty label file and one with none."""
    src = tmp_path_factory.mktemp("yolo")
    # `path` is where the dataset lay on its author's machine: not under SRC, passed over
    # and test: names a folder the export left out
    splits = "train: images/train\nval: images/val\ntest: images/test\n"
    names = "names:\n  0: red\n  1: green\n  2: blue\n"
    write(src / "data.yaml", f"path: ../datasets/shapes\n{splits}{names}")
    write(src / "images/train/wide.png", cv2.imencode(".png", _photo())[1].tobytes())
    green = SHAPES["images/train/wide.png"][2]["green"]
    rows = [_row("red", BOXES["red"], 200, 400), _polygon("green", green, 200, 400),
            _row("blue", BOXES["blue"], 200, 400)]  # fmt: skip
    write(src / "labels/train/wide.txt", "\n".join(rows) + "\n")
    write(src / "images/train/turned.jpg", turned_jpeg(_photo(420, 260, TALL)))
    shapes = SHAPES["images/train/turned.jpg"][2]
    write(
        src / "labels/train/turned.txt",
        "\n".join(_polygon(name, points, 420, 260) for name, points in shapes.items()),
    )
    write(src / "images/val/empty.png", cv2.imencode(".png", _photo(objects={}))[1].tobytes())
    write(src / "labels/val/empty.txt", "")
    write(src / "images/val/unlabelled.png", cv2.imencode(".png", _photo(60, 80, {}))[1])
    write(src / "labels/val/unlabeled.txt", "0 0.5 0.5 0.1 0.1\n")  # misspelt: no image has it
    write(src / "labels/val/classes.txt", "red\ngreen\nblue\n")  # LabelImg's: no label file
    return src


def packed(src: Path, out: Path, options: dict) -> tuple[dict, dict[str, dict]]:
    """SRC packed with `options` (PNG unless said): the summary, and the records by key."""
    options = {"encode": "png", **options}
    result = pack(src, out, PackOptions(workers=1, shards=1, shuffle=False, **options))
    index = result.to_json()
    return index, {r["key"]: r for split in index["splits"]
                   for r in iter_examples(out, split, decode=True)}  # fmt: skip


@pytest.fixture(scope="module", params=CASES, ids=lambda o: "-".join(map(str, o.values())))
def yolo_packed(yolo: Path, tmp_path_factory, request) -> tuple[dict, dict, dict]:
    """The YOLO set packed once per case: (options, summary, records by key)."""
    return request.param, *packed(yolo, tmp_path_factory.mktemp("out"), request.param)


def test_yolo_boxes_follow_the_pixels(yolo_packed):
    options, result, records = yolo_packed
    assert set(records) == {"images/train/wide.png", "images/train/turned.jpg",
                            "images/val/empty.png", "images/val/unlabelled.png"}  # fmt: skip
    assert result["splits"]["train"]["num_records"] == 2
    kept = 0
    for key in SHAPES:
        check_boxes(records[key], NAMES)
        kept += len(records[key]["objects/label"])
    dropped = len(BOXES) + len(TALL_BOXES) - kept
    assert result["boxes_dropped"] == ({"cropped away": dropped} if dropped else {})
    assert dropped == (2 if options.get("resize_mode") == "center-crop" else 0)
    for key in ("images/val/empty.png", "images/val/unlabelled.png"):
        assert (
            records[key]["objects/bbox"].shape == (0, 4) and len(records[key]["objects/label"]) == 0
        )
        assert not cv2.imdecode(np.frombuffer(records[key]["mask"], np.uint8), -1).any()
    warnings = "\n".join(result["warnings"])
    assert ("2 objects in 1 label file are boxes without a polygon, beside 4 polygons (YOLO's "
            "segmentation format): their boxes are packed, and no pixel of mask is theirs") in (
        warnings)  # fmt: skip
    assert "1 image with no object in a label file kept as negatives" in warnings
    assert "1 image without a label file kept with no objects" in warnings
    assert "test: 'images/test' is no folder or list file under" in warnings
    assert "1 label file matches no image found (the first: labels/val/unlabeled.txt)" in warnings


def test_yolo_polygons_are_masks_that_follow_the_pixels(yolo_packed):
    options, _, records = yolo_packed
    for key, (height, width, shapes) in SHAPES.items():
        record = records[key]
        names = [NAMES[label] for label in record["objects/label"]]
        oracle = np.zeros(record["image"].shape[:2], np.int64)
        for n, name in enumerate(names):  # the kept objects, numbered in their order
            if name in shapes:  # a box row's object has no pixel
                drawn = coco_drawn(shapes[name], height, width)
                if options.get("encode") == "keep" and key.endswith(".jpg"):
                    drawn = np.rot90(drawn, 1)  # stored as turned_jpeg stores the photo
                oracle[moved(drawn, options) > 0] = n + 1
        check_mask(record["mask"], oracle, len(names))


def coco_drawn(points: list, height: int, width: int) -> np.ndarray:
    """pycocotools' drawing of a polygon of (x, y) pixel points, at the image's size."""
    from pycocotools import mask as coco_mask

    rle = coco_mask.frPyObjects([np.ravel(points).tolist()], height, width)
    return coco_mask.decode(rle)[..., 0]


def moved(pixels: np.ndarray, options: dict) -> np.ndarray:
    """A mask of an upright image where `options` take its pixels: resized nearest-neighbour by
    Pillow to the size oracle_sizes gives, its middle cut out or centred on a border (the odd
    pixel to the far side, as albumentations' CenterCrop and PadIfNeeded place them)."""
    if "resize" not in options and "max_side" not in options:
        return pixels
    mode = options.get("resize_mode", "stretch")
    size, canvas = oracle_sizes(*pixels.shape, mode, options.get("resize", TARGET), **options)
    image = Image.fromarray(pixels).resize(size, Image.Resampling.NEAREST)
    left, top = ((s - c) // 2 if s >= c else -((c - s) // 2)
                 for s, c in zip(size, canvas, strict=True))  # fmt: skip
    return np.asarray(image.crop((left, top, left + canvas[0], top + canvas[1])))  # pads with 0


def check_mask(png: bytes, oracle: np.ndarray, objects: int) -> None:
    """The instance-id PNG is the oracle's map within one pixel: each pixel's id is the
    oracle's at it or a neighbour, and each of the `objects` covers about as many pixels (none
    where the oracle has none)."""
    ids = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED)
    assert ids.shape == oracle.shape and ids.dtype == np.uint8
    near = sliding_window_view(np.pad(oracle, 1, constant_values=-1), (3, 3))
    assert (near == ids[..., None, None]).any(axis=(-2, -1)).all()
    assert ids.max() <= objects
    for n in range(1, objects + 1):
        theirs, mine = int((oracle == n).sum()), int((ids == n).sum())
        assert abs(mine - theirs) <= (max(2, theirs // 4) if theirs else 0), (n, mine, theirs)


def test_the_ultralytics_split_folders_without_data_yaml_number_the_classes(tmp_path: Path):
    png = cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes()
    for split, rows in [
        ("train", "3 0.5 0.5 0.2 0.2\n0 0.1 0.1 0.1 0.1"),
        ("valid", "1 .5 .5 1 1"),
    ]:
        write(tmp_path / f"{split}/images/a.png", png)
        write(tmp_path / f"{split}/labels/a.txt", rows)
    dataset = scan(tmp_path)
    assert dataset.kind == "yolo" and set(dataset.splits) == {"train", "valid"}
    assert dataset.schema["objects/label"].classes == ("0", "1", "2", "3")
    assert "mask" not in dataset.schema.extras  # boxes only: no map to draw
    (item,) = dataset.splits["train"]
    assert item.fields["objects/label"] == (3, 0)
    np.testing.assert_allclose(item.fields["objects/bbox"][:4], [0.4, 0.4, 0.6, 0.6])
    assert label_path("train/images/a.png") == "train/labels/a.txt"
    assert label_path("images/x/images/b.jpeg") == "images/x/labels/b.txt"  # the last images/


def test_one_split_of_a_roboflow_export_says_where_its_class_names_are(tmp_path: Path):
    """`pack export/train` of a Roboflow export (data.yaml beside train/ and valid/) packed its
    classes as '0', '1' without a word; now a warning names the data.yaml above and the folder
    to pass, which packs them by name."""
    pytest.importorskip("yaml")
    png = cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes()
    for split in ("train", "valid"):
        write(tmp_path / f"{split}/images/a.png", png)
        write(tmp_path / f"{split}/labels/a.txt", "1 0.5 0.5 0.2 0.2")
    write(tmp_path / "data.yaml", "train: ../train/images\nval: ../valid/images\nnames: [a, b]\n")
    one = scan(tmp_path / "train")
    assert one.schema["objects/label"].classes == ("0", "1")
    assert one.warnings == (f"{tmp_path / 'train'}: holds no data.yaml, so its classes are named "
                            f"by their numbers; {tmp_path / 'data.yaml'} above it names them: pass "
                            f"{tmp_path} to pack the dataset it describes",)  # fmt: skip
    whole = scan(tmp_path)
    assert whole.schema["objects/label"].classes == ("a", "b") and not whole.warnings
    (tmp_path / "data.yaml").unlink()  # no names anywhere: nothing to point at
    assert not scan(tmp_path / "train").warnings


def test_a_label_row_repeated_in_its_file_is_one_object_with_a_warning(tmp_path: Path):
    png = cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes()
    rows = {"a": "0 0.5 0.5 0.2 0.2\n1 0.3 0.3 0.1 0.1\n0 0.50 0.5 0.2 0.2\n",  # the 1st again
            "b": "0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.3"}  # fmt: skip
    for name, text in rows.items():
        write(tmp_path / f"train/images/{name}.png", png)
        write(tmp_path / f"train/labels/{name}.txt", text)
    dataset = scan(tmp_path)
    a, b = sorted(dataset.splits["train"], key=lambda item: item.key)
    assert a.fields["objects/label"] == (0, 1) and len(a.fields["objects/bbox"]) == 8
    assert b.fields["objects/label"] == (0, 0)  # a row alike but for one number: two objects
    assert any(w.startswith("1 label rows repeat an earlier row of their file")
               for w in dataset.warnings)  # fmt: skip


def test_bad_label_rows_skip_their_image_naming_the_line(tmp_path: Path):
    png = cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes()
    src = tmp_path / "src"
    write(src / "data.yaml", "train: ../train/images\nnames: [a, b]\n")  # Roboflow's ../
    many = " ".join(["0.1 0.1 0.9 0.1 0.5 0.9"] * 3334)  # 10,002 points: over the cap
    labels = {"ok": "1 0.5 0.5 0.2 0.2", "class": "0 0.5 0.5 0.2 0.2\n2 0.5 0.5 0.1 0.1",
              "short": "0 0.5 0.5 0.2", "text": "a 0.5 0.5 0.2 0.2",
              "huge": f"0 0.1 0.1 0.3 0.1 0.2 0.3\n1 {many}",
              "pixels": "0 320 240 50 50",  # in pixels: refused naming the line, not moved
              "far": "1 0.1 0.1 2.5 0.1 2.5 0.9 0.1 0.9",
              "negative": "0 0.5 0.5 0.2 -0.1", "nan": "1 0.5 nan 0.2 0.2"}  # fmt: skip
    for name, text in labels.items():
        write(src / f"train/images/{name}.png", png)
        write(src / f"train/labels/{name}.txt", text)
    dataset = scan(src)
    assert [i.key for i in dataset.splits["train"]] == ["train/images/ok.png"]
    reasons = dict(dataset.skipped)
    wrong = "train/labels/class.txt line 2: class 2 is not one of data.yaml's 2 classes"
    assert reasons["train/images/class.png"].startswith(wrong)
    assert "line 1: 4 values; a row is class cx cy w h" in reasons["train/images/short.png"]
    assert "is not numbers" in reasons["train/images/text.png"]
    assert reasons["train/images/huge.png"] == ("train/labels/huge.txt line 2: holds a polygon "
                                                "of 10,002 points, over the 10,000 shardpack "
                                                "draws")  # fmt: skip
    assert reasons["train/images/pixels.png"].startswith(
        "train/labels/pixels.txt line 1: its box reaches 215, more than the image's side past "
        "its edge; a row's numbers are fractions of the image's width and height (0 to 1)"
    )
    assert "far.txt line 1: its box reaches 2.5, more than" in reasons["train/images/far.png"]
    # each said which number and the fix (it was "width 0.2 or height -0.1 is negative")
    assert reasons["train/images/negative.png"] == ("train/labels/negative.txt line 1: height "
                                                    "-0.1 is negative; fix the row")  # fmt: skip
    assert reasons["train/images/nan.png"] == ("train/labels/nan.txt line 1: 'nan' is not a "
                                               "finite decimal number (ASCII digits, as 0.25 or "
                                               "1e-3); fix the row")  # fmt: skip
    assert "mask" not in dataset.schema.extras  # the only polygon's image was skipped
    with pytest.raises(ImageError, match=r"class\.png: train/labels/class\.txt line 2") as e:
        pack(src, tmp_path / "out", PackOptions(workers=1, on_error="fail"))
    # its own fix, then the way past: "fix it" said after it no more
    assert str(e.value).endswith("; fix the row or data.yaml's names, or pass on_error='skip' "
                                 "to leave it out")  # fmt: skip


# Numbers Python's float() reads and YOLO's trainers do not read alike: '0.2_5' is 0.25 to
# float() and Ultralytics (numpy), 0.2 to darknet (C's fscanf); non-ASCII digits ('٣', '０')
# are digits to float() alone; NaN and infinities Ultralytics' checks refuse.
ODD_NUMBERS = ["0.2_5", "0.\u0663", "\uff10.5", "nan", "-inf", "Infinity", "1e999"]


@pytest.mark.parametrize("token", ODD_NUMBERS)
def test_a_number_only_python_reads_skips_its_image_naming_the_line(tmp_path: Path, token):
    """Each was packed as float() reads it (or, NaN and infinities, refused as 'not a finite
    number'); the row is refused with its file and line, as other bad rows are. Decimals
    spelled otherwise (an exponent, a sign, a point at either end) are numbers to all."""
    png = cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes()
    rows = {"odd": f"0 0.5 0.5 0.2 0.2\n1 0.5 0.5 {token} 0.2",
            "spelled": "+1 5e-1 .5 2.E-1 0.20"}  # fmt: skip
    for name, text in rows.items():
        write(tmp_path / f"images/{name}.png", png)
        write(tmp_path / f"labels/{name}.txt", text)
    dataset = scan(tmp_path)
    assert dataset.skipped == (("images/odd.png", f"labels/odd.txt line 2: {token!r} is not a "
                                "finite decimal number (ASCII digits, as 0.25 or 1e-3); fix the "
                                "row"),)  # fmt: skip
    (item,) = dataset.splits["train"]
    assert item.fields["objects/label"] == (1,)
    np.testing.assert_allclose(item.fields["objects/bbox"], [0.4, 0.4, 0.6, 0.6])


# Anchors of lists of 9 aliases each: b29 stands for 9**30 strings, in a few hundred bytes.
ALIASES = "b0: &b0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 9)}]\n" for i in range(1, 30)
)


@pytest.mark.parametrize("text, words", [
    ("names: [a, b\n", "is not YAML"),
    ("names: !!python/object/apply:os.system [echo]\n", "is not YAML"),
    ("names: [a, b]\nnc: 3\n", "nc is 3 but names has 2 names"),
    ("names: {zero: a}\n", "not class numbers"),
    ("names: [a]\ntrain: images/elsewhere\n", "train: 'images/elsewhere' is no folder"),
    (f"names: [a]\n{ALIASES}train: *b29\n", r"train: \[\[\[\.\.\.\], \[\.\.\.\], "),
    (f"names: [a]\n{ALIASES}nc: *b29\n", r"nc \[\[\[\.\.\.\]"),
    # one name of two classes (TFDS's ClassLabel refuses it), and a name of spaces
    ("names: [cat, dog, cat]\n", "names holds 'cat' twice; give each class a name of its own"),
    ("names: {0: a, 2: '1'}\n", "names holds '1' twice"),  # 1 is named by its number
    ("names: [cat, ' ']\n", "names holds an empty name"),
])  # fmt: skip
def test_a_bad_data_yaml_is_one_line_naming_it(tmp_path: Path, text: str, words: str):
    write(tmp_path / "images/a.png", cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes())
    write(tmp_path / "labels/a.txt", "")
    write(tmp_path / "data.yaml", text)
    with pytest.raises(SourceError, match="data.yaml: .*" + words) as caught:
        scan(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_data_yaml_naming_more_classes_than_the_limit_is_one_line(tmp_path, monkeypatch):
    """A list of names was taken whole (a map was counted): a data.yaml of 16 MiB makes
    millions of classes, each a line of label.labels.txt and a name in index.json."""
    write(tmp_path / "images/a.png", cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes())
    write(tmp_path / "labels/a.txt", "")
    write(tmp_path / "data.yaml", "names: [a, b, c]\n")
    monkeypatch.setattr(classlist, "MAX_CLASSES", 2)
    with pytest.raises(SourceError, match=r"data\.yaml: data\.yaml's names make 3 classes, over"):
        scan(tmp_path)


def test_without_pyyaml_data_yaml_is_one_line_giving_the_checkout_s_install(
    tmp_path: Path, monkeypatch
):
    """As every missing extra: `pip install '.[yolo]'` (the package is not published yet)."""
    write(tmp_path / "images/a.png", cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes())
    write(tmp_path / "labels/a.txt", "")
    write(tmp_path / "data.yaml", "names: [a]\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # what import finds when it is missing
    with pytest.raises(SourceError, match=r"data\.yaml: .*needs PyYAML.*pip install '\.\[yolo\]'"):
        scan(tmp_path)


def test_a_split_listed_in_a_txt_file_stays_inside_src(tmp_path: Path):
    src = tmp_path / "src"
    write(src / "images/a.png", cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes())
    write(src / "labels/a.txt", "0 0.5 0.5 0.2 0.2\n")
    write(src / "lists/train.txt", "../images/a.png\n/etc/passwd\n../../x.png\n../images/b.png\n"
                                   "../images/a\0.png\n")  # fmt: skip
    write(src / "data.yaml", "train: lists/train.txt\nnames: [a]\n")
    dataset = scan(src)
    assert [item.key for item in dataset.splits["train"]] == ["images/a.png"]
    reasons = dict(dataset.skipped)
    assert "line 2: names an image outside SRC" in reasons["/etc/passwd"]
    assert "line 3: names an image outside SRC" in reasons["../../x.png"]
    assert "line 4: cannot read the image" in reasons["images/b.png"]
    # a NUL, which no path holds: the system's ValueError was a traceback out of the scan
    assert "line 5: holds a NUL, which no file name does" in reasons["../images/a\0.png"]
    with pytest.raises(SourceError, match=r"holds no data\.yaml, and no images/ folder beside"):
        scan(src / "lists", PackOptions(source="yolo"))


def test_a_split_of_src_itself_looks_for_stray_label_files_in_src_not_in_the_system_root(
    tmp_path: Path,
):
    """data.yaml's `train: .` (images beside their label files in SRC): the label files no image
    has were looked for under '/x.jpg''s folder, the whole file system walked from /."""
    src = tmp_path / "src"
    write(src / "a.png", cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes())
    write(src / "a.txt", "0 0.5 0.5 0.2 0.2\n")
    write(src / "stray.txt", "0 0.5 0.5 0.2 0.2\n")
    write(src / "data.yaml", "train: .\nnames: [a]\n")
    result = run_cli("pack", str(src), str(tmp_path / "out"), "--no-progress", "--workers", "1")
    assert result.returncode == 0, result.stderr
    assert "1 label file matches no image found (the first: stray.txt)" in result.stderr
    (record,) = iter_examples(tmp_path / "out")
    np.testing.assert_allclose(record["objects/bbox"], [[0.4, 0.4, 0.6, 0.6]])


def test_a_grow_that_brings_the_first_polygon_is_refused_naming_the_mask_it_adds(tmp_path: Path):
    png = cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes()
    src, out = tmp_path / "src", tmp_path / "out"
    write(src / "train/images/a.png", png)
    write(src / "train/labels/a.txt", "0 0.5 0.5 0.2 0.2")
    pack(str(src), str(out), PackOptions(workers=1))
    held = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    write(src / "train/images/b.png", png)
    write(src / "train/labels/b.txt", "0 0.1 0.1 0.5 0.1 0.5 0.5 0.1 0.5")  # a polygon
    result = run_cli("pack", str(src), str(out), "--append", "--no-progress")
    assert result.returncode == 2, result.stderr
    assert 'it adds ["mask"]' in result.stderr and "new output folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == held


def test_a_src_inside_a_yolo_dataset_is_told_to_pass_it(yolo: Path):
    for inside in ("data.yaml", "images"):
        with pytest.raises(SourceError, match=f"it lies inside a YOLO dataset .*, {yolo}: pass"):
            scan(yolo / inside)


def refused_as_all_skipped(files: dict[str, bytes | str], src: Path, first: str) -> None:
    """Write `files` under src, pack it, and check the run says none was packed, each of its
    images skipped, the first reason `first` (it said "no image found", of images there)."""
    for name, data in files.items():
        write(src / name, data)
    with pytest.raises(SourceError) as caught:
        pack(src, src.parent / "out", PackOptions(workers=1))
    said = str(caught.value)
    assert said.startswith(f"no image was packed from {src}, 2 items skipped (the first, {first}")
    assert "no image found" not in said and not (src.parent / "out" / "index.json").exists()


def test_a_set_whose_every_label_file_is_bad_says_its_images_were_skipped_not_missing(
    tmp_path: Path,
):
    """data.yaml naming fewer classes than every label file uses: the run said 'no image found
    in images', where both images were."""
    png = cv2.imencode(".png", _photo(20, 20, {}))[1].tobytes()
    files = {"data.yaml": "names: [a]\n", **{f"images/{n}.png": png for n in "ab"},
             **{f"labels/{n}.txt": "1 0.5 0.5 0.2 0.2" for n in "ab"}}  # fmt: skip
    first = "images/a.png: labels/a.txt line 1: class 1 is not one of data.yaml's 1 classes"
    refused_as_all_skipped(files, tmp_path / "src", first)


def test_images_sharing_one_label_file_are_both_packed_with_a_warning_naming_them(
    tmp_path: Path,
):
    """`a.jpg` beside `a.png` both take `labels/a.txt` (as Ultralytics reads them): both were
    packed with its objects without a word; now a warning names the pair and the file."""
    photo = _photo(20, 20, {})
    write(tmp_path / "images/train/a.jpg", cv2.imencode(".jpg", photo)[1].tobytes())
    write(tmp_path / "images/train/a.png", cv2.imencode(".png", photo)[1].tobytes())
    write(tmp_path / "images/train/b.png", cv2.imencode(".png", photo)[1].tobytes())
    write(tmp_path / "labels/train/a.txt", "0 0.5 0.5 0.2 0.2")
    write(tmp_path / "labels/train/b.txt", "0 0.5 0.5 0.2 0.2")
    dataset = scan(tmp_path)
    items = {item.key: item.fields["objects/label"] for item in dataset.splits["train"]}
    assert items == {"images/train/a.jpg": (0,), "images/train/a.png": (0,),
                     "images/train/b.png": (0,)}  # fmt: skip
    (said,) = [w for w in dataset.warnings if "share one label file" in w]
    assert said.startswith("images/train/a.jpg and images/train/a.png share one label file, "
                           "labels/train/a.txt: both are packed")  # fmt: skip
    (tmp_path / "labels/train/a.txt").unlink()  # no label file: two negatives, nothing shared
    assert not any("share one label file" in w for w in scan(tmp_path).warnings)
