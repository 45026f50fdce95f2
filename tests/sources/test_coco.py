"""The COCO source (sources/coco.py) and its objects through every transform: a small COCO set
built on disk (polygons of several parts, a crowd RLE as COCO compresses it, an uncompressed
RLE with a hole, keypoints, an image without objects, a box partly outside its image, an
EXIF-rotated JPEG) is packed under every --resize-mode and --max-side; the boxes and keypoints
are checked against albumentations and the masks against pycocotools' decoding taken through
albumentations' nearest-neighbour transforms, within one pixel.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from shardpack.errors import ShardpackError, SourceError
from shardpack.options import PackOptions
from shardpack.packing import masks
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from shardpack.sources import coco as coco_source
from shardpack.sources import scan
from tests.helpers import torch_held_out
from tests.packing.test_boxes import MODES, STORED, oracle_steps

TARGET = (48, 36)  # not square: width and height cannot be swapped unseen
CATEGORIES = [  # ids not contiguous, not in order
    {"id": 7, "name": "dog"},
    {"id": 1, "name": "person", "keypoints": ["nose", "left_hand", "right_hand"],
     "skeleton": [[1, 2], [1, 3]]},
    {"id": 3, "name": "car"},
]  # fmt: skip
CLASSES = ["person", "car", "dog"]  # in id order


def _rle(mask: np.ndarray) -> dict:
    """COCO's compressed RLE of a bool mask, made by pycocotools."""
    from pycocotools import mask as coco_mask

    rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": list(rle["size"]), "counts": rle["counts"].decode()}


def _counts(mask: np.ndarray) -> list[int]:
    """The uncompressed RLE counts of a bool mask (column-major runs, starting with 0s)."""
    flat = mask.T.reshape(-1).astype(np.int8)
    edges = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
    return runs if flat[0] == 0 else [0, *runs]


def _photo(height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(height * width)
    return rng.integers(0, 255, (height, width, 3), np.uint8)


def _jpeg_turned(upright: np.ndarray, orientation: int) -> bytes:
    """A JPEG stored turned, with the EXIF orientation that shows `upright`."""
    stored = Image.fromarray(upright[..., ::-1]).transpose(STORED[orientation][0])
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    stored.save(buffer, "JPEG", quality=90, exif=exif)
    return buffer.getvalue()


def _coco(root: Path) -> dict:
    """SRC: annotations/instances_val2017.json, images in val2017/; the JSON's doc back."""
    images = root / "val2017"
    images.mkdir(parents=True)
    (root / "annotations").mkdir()
    cv2.imwrite(str(images / "a.png"), _photo(80, 120))
    cv2.imwrite(str(images / "empty.png"), _photo(48, 64))
    (images / "turned.jpg").write_bytes(_jpeg_turned(_photo(90, 60), 6))  # shown 60x90
    crowd = np.zeros((90, 60), bool)
    crowd[50:85, 5:40] = True
    donut = np.zeros((90, 60), bool)
    donut[10:40, 20:55] = True
    donut[18:30, 30:45] = False  # its hole
    annotations = [
        # two parts (an occluded car), one of them over the other's edge
        {"id": 11, "image_id": 1, "category_id": 3, "bbox": [10, 10, 50, 30], "iscrowd": 0,
         "area": 1000.0, "segmentation": [[10, 10, 40, 10, 40, 40, 10, 40],
                                          [35, 15, 60, 15, 60, 30, 35, 30]]},
        {"id": 12, "image_id": 1, "category_id": 1, "bbox": [70, 20, 30, 50], "iscrowd": 0,
         "area": 1200.0, "segmentation": [[70, 20, 100, 20, 85, 70]],
         "keypoints": [85, 25, 2, 72, 60, 1, 0, 0, 0], "num_keypoints": 2},
        # a dog reaching past the right edge (120): its box and polygon too
        {"id": 13, "image_id": 1, "category_id": 7, "bbox": [100, 50, 40, 25], "iscrowd": 0,
         "area": 500.0, "segmentation": [[100, 50, 140, 50, 140, 75, 100, 75]]},
        {"id": 21, "image_id": 3, "category_id": 1, "bbox": [5, 50, 35, 35], "iscrowd": 1,
         "area": float(crowd.sum()), "segmentation": _rle(crowd)},
        {"id": 22, "image_id": 3, "category_id": 3, "bbox": [20, 10, 35, 30], "iscrowd": 0,
         "area": float(donut.sum()),
         "segmentation": {"size": [90, 60], "counts": _counts(donut)}},
        {"id": 23, "image_id": 3, "category_id": 1, "bbox": [2, 2, 20, 30], "iscrowd": 0,
         "area": 300.0, "segmentation": [[2, 2, 22, 2, 22, 32, 2, 32]],
         "keypoints": [12, 5, 2, 4, 30, 2, 20, 30, 2]},
    ]  # fmt: skip
    doc = {
        "info": {"year": 2017},  # unknown keys are fine
        "images": [
            {"id": 1, "file_name": "a.png", "width": 120, "height": 80},
            {"id": 2, "file_name": "empty.png", "width": 64, "height": 48},
            {"id": 3, "file_name": "turned.jpg", "width": 60, "height": 90},
        ],
        "annotations": annotations,
        "categories": CATEGORIES,
    }
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(doc))
    return doc


@pytest.fixture(scope="module")
def coco(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("coco")
    return root, _coco(root)


def _pack(src: Path, out: Path, **options):
    return pack(src, out, PackOptions(workers=1, shards=1, shuffle=False, **options))


def _upright(doc: dict, image: dict) -> dict:
    """The oracle's view of one image as displayed: per object its box (albumentations'
    normalised xyxy), keypoints in pixels and mask (pycocotools' decoding)."""
    from pycocotools import mask as coco_mask

    height, width = image["height"], image["width"]
    objects = []
    for a in doc["annotations"]:
        if a["image_id"] != image["id"]:
            continue
        segmentation = a["segmentation"]
        if isinstance(segmentation, list):
            rle = coco_mask.merge(coco_mask.frPyObjects(segmentation, height, width))
        elif isinstance(segmentation["counts"], list):
            rle = coco_mask.frPyObjects(segmentation, height, width)
        else:
            rle = {"size": segmentation["size"], "counts": segmentation["counts"].encode()}
        x, y, w, h = a["bbox"]
        box = [max(x, 0) / width, max(y, 0) / height, min(x + w, width) / width,
               min(y + h, height) / height]  # fmt: skip
        points = np.asarray(a.get("keypoints", [0] * 9), float).reshape(-1, 3)
        objects.append({"id": a["id"], "box": box, "points": points, "crowd": a["iscrowd"],
                        "mask": coco_mask.decode(rle).astype(np.uint8)})  # fmt: skip
    return {"height": height, "width": width, "objects": objects}


def _expected(view: dict, steps: list) -> tuple[dict, tuple]:
    """albumentations' transform of one image's objects: id -> (box in pixels, keypoints in
    pixels, visible after, mask), boxes of no area left dropped; and the image's size."""
    with torch_held_out():  # scipy and pydantic: imported by the tests that use it
        import albumentations as A

    objects = view["objects"]
    points = np.concatenate([o["points"][:, :2] for o in objects]) if objects else np.zeros((0, 2))
    compose = A.Compose(
        steps,
        bbox_params=A.BboxParams(
            format="albumentations", label_fields=["ids"], clip=True, min_area=1e-3
        ),
        keypoint_params=A.KeypointParams(format="xy", remove_invisible=False),
    )
    image = np.zeros((view["height"], view["width"], 3), np.uint8)
    done = compose(image=image, bboxes=[o["box"] for o in objects], ids=[o["id"] for o in objects],
                   keypoints=points, masks=[o["mask"] for o in objects])  # fmt: skip
    height, width = done["image"].shape[:2]
    moved = np.asarray(done["keypoints"]).reshape(-1, 3, 2)
    expected = {}
    for ident, box in zip(done["ids"], np.asarray(done["bboxes"]).tolist(), strict=True):
        n = next(i for i, o in enumerate(objects) if o["id"] == ident)
        xy = moved[n]
        inside = (xy[:, 0] >= 0) & (xy[:, 0] < width) & (xy[:, 1] >= 0) & (xy[:, 1] < height)
        visible = inside & (objects[n]["points"][:, 2] > 0)
        pixels = np.array([box[1] * height, box[0] * width, box[3] * height, box[2] * width])
        expected[ident] = (pixels, xy, visible, np.asarray(done["masks"][n]) > 0)
    return expected, (height, width)


def _check(record: dict, view: dict, steps: list) -> None:
    """The record's objects are the oracle's: the same objects kept, boxes and keypoints within
    one pixel, and each pixel of its instance-id map the oracle's within one pixel."""
    expected, size = _expected(view, steps)
    height, width = record["height"], record["width"]
    assert (height, width) == size
    assert record["objects/id"].tolist() == list(expected)  # the same objects, in order
    got = record["objects/bbox"].reshape(-1, 4) * [height, width, height, width]
    points = record["objects/keypoints"].reshape(-1, 3, 3)
    oracle_map = np.zeros(size, np.int64)
    crowd = dict(zip(record["objects/id"].tolist(), record["objects/is_crowd"].tolist(),
                     strict=True))  # fmt: skip
    order = sorted(range(len(expected)), key=lambda i: not crowd[list(expected)[i]])
    for n, (ident, (box, xy, visible, _)) in enumerate(expected.items()):
        np.testing.assert_allclose(got[n], box, atol=1.0, err_msg=str(ident))
        np.testing.assert_array_equal(points[n, :, 2] > 0, visible, err_msg=str(ident))
        mine = points[n, :, :2] * [width, height]
        np.testing.assert_allclose(mine[visible], xy[visible], atol=1.0, err_msg=str(ident))
        assert (points[n][~visible] == 0).all()  # COCO's "not labelled"
    for n in order:
        oracle_map[expected[list(expected)[n]][3]] = n + 1
    ids = cv2.imdecode(np.frombuffer(record["mask"], np.uint8), cv2.IMREAD_UNCHANGED)
    assert ids.shape == size and ids.dtype == np.uint8
    near = np.zeros((*size, 9), np.int64)  # the oracle's values within one pixel of each pixel
    padded = np.pad(oracle_map, 1, constant_values=-1)
    for k, (dy, dx) in enumerate(np.ndindex(3, 3)):
        near[..., k] = padded[dy : dy + size[0], dx : dx + size[1]]
    assert (near == ids[..., None]).any(axis=-1).all()
    for n in range(len(expected)):  # and no object lost: each covers its oracle's pixels
        theirs = (oracle_map == n + 1).sum()
        assert abs(int((ids == n + 1).sum()) - theirs) <= max(2, theirs // 4), n


CASES = [
    *({"resize": TARGET, "resize_mode": mode} for mode in MODES),
    {"resize": TARGET, "resize_mode": "center-crop", "upscale": False},
    {"max_side": 40},
]


@pytest.mark.parametrize("options", CASES, ids=lambda o: "-".join(map(str, o.values())))
def test_objects_follow_the_pixels_in_every_mode(coco, tmp_path: Path, options: dict):
    src, doc = coco
    result = _pack(src, tmp_path / "out", encode="png", **options)
    records = {r["image/id"]: r for r in iter_examples(tmp_path / "out", split="val")}
    assert len(records) == 3
    mode = options.get("resize_mode", "stretch")
    dropped = 0
    for image in doc["images"]:
        view = _upright(doc, image)
        steps = oracle_steps(image["height"], image["width"], mode,
                             **{"target": TARGET, **options})  # fmt: skip
        _check(records[image["id"]], view, steps)
        dropped += len(view["objects"]) - len(records[image["id"]]["objects/id"])
    assert result.to_json()["boxes_dropped"] == ({"cropped away": dropped} if dropped else {})


def test_a_rotated_jpeg_kept_as_it_is_gets_its_objects_on_the_stored_pixels(coco, tmp_path):
    with torch_held_out():  # scipy and pydantic: imported by the tests that use it
        import albumentations as A

    src, doc = coco
    _pack(src, tmp_path / "out")  # --encode keep: the JPEG's bytes, read unturned
    records = {r["image/id"]: r for r in iter_examples(tmp_path / "out", split="val")}
    turned = records[3]
    assert (turned["height"], turned["width"]) == (60, 90)  # as stored
    steps = [getattr(A, name)(p=1) for name in STORED[6][1]]
    _check(turned, _upright(doc, doc["images"][2]), steps)
    _check(records[1], _upright(doc, doc["images"][0]), [A.NoOp()])
    np.testing.assert_allclose(
        records[1]["objects/bbox"][2], [50 / 80, 100 / 120, 75 / 80, 1], atol=1e-6
    )  # the dog's box clipped at the image's right edge


def test_the_layout_is_recognised_and_read_as_tfds_names_it(coco):
    src, _ = coco
    dataset = scan(src)  # no --source: recognised by its annotations/ folder
    assert dataset.kind == "coco" and set(dataset.splits) == {"val"}
    schema = dataset.schema
    assert schema["objects/label"].classes == tuple(CLASSES)
    assert schema["objects/keypoints"].shape == (-1, 9) and schema["mask"].dtype == "bytes"
    items = {item.fields["image/id"]: item for item in dataset.splits["val"]}
    assert items[2].fields["objects/bbox"] == ()  # the image without objects is kept
    first = items[1].fields
    assert first["objects/label"] == (1, 0, 2) and first["objects/id"] == (11, 12, 13)
    assert first["objects/area"] == (1000, 1200, 500)
    assert items[3].fields["objects/is_crowd"] == (1, 0, 0)
    np.testing.assert_allclose(first["objects/keypoints"][1],
                               [85 / 120, 25 / 80, 2, 72 / 120, 60 / 80, 1, 0, 0, 0])  # fmt: skip


def _broken(tmp_path: Path, change) -> Path:
    root = tmp_path / "src"
    doc = _coco(root)
    change(doc)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(doc))
    return root


def _second(doc: dict, **changes) -> None:
    doc["annotations"][1].update(changes)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: _second(d, bbox=[1, 2, 3]), "annotation 12: bbox [1, 2, 3] is not [x, y"),
        (lambda d: _second(d, category_id=99), "annotation 12: category_id 99 is not among "
         "the categories; fix it or add its category to the JSON's categories"),
        (lambda d: _second(d, segmentation={"size": [5, 5], "counts": "0"}),
         "RLE of size [5, 5], not the image's [80, 120]"),
        (lambda d: _second(d, keypoints=[1, 2]), "keypoints is not a list of (x, y, v)"),
        (lambda d: _second(d, segmentation={"size": [80, 120], "counts": "0a"}),
         "RLE string is cut short"),
        (lambda d: _second(d, segmentation={"size": [80, 120], "counts": [5, 3]}),
         "RLE counts cover 8 pixels, not 120x80"),
        # one count of 100,000 characters: quadratic to read (a second), refused at 64 bits
        (lambda d: _second(d, segmentation={"size": [80, 120], "counts": "o" * 100_000 + "0"}),
         "RLE string holds a count past any image's pixels"),
        # numbers past int64, where objects/area and objects/id are stored: a worker's traceback
        (lambda d: _second(d, area=1e300), "annotation 12: area 1e+300 is past any image's"),
        (lambda d: _second(d, area=None, bbox=[0, 0, 1e200, 1e200]), "bbox [0, 0, 1e+200, 1e+"),
        # a box in another image's pixels (more than a side past the edge): it was clipped
        (lambda d: _second(d, bbox=[10, 10, 1e6, 8]),
         "annotation 12: bbox [10, 10, 1000000.0, 8] reaches 8333.42 of the image's width, more "
         "than a side past its edge (the JSON's size 120x80); fix the box or the image's width "
         "and height"),
        # NaN (Python's json reads it), a text: the box's area was stored in its place
        (lambda d: _second(d, area=float("nan")), "annotation 12: area nan is not a number of"),
        (lambda d: _second(d, area="1200"), "annotation 12: area '1200' is not a number of"),
        # a text "0" was taken for true: a crowd, whose pixels any object hides
        (lambda d: _second(d, iscrowd="0"), "annotation 12: iscrowd '0' is not 0 or 1"),
        # integers past a float's range (JSON's have no bound): an OverflowError's traceback
        (lambda d: _second(d, bbox=[70, 20, 10**400, 50]), "annotation 12: bbox [70, 20, 1000"),
        (lambda d: _second(d, area=-(10**400)), "annotation 12: area -1000"),
        (lambda d: _second(d, keypoints=[10**400, 25, 2]), "keypoints is not a list of (x, y,"),
    ],
    ids=["bbox", "category", "rle-size", "keypoints", "rle-cut", "rle-cover", "rle-long",
         "area-huge", "area-box", "bbox-far", "area-nan", "area-text", "iscrowd-text",
         "bbox-past-float", "area-past-float", "keypoints-past-float"],
)  # fmt: skip
def test_an_annotation_it_cannot_use_skips_its_image_with_the_reason(tmp_path, change, reason):
    src = _broken(tmp_path, change)
    dataset = scan(src)
    (skipped,) = dataset.skipped
    assert skipped[0] == "val2017/a.png" and reason in skipped[1], skipped
    assert len(dataset.splits["val"]) == 2
    # stopped, it says the way past as every source does (it said only "(on_error='fail')"):
    # the reason's own fix where it names one, else "fix it", once
    with pytest.raises(SourceError, match=r"val2017/a\.png: annotation 12") as stopped:
        scan(src, PackOptions(on_error="fail"))
    said = str(stopped.value)
    assert said.endswith(("; fix it, or pass on_error='skip' to leave it out",
                          ".json), or pass on_error='skip' to leave it out")), said  # fmt: skip
    assert said.count("fix it") <= 1, said


def _pycocotools_crowd(value: object) -> int | None:
    """What pycocotools makes of an annotation's iscrowd: 0 or 1 where getAnnIds finds it as
    that and COCOeval ignores it alike (a crowd's matches are ignored); None where COCOeval
    cannot evaluate it, or where the two disagree (a text "0": found as neither, yet ignored)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    box = {"image_id": 1, "category_id": 1, "bbox": [2, 2, 10, 10]}
    truth = COCO()
    truth.dataset = {"images": [{"id": 1, "width": 30, "height": 20}],
                     "annotations": [{**box, "id": 1, "area": 100, "iscrowd": value}],
                     "categories": [{"id": 1, "name": "x"}]}  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
        truth.createIndex()
        found = [flag for flag in (0, 1) if truth.getAnnIds(iscrowd=flag)]
        evaluation = COCOeval(truth, truth.loadRes([{**box, "score": 1.0}]), "bbox")
        try:
            evaluation.evaluate()
        except (TypeError, ValueError):  # int(iscrowd) of a text, null, a list
            return None
    ignored = evaluation.evalImgs[0]["gtIgnore"].tolist()
    return found[0] if found == ignored else None


@pytest.mark.parametrize("value", [False, 0.0, True, 1.0, "", None, [], {}, "0", 2, "yes", 0.5],
                         ids=repr)  # fmt: skip
def test_an_iscrowd_is_read_as_pycocotools_reads_it_or_skips_its_image(tmp_path, value):
    """A falsy iscrowd (false, "", null, [], 0.0) was packed as 0, whatever it was: pycocotools
    cannot evaluate "", null or [] (int() of them), so those skip their image now, as a text
    "0", 2 and "yes" did; false and 0.0 are 0 to it, true and 1.0 a crowd, packed so. Only an
    iscrowd left out is 0 (detectron2's default), where pycocotools has none."""
    expected = _pycocotools_crowd(value)
    src = _broken(tmp_path, lambda d: _second(d, iscrowd=value))
    dataset = scan(src)
    if expected is None:
        (skipped,) = dataset.skipped
        json_path = src / "annotations" / "instances_val2017.json"
        assert skipped == (
            "val2017/a.png",
            f"annotation 12: iscrowd {value!r} is not 0 or 1; "
            f"write 0 for an object, 1 for a crowd region (in {json_path})",
        )
        assert len(dataset.splits["val"]) == 2
        return
    assert not dataset.skipped
    items = {item.fields["image/id"]: item for item in dataset.splits["val"]}
    assert items[1].fields["objects/is_crowd"] == (0, expected, 0)


def test_an_annotation_id_used_twice_skips_the_image_of_the_second(tmp_path: Path):
    """pycocotools keeps one annotation of an id (the last) and evaluates it twice: both were
    packed, objects/id repeating. The image of the second is skipped, both named."""
    src = _broken(tmp_path, lambda d: d["annotations"][4].update(id=12))  # image 3's
    dataset = scan(src)
    (skipped,) = dataset.skipped
    assert skipped[0] == "val2017/turned.jpg" and skipped[1].startswith(
        "annotation 12: annotations[4] has the id of annotations[1], which pycocotools keeps "
        "one of; give each annotation its own id (in ")  # fmt: skip
    assert [i.fields["image/id"] for i in dataset.splits["val"]] == [1, 2]


def test_an_image_there_in_another_case_says_how_the_folder_names_it(tmp_path: Path):
    """A JSON naming `A.PNG` (a tool on Windows or macOS, whose disks take it for `a.png`) was
    skipped as 'listed in ... but not in val2017/', the file there to see; now the reason names
    the file as the folder spells it."""
    src = _broken(tmp_path, lambda d: d["images"][0].update(file_name="A.PNG"))
    dataset = scan(src)
    (skipped,) = dataset.skipped
    assert skipped == ("val2017/A.PNG", f"listed in {src / 'annotations/instances_val2017.json'} "
                       "but not in val2017/, which holds it as 'a.png', in another case or "
                       "Unicode form (one name to the disks of macOS and Windows): write the "
                       "JSON's file_name as the file is named")  # fmt: skip
    src = _broken(tmp_path / "b", lambda d: d["images"][0].update(file_name="b.png"))
    assert scan(src).skipped[0][1].endswith("but not in val2017/")  # no file alike: as before


def test_an_annotation_of_no_image_id_is_said_to_have_none(tmp_path: Path):
    """An annotation without image_id was warned of as naming an image the JSON does not list,
    image 'None': it has no image_id, said with the JSON, the entry and the fix."""
    src = _broken(tmp_path, lambda d: d["annotations"][1].pop("image_id"))
    (warning,) = scan(src).warnings
    assert warning == (
        f"{src / 'annotations' / 'instances_val2017.json'}: 1 annotation(s) have no image_id "
        "(the first: annotations[1]): not packed; give each the id of its image (images[].id) "
        "as image_id"
    )


def test_what_it_does_not_understand_is_said_in_one_line(tmp_path: Path, monkeypatch):
    src = _broken(tmp_path, lambda d: d["annotations"].append(
        {"id": 99, "image_id": 42, "category_id": 1, "bbox": [0, 0, 1, 1]}))  # fmt: skip
    (warning,) = scan(src).warnings
    assert warning.endswith(
        ": 1 annotation(s) name an image id the JSON does not list (the first: annotations[6] "
        "-> image 42): not packed; list their images in images[] (id, file_name, width, "
        "height), or remove them"
    )
    path = src / "annotations" / "instances_val2017.json"
    path.write_text(path.read_text()[:-40])  # cut short
    with pytest.raises(SourceError, match=r"instances_val2017\.json: line 1 column \d+: .*cut"):
        scan(src)
    path.write_text(json.dumps({"images": [{"id": 1, "file_name": "../etc/passwd",
                                            "width": 1, "height": 1}]}))  # fmt: skip
    with pytest.raises(SourceError, match=r"images\[0\]\.file_name '\.\./etc/passwd' is not"):
        scan(src)
    unfound = r"no annotations/instances_<split>\.json \(or <split>/_annotations\.coco\.json"
    with pytest.raises(ShardpackError, match=unfound):
        scan(src / "val2017", PackOptions(source="coco"))
    path.write_text("[" * 100_000 + "]" * 100_000)  # deeper than Python's parser goes
    with pytest.raises(SourceError, match=r"instances_val2017\.json: not COCO JSON"):
        scan(src)
    monkeypatch.setattr(coco_source, "MAX_JSON_BYTES", 1000)  # the cap, without writing a GiB
    with pytest.raises(SourceError, match=r"instances_val2017\.json: over 1,000 bytes"):
        scan(src)


@pytest.mark.parametrize("name", ["", "  "])
def test_a_category_of_no_name_is_said_in_one_line(tmp_path: Path, name: str):
    """TFDS reads a class list leaving out its empty lines: an empty category name was packed,
    and TFDS read one class fewer, every later class's label one off."""
    src = _broken(tmp_path, lambda d: d.update(categories=[{"id": 7, "name": name},
                                                           *CATEGORIES[1:]]))  # fmt: skip
    said = r"instances_val2017\.json: categories\[0\] \(id 7\) has no name; give each category"
    with pytest.raises(SourceError, match=said):
        scan(src)


def test_annotations_of_an_image_of_another_shape_skip_it(tmp_path: Path):
    def swap(doc):  # the JSON says 80x120 of an image 120x80
        doc["images"][0].update(width=80, height=120)

    src = _broken(tmp_path, swap)
    result = _pack(src, tmp_path / "out")
    reasons = {s["key"]: s["reason"] for s in result.to_json()["skipped_items"]}
    assert "instances_val2017.json are of a 80x120 image" in reasons["val2017/a.png"]
    assert "the image is 120x80" in reasons["val2017/a.png"]


@pytest.mark.parametrize(("width", "height"), [(121, 80), (119, 80), (121, 81), (119, 79)])
def test_a_json_size_a_pixel_off_skips_its_image(tmp_path: Path, width: int, height: int):
    """A JSON 121 wide of a 120-wide image is no resize (its aspect was within the tolerance a
    resized copy's rounding needs, so its boxes were normalised by the wrong side and packed):
    the image is skipped naming the JSON and the fix; a resized copy (twice the size) packs."""
    src = _broken(tmp_path, lambda d: d["images"][0].update(width=width, height=height))
    result = _pack(src, tmp_path / "out").to_json()
    reasons = {s["key"]: s["reason"] for s in result["skipped_items"]}
    assert reasons == {"val2017/a.png": (
        f"its annotations in annotations/instances_val2017.json are of a {width}x{height} image "
        "(as the image is stored or displayed), but the image is 120x80: fix the width and "
        "height in annotations/instances_val2017.json, or the image")}  # fmt: skip
    with pytest.raises(ShardpackError, match=r"val2017/a\.png: its annotations in "):
        _pack(src, tmp_path / "fail", on_error="fail")
    twice = _broken(tmp_path / "twice", lambda d: d["images"][0].update(width=240, height=160))
    assert not _pack(twice, tmp_path / "out2").to_json()["skipped_items"]


def test_a_json_size_far_over_the_image_s_skips_it_rather_than_draw_its_mask_so(tmp_path):
    """A mask is drawn at the JSON's size, then resized to the image: a JSON of 13000x13000 for
    a 100x100 PNG drew 169 million pixels (338 MB of a worker, 2 s) for 10,000, as a resized
    copy of the same shape. Over MAX_DRAWN_SCALE times the image's side, the image is skipped
    naming the JSON and the fix; at that scale (a copy 4 times smaller) it packs."""
    scale = masks.MAX_DRAWN_SCALE
    far = _broken(
        tmp_path / "far",
        lambda d: d["images"][0].update(width=120 * (scale + 1), height=80 * (scale + 1)),
    )
    result = _pack(far, tmp_path / "out").to_json()
    json_path = "annotations/instances_val2017.json"
    assert {s["key"]: s["reason"] for s in result["skipped_items"]} == {"val2017/a.png": (
        f"its annotations in {json_path} are of a {120 * (scale + 1)}x{80 * (scale + 1)} image, "
        f"over {scale} times the side of the image, 120x80: its mask would be drawn at that "
        f"size; fix the width and height in {json_path}, or scale its annotations to the "
        "image")}  # fmt: skip
    near = _broken(
        tmp_path / "near", lambda d: d["images"][0].update(width=120 * scale, height=80 * scale)
    )
    assert not _pack(near, tmp_path / "out2").to_json()["skipped_items"]


@pytest.mark.parametrize("encode", ["keep", "png"])
def test_boxes_of_a_turned_jpeg_annotated_as_stored_skip_it_naming_the_turn(tmp_path, encode):
    """The JSON gives the EXIF-turned JPEG its stored 90x60, not its displayed 60x90: its boxes
    were normalised by the wrong sides and landed elsewhere, kept or turned upright, where no
    mask compared the sizes. Now the record is skipped, the turn and both fixes named."""

    def as_stored(doc):
        doc["images"][2].update(width=90, height=60)
        for annotation in doc["annotations"]:
            annotation.pop("segmentation")  # boxes alone

    result = _pack(_broken(tmp_path, as_stored), tmp_path / "out", encode=encode).to_json()
    (skipped,) = result["skipped_items"]
    assert skipped["key"] == "val2017/turned.jpg"
    json_path = "annotations/instances_val2017.json"  # under SRC, as the key: not where SRC is
    assert skipped["reason"] == (
        f"its annotations in {json_path} are of a 90x60 image, but the image is 60x90 as "
        "displayed: its EXIF orientation 6 turns the 90x60 it stores a quarter. Annotations of "
        "the stored pixels: remove the orientation tag from the image; of the image as "
        f"displayed: swap the width and height in {json_path}"
    )
    assert {r["image/id"] for r in iter_examples(tmp_path / "out", split="val")} == {1, 2}


def test_each_split_finds_its_images_where_detectron2_and_tfds_keep_them(tmp_path: Path):
    def one(name: str, category: str) -> dict:
        return {"images": [{"id": 1, "file_name": name, "width": 8, "height": 6}],
                "categories": [{"id": len(category), "name": category}]}  # fmt: skip

    (tmp_path / "annotations").mkdir()
    for folder, name in (("images/train", "t.png"), ("val2017", "v.png"), ("test", "x.png")):
        (tmp_path / folder).mkdir(parents=True)
        cv2.imwrite(str(tmp_path / folder / name), _photo(6, 8))
    files = {
        "instances_train.json": one("t.png", "cat"),  # images/<split>/
        "person_keypoints_train.json": one("t.png", "person"),  # the instances win
        "person_keypoints_val.json": one("v.png", "person"),  # <split>2017/: COCO's
        "instances_test2017.json": one("x.png", "cat"),
    }  # <split without its year>/
    for name, doc in files.items():
        (tmp_path / "annotations" / name).write_text(json.dumps(doc))
    dataset = scan(tmp_path)
    keys = {split: [item.key for item in items] for split, items in dataset.splits.items()}
    assert keys == {"train": ["images/train/t.png"], "val": ["val2017/v.png"],
                    "test": ["test/x.png"]}  # fmt: skip
    assert dataset.schema["objects/label"].classes == ("cat", "person")
    # one id named otherwise in two JSONs: the message named one of them, not where the other
    # name is
    files["instances_test2017.json"]["categories"] = [{"id": 3, "name": "kitten"}]
    (tmp_path / "annotations/instances_test2017.json").write_text(
        json.dumps(files["instances_test2017.json"]))  # fmt: skip
    with pytest.raises(SourceError) as refused:
        scan(tmp_path)
    said = str(refused.value)
    assert "category 3 is named " in said and "give each id one name" in said
    assert "instances_train.json" in said and "instances_test2017.json" in said, said


def _copies(doc: dict, root: Path) -> None:
    """a.png copied twice: copy.png annotated otherwise (one box of another class), same.png as
    a.png is but for the ids (its own image and annotation ids); empty.png copied unannotated."""
    for name, source in (("copy.png", "a.png"), ("same.png", "a.png"), ("none.png", "empty.png")):
        shutil.copyfile(root / "val2017" / source, root / "val2017" / name)
    doc["images"] += [{"id": 4, "file_name": "copy.png", "width": 120, "height": 80},
                      {"id": 5, "file_name": "same.png", "width": 120, "height": 80},
                      {"id": 6, "file_name": "none.png", "width": 64, "height": 48}]  # fmt: skip
    doc["annotations"] += [{**a, "id": a["id"] + 100, "image_id": 5} for a in doc["annotations"]
                           if a["image_id"] == 1]  # fmt: skip
    doc["annotations"].append({"id": 41, "image_id": 4, "category_id": 7, "bbox": [10, 10, 50, 30],
                               "iscrowd": 0, "area": 1500.0})  # fmt: skip


def test_dedup_tells_a_copy_whose_annotations_differ_from_the_kept_one(tmp_path: Path):
    """--dedup exact skipped copy.png as a 'duplicate of' a.png with no word that its boxes
    and classes were not a.png's: its labels were lost unsaid. Now the group is a label
    conflict, warned naming both files, and the skip reason says the labels differ; a copy
    annotated alike (ids aside) is no conflict."""
    root = tmp_path / "src"
    doc = _coco(root)
    _copies(doc, root)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(doc))
    result = _pack(root, tmp_path / "out", dedup="exact").to_json()
    reasons = {s["key"]: s["reason"] for s in result["skipped_items"]}
    kept = "val/val2017/a.png"
    assert reasons == {
        "val2017/copy.png": f"duplicate of {kept}, whose labels differ: this copy's are not packed",
        "val2017/same.png": f"duplicate of {kept}",
        "val2017/none.png": "duplicate of val/val2017/empty.png",
    }
    dup = result["duplicates"]
    assert (dup["groups"], dup["label_conflicts"]) == (2, 1)
    assert dup["conflicts_listed"] == [[kept, "val/val2017/copy.png", "val/val2017/same.png"]]
    (warning,) = [w for w in result["warnings"] if w.startswith("label conflict")]
    assert f"e.g. {kept} and val/val2017/copy.png" in warning
    assert "labelled differently" in warning
    plain = _pack(root, tmp_path / "plain").to_json()["duplicates"]  # the copies the workers saw
    assert (plain["label_conflicts"], plain["conflicts_listed"]) == (1, dup["conflicts_listed"])


@pytest.mark.parametrize(("grow", "form"), [("append", "tfrecord"), ("update", "parquet")])
def test_a_grow_adds_a_new_category_at_the_end_of_the_classes(tmp_path: Path, grow, form):
    """A category added to the JSON (id 2, between person's 1 and car's 3, so that a fresh
    pack would number it 1) made --append refuse: 'it types otherwise objects/label'. As a
    folder's new class, it now gets the next number; the held records keep theirs. A Parquet
    pack so grown reads back (--source hf) with every class, as one grown by a folder does."""
    from shardpack.read.verify import verify

    root = tmp_path / "src"
    doc = _coco(root)
    _pack(root, tmp_path / "out", format=form)
    shutil.copyfile(root / "val2017" / "a.png", root / "val2017" / "new.png")
    doc["categories"] = [*doc["categories"], {"id": 2, "name": "bird"}]  # CATEGORIES kept
    doc["images"].append({"id": 9, "file_name": "new.png", "width": 120, "height": 80})
    doc["annotations"] += [
        {"id": 91, "image_id": 9, "category_id": 2, "bbox": [1, 1, 20, 20]},
        {"id": 92, "image_id": 9, "category_id": 3, "bbox": [5, 5, 9, 9]},
    ]
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(doc))
    result = _pack(root, tmp_path / "out", format=form, grow=grow).to_json()
    assert result["object_classes"]["classes"] == [*CLASSES, "bird"]
    labels = {r["image/id"]: r["objects/label"].tolist()
              for r in iter_examples(tmp_path / "out", split="val")}  # fmt: skip
    assert labels == {1: [1, 0, 2], 2: [], 3: [0, 1, 0], 9: [3, 1]}
    assert verify(tmp_path / "out").ok
    again = _pack(root, tmp_path / "out", format=form, grow="update").to_json()  # as they were
    assert again["new_records"] == 0 and again["records"] == 4, again
    # a category with no objects yet, as a folder's empty new class: was left out (3 classes
    # kept, "nothing to add") while a fresh pack lists it
    doc["categories"].append({"id": 12, "name": "fish"})
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(doc))
    empty = _pack(root, tmp_path / "out", format=form, grow=grow).to_json()
    assert empty["new_records"] == 0
    assert empty["object_classes"]["classes"] == [*CLASSES, "bird", "fish"]
    if form == "tfrecord":  # TFDS's class list too
        told = (tmp_path / "out" / "objects-label.labels.txt").read_text().split()
        assert told == [*CLASSES, "bird", "fish"]
    if form == "parquet":
        read = _pack(tmp_path / "out", tmp_path / "again", source="hf").to_json()
        assert read["object_classes"]["classes"] == [*CLASSES, "bird"]
        assert labels == {r["image/id"]: r["objects/label"].tolist()
                          for r in iter_examples(tmp_path / "again", split="val")}  # fmt: skip


def test_roboflow_s_export_is_a_coco_folder_its_json_beside_each_split_s_images(coco, tmp_path):
    root, doc = coco
    src = tmp_path / "export"  # Roboflow's COCO export: <split>/_annotations.coco.json
    for split in ("train", "valid"):
        shutil.copytree(root / "val2017", src / split)
        (src / split / "_annotations.coco.json").write_text(json.dumps(doc))
    (src / "README.roboflow.txt").write_text("exported")
    result = _pack(src, tmp_path / "out")
    assert (result.index.ignored, result.num_skipped) == (0, 0)  # the JSON is no image left out
    theirs = {r["key"]: r for r in iter_examples(_pack(root, tmp_path / "ref").out, "val")}
    for split in ("train", "valid"):
        ours = {r["key"]: r for r in iter_examples(tmp_path / "out", split)}
        assert sorted(ours) == sorted(k.replace("val2017/", f"{split}/") for k in theirs)
        for key, record in ours.items():
            same = theirs[key.replace(f"{split}/", "val2017/")]
            np.testing.assert_array_equal(record["objects/bbox"], same["objects/bbox"])
            assert record["mask"] == same["mask"]


def test_a_box_wholly_outside_its_image_is_dropped_past_every_edge(tmp_path: Path):
    """A box left of or above its image is dropped as one right of or below it is (outside
    the image), not taken for a box that is not normalised, which skipped its image; a box of
    no width inside it is dropped as of no area (it was counted as outside the image)."""

    def outside(doc):
        boxes = ([-30, 5, 10, 10], [5, -40, 10, 10], [70, 5, 10, 10], [5, 5, 0, 10])
        for n, bbox in enumerate(boxes):
            doc["annotations"].append({"id": 90 + n, "image_id": 2, "category_id": 3,
                                       "bbox": bbox})  # fmt: skip

    result = _pack(_broken(tmp_path, outside), tmp_path / "out").to_json()
    assert result["skipped_items"] == []
    assert result["boxes_dropped"] == {"outside the image": 3, "no area": 1}


def test_a_keypoint_outside_its_image_is_not_labelled_even_where_nothing_moves(tmp_path: Path):
    """A keypoint past the image's edge becomes COCO's "not labelled" (0, 0, 0) as packed, as
    it does under a transform; it was stored normalised past 1."""
    src = _broken(tmp_path, lambda d: _second(d, keypoints=[500, 25, 2, 72, 60, 1, 0, 0, 0]))
    _pack(src, tmp_path / "out")
    (record,) = [r for r in iter_examples(tmp_path / "out", split="val") if r["image/id"] == 1]
    np.testing.assert_allclose(record["objects/keypoints"][1],
                               [0, 0, 0, 72 / 120, 60 / 80, 1, 0, 0, 0])  # fmt: skip


def test_ids_past_int64_are_said_in_one_line_not_a_workers_traceback(tmp_path: Path):
    src = _broken(tmp_path, lambda d: _second(d, id=2**64))
    (skipped,) = scan(src).skipped
    assert skipped[0] == "val2017/a.png"
    assert f"annotation {2**64}: its id is not a 64-bit integer" in skipped[1]
    src = _broken(tmp_path / "image", lambda d: d["images"][0].update(id=2**63))
    with pytest.raises(SourceError, match=r"images\[0\] is not \{id, .*64-bit integers"):
        scan(src)


def test_the_pack_summary_names_the_objects_classes(coco, tmp_path: Path):
    """The images hold no label, the objects do: the summary said 'no classes: unlabeled',
    which README.md says is a source read otherwise than meant; the card and croissant.json
    as the summary."""
    from typer.testing import CliRunner

    from shardpack.cli import app

    src, _ = coco
    done = CliRunner().invoke(app, ["pack", str(src), str(tmp_path / "out"), "--workers", "1"])
    assert done.exit_code == 0, done.output
    assert "\nno image classes; 3 object classes (objects/label): person, car, dog\n" in (
        done.output)  # fmt: skip
    assert "EXIF" not in done.output  # TFRecords: every reader decodes the stored pixels
    said = "val 3 images, no image classes, 3 object classes; 0 skipped"
    assert said in (tmp_path / "out" / "README.md").read_text()  # the card said "0 classes"
    assert said in json.loads((tmp_path / "out" / "croissant.json").read_text())["description"]
    assert _pack(src, tmp_path / "again").to_json()["object_classes"] == {
        "feature": "objects/label", "num_classes": 3, "classes": CLASSES}  # fmt: skip


def test_a_parquet_pack_loads_in_datasets_and_mlcroissant_its_geometry_described(coco, tmp_path):
    """The objects as `datasets` (through the card) and mlcroissant read them; croissant.json's
    box, keypoint and mask fields said nothing of what their numbers are. `datasets` alone
    turns an EXIF-turned JPEG upright as it decodes it: --encode keep stores that one upright,
    its mask and boxes with it (kept, its mask stayed on the stored pixels)."""
    from typer.testing import CliRunner

    from shardpack.cli import app

    datasets = pytest.importorskip("datasets")
    mlc = pytest.importorskip("mlcroissant")
    out = tmp_path / "out"
    args = ["--format", "parquet", "--workers", "1", "--shards", "1", "--no-shuffle"]
    done = CliRunner().invoke(app, ["pack", str(coco[0]), str(out), *args])
    assert done.exit_code == 0, done.output
    assert (
        "\nre-encoded 1 image with an EXIF orientation upright, its objects with it: "
        "datasets shows images upright\n" in done.output
    )
    ours = {r["key"]: r for r in iter_examples(out, "val")}
    with torch_held_out():  # scipy and pydantic: imported by the tests that use it
        import albumentations as A
    _check(ours["val2017/turned.jpg"], _upright(coco[1], coco[1]["images"][2]), [A.NoOp()])
    (val,) = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache")).values()
    assert val.features["objects/label"].feature.names == CLASSES
    assert {r["key"]: r["objects/label"] for r in val} == {
        k: r["objects/label"].tolist() for k, r in ours.items()}  # fmt: skip
    turned = next(r for r in val if r["key"] == "val2017/turned.jpg")
    assert turned["image"].size == Image.open(io.BytesIO(turned["mask"])).size == (60, 90)
    assert (turned["width"], turned["height"]) == (60, 90)  # upright, as datasets shows it
    read = list(mlc.Dataset(str(out / "croissant.json")).records("val"))
    assert {r["val/key"].decode(): np.asarray(r["val/objects/bbox"]).tolist() for r in read} == {
        k: r["objects/bbox"].tolist() for k, r in ours.items()}  # fmt: skip
    for record in read:  # the mask a PNG (sc:ImageObject), not text: its pixels, the ids
        want = np.asarray(Image.open(io.BytesIO(ours[record["val/key"].decode()]["mask"])))
        assert np.array_equal(np.asarray(record["val/mask"]), want)
    fields = json.loads((out / "croissant.json").read_text())["recordSet"][0]["field"]
    said = {f["name"]: f.get("description", "") for f in fields}
    assert "[ymin, xmin, ymax, xmax], normalised" in said["objects/bbox"]
    assert "(x, y, visibility) triples" in said["objects/keypoints"]
    assert "instance ids" in said["mask"]


def test_a_src_inside_a_coco_folder_is_told_to_pass_the_folder(coco):
    """The JSON itself, or a split's image folder, as SRC: the error named class folders alone."""
    src, _ = coco
    for inside in ("annotations/instances_val2017.json", "val2017"):
        with pytest.raises(SourceError) as caught:
            scan(src / inside)
        file = "is a file, not a folder; " if inside.endswith(".json") else ""
        assert str(caught.value) == (  # only that: no advice of class folders, not its way
            f"{src / inside}: {file}it lies inside a COCO folder (annotations/instances_"
            f"<split>.json beside the images), {src}: pass that"
        )


def test_a_src_beside_a_coco_folder_s_parts_is_not_told_to_pass_it(coco, tmp_path: Path):
    """A folder of images beside annotations/ and the split folders is a dataset of its own."""
    src, _ = coco
    root = tmp_path / "data"
    (root / "annotations").mkdir(parents=True)
    (root / "annotations/instances_val2017.json").write_bytes(
        (src / "annotations/instances_val2017.json").read_bytes()
    )
    for folder in ("val2017", "other"):
        (root / folder).mkdir()
        (root / folder / "x.jpg").write_bytes(next((src / "val2017").iterdir()).read_bytes())
    with pytest.raises(SourceError, match=f"it lies inside a COCO folder .*, {root}: pass that$"):
        scan(root / "val2017")
    with pytest.raises(SourceError) as caught:
        scan(root / "other")
    assert "COCO" not in str(caught.value)


def test_inspect_shows_a_mask_as_its_size_not_its_bytes_as_text(coco, tmp_path: Path):
    from shardpack.read.describe import describe

    _pack(coco[0], tmp_path / "out")
    (sample,) = describe(tmp_path / "out", num_records=1)["splits"]["val"]["samples"]
    assert re.fullmatch(r"<[\d,]+ bytes>", sample["mask"]), sample["mask"][:20]
