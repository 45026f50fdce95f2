"""Boxes follow the pixels (packing/boxes.py, images.Geometry): a manifest's boxes packed with a
geometric transform are moved with the same arithmetic as the pixels, clipped, and dropped
(counted by reason) when nothing of them is left; what cannot be moved is refused.

The images are real JPEGs and PNGs holding one coloured object at a known place; the packed
boxes are checked against albumentations (an independent oracle) and against the object's own
pixels in the packed image.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps
from typer.testing import CliRunner

from shardpack import images
from shardpack.cli import app
from shardpack.errors import ShardpackError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from tests.helpers import torch_held_out, write_jsonl

# The issue's photo: 400x200, a red object at x 300-380 (which a centre crop to a square cuts
# away), a green one in the middle, a blue one reaching past the top edge (its box too).
WIDTH, HEIGHT = 400, 200
OBJECT = (50, 300, 150, 380)  # ymin, xmin, ymax, xmax in pixels
COLOURS = {"red": (0, 0, 255), "green": (0, 255, 0), "blue": (255, 0, 0)}  # BGR
OBJECTS = {"red": OBJECT, "green": (60, 150, 140, 250), "blue": (0, 40, 30, 120)}
BOXES = {**OBJECTS, "blue": (-20, 40, 30, 120)}  # its box as annotated: past the edge
# --resize 160x120: not square, so width and height cannot be swapped unseen.
TARGET = (160, 120)


def _photo(height: int = HEIGHT, width: int = WIDTH, objects: dict | None = None) -> np.ndarray:
    """A grey image with a rectangle of each colour over its pixels [ymin, xmin, ymax, xmax)."""
    pixels = np.full((height, width, 3), 128, np.uint8)
    for colour, (ymin, xmin, ymax, xmax) in (OBJECTS if objects is None else objects).items():
        pixels[max(ymin, 0) : ymax, xmin:xmax] = COLOURS[colour]
    return pixels


def _normalised(box: tuple, height: int = HEIGHT, width: int = WIDTH) -> list[float]:
    ymin, xmin, ymax, xmax = box
    return [ymin / height, xmin / width, ymax / height, xmax / width]


def _manifest(folder: Path, rows: list[tuple[str, bytes, dict]]) -> Path:
    """A JSONL manifest of (file name, encoded image, other columns) rows."""
    folder.mkdir(exist_ok=True)
    for name, data, _ in rows:
        (folder / name).write_bytes(data)
    return write_jsonl(folder / "objects.jsonl", [{"path": n, **c} for n, _, c in rows])


def _png(pixels: np.ndarray) -> bytes:
    return cv2.imencode(".png", pixels)[1].tobytes()


def _pack(src: Path, out: Path, **options):
    return pack(src, out, PackOptions(workers=1, shards=1, shuffle=False, **options))


def _columns(height: int = HEIGHT, width: int = WIDTH, boxes: dict | None = None) -> dict:
    """The manifest's columns of a photo: its boxes, and their colours (a text list, which the
    test reads as the object's name; as long as the boxes, so kept whole: no box dropped)."""
    boxes = BOXES if boxes is None else boxes
    return {"boxes": [_normalised(b, height, width) for b in boxes.values()]}


def _oracle(
    upright: np.ndarray, boxes: dict, mode: str, min_visibility: float = 0.0, **options
) -> tuple[list, tuple]:
    """albumentations' boxes (named by colour) and image size for the transform, its sizes
    taken from Pillow's ImageOps.cover and contain (img2dataset's meanings), not from us.
    Boxes of no visible area are dropped (min_area above 0: albumentations keeps zero-area
    boxes at its default), and those under its min_visibility."""
    with torch_held_out():  # scipy and pydantic: imported by the tests that use it
        import albumentations as A

    height, width = upright.shape[:2]
    steps = oracle_steps(height, width, mode, **options)
    rows = [[b[1] / width, b[0] / height, b[3] / width, b[2] / height] for b in boxes.values()]
    params = A.BboxParams(format="albumentations", label_fields=["names"], clip=True,
                          min_area=1e-3, min_visibility=min_visibility)  # fmt: skip
    done = A.Compose(steps, bbox_params=params)(image=upright, bboxes=rows, names=list(boxes))
    size = done["image"].shape[:2]
    return list(zip(done["names"], np.asarray(done["bboxes"]).tolist(), strict=True)), size


def oracle_steps(height: int, width: int, mode: str, target: tuple = TARGET, **options) -> list:
    """albumentations' steps for the transform of an upright image of this size, its sizes
    taken from Pillow (oracle_sizes), not from us."""
    with torch_held_out():  # scipy and pydantic: imported by the tests that use it
        import albumentations as A

    if "max_side" in options:
        longest = options["max_side"]  # a shrink only
        return [A.LongestMaxSize(max_size=longest)] if max(height, width) > longest else [A.NoOp()]
    size, (w, h) = oracle_sizes(height, width, mode, target, **options)
    steps = [A.Resize(size[1], size[0])]
    if mode == "center-crop":
        steps.append(A.CenterCrop(min(h, size[1]), min(w, size[0])))
    if mode == "pad":
        steps.append(A.PadIfNeeded(h, w, position="center", border_mode=cv2.BORDER_CONSTANT))
    return steps


def oracle_sizes(
    height: int, width: int, mode: str, target: tuple = TARGET, **options
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(width, height) an upright image of this size is resized to, and the (width, height)
    that center-crop cuts its middle to or pad centres it on (target; for other modes the
    resized size), taken from Pillow's ImageOps.cover and contain (img2dataset's meanings) and
    ImageOps.contain for --max-side (a shrink only), not from us."""
    im = Image.new("RGB", (width, height))
    if "max_side" in options:
        longest = options["max_side"]
        size = ImageOps.contain(im, (longest, longest)).size if max(height, width) > longest else (
            width, height)  # fmt: skip
        return size, size
    sizes = {"stretch": target, "cover": ImageOps.cover(im, target).size,
             "contain": ImageOps.contain(im, target).size}  # fmt: skip
    if not options.get("upscale", True):  # no image enlarged
        sizes = {k: (min(w, width), min(h, height)) for k, (w, h) in sizes.items()}
    size = sizes[{"keep-ratio": "cover", "center-crop": "cover", "keep-ratio-largest": "contain",
                  "pad": "contain"}.get(mode, mode)]  # fmt: skip
    canvas = {"center-crop": (min(target[0], size[0]), min(target[1], size[1])),
              "pad": target}.get(mode, size)  # fmt: skip
    return size, canvas


def _check(record: dict, expected: list, size: tuple) -> None:
    """The packed boxes are the oracle's within one pixel, and each object's own pixels in the
    packed image lie inside its packed box (within one pixel), none of them left out."""
    pixels = record["image"][..., ::-1]  # RGB as decoded: back to BGR like COLOURS
    height, width = pixels.shape[:2]
    assert abs(height - size[0]) <= 1 and abs(width - size[1]) <= 1
    got = np.asarray(record["boxes"]).reshape(-1, 4) * [height, width, height, width]
    assert len(got) == len(expected), (got, expected)
    for box, (colour, (x0, y0, x1, y1)) in zip(got, expected, strict=True):
        oracle = np.array([y0 * size[0], x0 * size[1], y1 * size[0], x1 * size[1]])
        np.testing.assert_allclose(box, oracle, atol=1.0, err_msg=colour)
        mask = np.all(np.abs(pixels.astype(int) - COLOURS[colour]) < 60, axis=-1)
        ys, xs = np.nonzero(mask)
        assert len(ys) > 20, colour  # the object is there to be found
        assert ys.min() >= box[0] - 1 and xs.min() >= box[1] - 1, colour
        assert ys.max() + 1 <= box[2] + 1 and xs.max() + 1 <= box[3] + 1, colour


MODES = ["stretch", "center-crop", "pad", "keep-ratio", "keep-ratio-largest"]
CASES = [
    *({"resize": TARGET, "resize_mode": mode} for mode in MODES),
    {"resize": TARGET, "resize_mode": "pad", "upscale": False},  # the small photo kept small
    {"resize": TARGET, "resize_mode": "center-crop", "upscale": False},
    {"max_side": 150},
]
SMALL = {"red": (10, 70, 40, 95), "green": (20, 10, 50, 40)}  # in a 60x100 photo
# In a 260x420 portrait: red at the bottom (cut by a centre crop to landscape), blue past the top.
TALL = {"red": (350, 180, 410, 250), "green": (150, 80, 250, 180), "blue": (0, 20, 40, 100)}
TALL_BOXES = {**TALL, "blue": (-20, 20, 40, 100)}


@pytest.mark.parametrize("options", CASES, ids=lambda o: "-".join(map(str, o.values())))
def test_boxes_follow_the_pixels_in_every_mode(tmp_path: Path, options: dict):
    photos = {"wide.png": _photo(), "tall.png": _photo(420, 260, TALL),
              "small.png": _photo(60, 100, SMALL)}  # fmt: skip
    annotated = {"wide.png": BOXES, "tall.png": TALL_BOXES, "small.png": SMALL}
    rows = [(name, _png(pixels), {"boxes": [_normalised(b, *pixels.shape[:2])
                                            for b in annotated[name].values()]})
            for name, pixels in photos.items()]  # fmt: skip
    src = _manifest(tmp_path / "src", rows)
    result = _pack(src, tmp_path / "out", encode="png", **options)
    records = {r["key"]: r for r in iter_examples(tmp_path / "out", decode=True)}
    cropped = 0
    for name, pixels in photos.items():
        mode = options.get("resize_mode", "stretch")
        expected, size = _oracle(pixels, annotated[name], mode, **options)
        _check(records[name], expected, size)
        cropped += len(annotated[name]) - len(expected)
    assert result.to_json()["boxes_dropped"] == ({"cropped away": cropped} if cropped else {})


def test_the_issues_center_crop_drops_the_box_it_cuts_away_and_counts_it(tmp_path: Path):
    src = _manifest(tmp_path / "src", [("a.png", _png(_photo()), _columns())])
    result = _pack(src, tmp_path / "out", encode="png", resize=(200, 200),
                   resize_mode="center-crop")  # fmt: skip
    (record,) = iter_examples(tmp_path / "out", decode=True)
    # scaled to 400x200 as it is, x 100-300 kept: red (x 300-380) is gone, green moved left
    green, blue = [60, 50, 140, 150], [0, 0, 30, 20]  # blue clipped at the top and the left
    np.testing.assert_allclose(record["boxes"], np.array([green, blue]) / 200, atol=1e-6)
    summary = result.to_json()
    assert summary["boxes_dropped"] == {"cropped away": 1}
    assert summary["records"] == 1 and summary["skipped"] == 0


def test_a_box_that_ends_where_the_crop_begins_is_dropped_not_kept_as_a_sliver(tmp_path: Path):
    """A centre crop of the 120x80 photo to 16x64 keeps x 50-70: red (x 10-50) ends where it
    begins and green (x 70-110) begins where it ends, neither with a pixel left. Their rows,
    float32 in the manifest (50/120 is not one), came back as boxes 1e-7 wide: an object
    where the image shows none."""
    objects = {"red": (20, 10, 60, 50), "green": (10, 70, 70, 110), "blue": (30, 55, 50, 65)}
    photo = _photo(80, 120, objects)
    rows = [("a.png", _png(photo), _columns(80, 120, objects))]
    result = _pack(_manifest(tmp_path / "src", rows), tmp_path / "out", encode="png",
                   resize=(16, 64), resize_mode="center-crop")  # fmt: skip
    (record,) = iter_examples(tmp_path / "out", decode=True)
    expected, size = _oracle(photo, objects, "center-crop", resize=(16, 64), target=(16, 64))
    assert [name for name, _ in expected] == ["blue"]
    _check(record, expected, size)
    assert result.to_json()["boxes_dropped"] == {"cropped away": 2}


def test_a_keypoint_on_the_crops_edge_stays_in_one_past_it_goes(tmp_path: Path):
    """The same crop keeps columns 50-69 of the 120x80 photo: a keypoint at x 50 is its first
    column and one at x 70 is past its last. As float32 rows (50/120 lands below it) the first
    was dropped as outside, the second kept at 0.9999999: the boxes' rounding rule is theirs."""
    points = [[50 / 120, 0.5, 2], [70 / 120, 0.5, 2], [60 / 120, 0.25, 1]]
    rows = [("a.png", _png(_photo(80, 120, {})), {"keypoints": points})]
    _pack(_manifest(tmp_path / "src", rows), tmp_path / "out", encode="png", resize=(16, 64),
          resize_mode="center-crop")  # fmt: skip
    (record,) = iter_examples(tmp_path / "out")
    np.testing.assert_allclose(record["keypoints"], [[0, 0.5, 2], [0, 0, 0], [0.5, 0.25, 1]])


@pytest.mark.parametrize("share", [0.3, 0.7])
def test_min_visibility_drops_what_albumentations_drops(tmp_path: Path, share: float):
    """A centre crop to a square keeps x 100-300 of the 400x200 photo: red (x 250-330) keeps
    0.625 of its area, blue (x 40-120) 0.25; --min-visibility drops those under it, as
    albumentations' min_visibility does, and counts them."""
    objects = {"red": (50, 250, 150, 330), "green": (60, 150, 140, 240), "blue": (0, 40, 30, 120)}
    photo = _photo(objects=objects)
    src = _manifest(tmp_path / "src", [("a.png", _png(photo), _columns(boxes=objects))])
    result = _pack(src, tmp_path / "out", encode="png", resize=(200, 200),
                   resize_mode="center-crop", min_visibility=share)  # fmt: skip
    (record,) = iter_examples(tmp_path / "out", decode=True)
    expected, size = _oracle(photo, objects, "center-crop", share, resize=(200, 200),
                             target=(200, 200))  # fmt: skip
    _check(record, expected, size)
    hidden = {0.3: ["blue"], 0.7: ["red", "blue"]}[share]
    assert sorted(set(objects) - {name for name, _ in expected}) == sorted(hidden)
    assert result.to_json()["boxes_dropped"] == {"mostly cropped away": len(hidden)}


def test_an_exif_rotated_jpeg_reencoded_keeps_its_boxes_on_the_displayed_object(tmp_path: Path):
    upright = _photo(420, 260, TALL)  # as displayed; stored turned a quarter, orientation 6
    stored = Image.fromarray(np.ascontiguousarray(np.rot90(upright[..., ::-1], 1)))
    exif = Image.Exif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    stored.save(buffer, "JPEG", quality=95, exif=exif)
    src = _manifest(tmp_path / "src", [("turned.jpg", buffer.getvalue(),
                                        _columns(420, 260, TALL_BOXES))])  # fmt: skip
    for mode in MODES:
        out = tmp_path / mode
        _pack(src, out, encode="jpeg", quality=95, resize=TARGET, resize_mode=mode)
        (record,) = iter_examples(out, decode=True)
        shown = cv2.imdecode(np.frombuffer(buffer.getvalue(), np.uint8), cv2.IMREAD_COLOR)
        assert shown.shape == upright.shape  # OpenCV applies the orientation, as pack does
        _check(record, *_oracle(shown, TALL_BOXES, mode))


def test_a_transform_that_would_leave_geometry_behind_is_refused(tmp_path: Path):
    src = _manifest(tmp_path / "src", [("a.png", _png(_photo()), {
        **_columns(), "keypoints": [[0.5, 0.8]]})])  # fmt: skip
    with pytest.raises(ShardpackError, match=r"resize=\(200, 200\) resize_mode='center-crop' "
                                             r".*'keypoints'"):  # fmt: skip
        _pack(src, tmp_path / "out", resize=(200, 200), resize_mode="center-crop")
    assert not (tmp_path / "out" / "index.json").exists()
    _pack(src, tmp_path / "kept")  # no transform: nothing to move, nothing refused
    (record,) = iter_examples(tmp_path / "kept")
    np.testing.assert_allclose(record["keypoints"], [[0.5, 0.8]])
    np.testing.assert_allclose(record["boxes"], np.clip(_columns()["boxes"], 0, 1), atol=1e-6)


def test_without_a_transform_boxes_are_clipped_to_the_image_and_verify_passes(tmp_path: Path):
    """Nothing moves the image, and still a box reaching past its edge is stored as what it
    covers of it, one wholly outside is dropped and counted, and rows that are no normalised
    box skip their record: what verify (and TFDS's BBoxFeature) would refuse is never packed."""
    from shardpack.read.verify import verify

    past, outside, inside = [-0.2, 0.5, 0.4, 1.3], [1.1, 0.0, 1.4, 0.5], [0.1, 0.1, 0.6, 0.6]
    rows = [("a.png", _png(_photo()), {"objects/bbox": [past, outside, inside],
                                       "objects/label": [1, 2, 3]}),
            ("b.png", _png(_photo()), {"objects/bbox": [[30.0, 5.0, 80.0, 60.0]],
                                       "objects/label": [1]})]  # fmt: skip
    src = _manifest(tmp_path / "src", rows)
    result = _pack(src, tmp_path / "out")
    (record,) = iter_examples(tmp_path / "out")
    np.testing.assert_allclose(record["objects/bbox"], [[0, 0.5, 0.4, 1], inside], atol=1e-6)
    assert record["objects/label"].tolist() == [1, 3]
    summary = result.to_json()
    assert summary["boxes_dropped"] == {"outside the image": 1}
    (skipped,) = summary["skipped_items"]
    assert skipped["key"] == "b.png" and "is not a normalised" in skipped["reason"]
    assert verify(tmp_path / "out").ok


def test_a_dropped_box_takes_its_objects_row_with_it(tmp_path: Path):
    columns = {"objects/bbox": _columns()["boxes"], "objects/colour": list(BOXES)}
    rows = [("a.png", _png(_photo()), {**columns, "tags": [1, 2, 3]})]
    src = _manifest(tmp_path / "src", rows)
    _pack(src, tmp_path / "out", resize=(200, 200), resize_mode="center-crop")
    (record,) = iter_examples(tmp_path / "out")
    assert record["objects/colour"] == ["green", "blue"]  # red was cut away with its box
    assert len(record["objects/bbox"]) == 2 and record["tags"].tolist() == [1, 2, 3]


def test_a_box_dropped_beside_a_list_as_long_is_a_skip_not_a_misalignment(tmp_path: Path):
    rows = [("a.png", _png(_photo()), {**_columns(), "colours": list(BOXES)}),
            ("b.png", _png(_photo(objects={})), {"boxes": [[0.1, 0.4, 0.9, 0.6]],
                                                 "colours": ["none"]})]  # fmt: skip
    src = _manifest(tmp_path / "src", rows)
    result = _pack(src, tmp_path / "out", resize=(200, 200), resize_mode="center-crop")
    (record,) = iter_examples(tmp_path / "out")  # b.png lost no box: kept
    assert record["key"] == "b.png" and record["colours"] == ["none"]
    (skipped,) = result.to_json()["skipped_items"]
    assert skipped["key"] == "a.png" and "'colours' holds 3 rows too" in skipped["reason"]


@pytest.mark.parametrize("resize", [None, (200, 200)])
def test_an_objects_list_of_another_length_than_its_boxes_is_a_skip_verify_never_sees(
    tmp_path: Path, resize: tuple | None
):
    """objects/label of 2 rows beside 1 box was packed as it was (its rows were counted only
    when a box was dropped): verify then called the shard damaged, to be packed again."""
    from shardpack.read.verify import verify

    inside = [0.1, 0.1, 0.6, 0.6]
    rows = [("a.png", _png(_photo()), {"objects/bbox": [inside], "objects/label": [1, 2]}),
            ("b.png", _png(_photo()), {"objects/bbox": [inside], "objects/label": [1],
                                       "objects/points": [[0.2, 0.2, 2]] * 2}),
            ("c.png", _png(_photo()), {"objects/bbox": [inside, inside], "objects/label": [1, 3],
                                       "objects/points": [[0.2, 0.2, 2]] * 2})]  # fmt: skip
    src = _manifest(tmp_path / "src", rows)
    result = _pack(src, tmp_path / "out", **({"resize": resize} if resize else {}))
    (record,) = iter_examples(tmp_path / "out")
    assert record["key"] == "c.png" and record["objects/label"].tolist() == [1, 3]
    reasons = {s["key"]: s["reason"] for s in result.to_json()["skipped_items"]}
    assert reasons == {
        "a.png": "'objects/label' holds 2 rows beside 1 boxes in 'objects/bbox': which is whose "
        "box cannot be told; give each box one row of each list of its group",
        "b.png": "'objects/points' holds 2 rows beside 1 boxes in 'objects/bbox': which is whose "
        "box cannot be told; give each box one row of each list of its group",
    }
    assert verify(tmp_path / "out").ok


# Each EXIF orientation: Pillow's transpose that makes the stored image from the displayed one
# (the inverse of ImageOps.exif_transpose's), and the albumentations steps that do the same.
T = Image.Transpose
STORED = {
    2: (T.FLIP_LEFT_RIGHT, ["HorizontalFlip"]),
    3: (T.ROTATE_180, ["HorizontalFlip", "VerticalFlip"]),
    4: (T.FLIP_TOP_BOTTOM, ["VerticalFlip"]),
    5: (T.TRANSPOSE, ["Transpose"]),
    6: (T.ROTATE_90, ["Transpose", "VerticalFlip"]),
    7: (T.TRANSVERSE, ["Transpose", "HorizontalFlip", "VerticalFlip"]),
    8: (T.ROTATE_270, ["Transpose", "HorizontalFlip"]),
}


@pytest.mark.parametrize(
    ("fmt", "orientation"),
    [*(("JPEG", o) for o in sorted(STORED)), ("PNG", 5), ("PNG", 6)],
)  # fmt: skip
def test_a_rotated_image_kept_as_it_is_gets_its_boxes_on_the_stored_pixels(
    tmp_path: Path, fmt: str, orientation: int
):
    """A PNG's eXIf orientation too: OpenCV applies it, TensorFlow does not; the boxes of a
    kept PNG stayed where the image as displayed has its objects."""
    with torch_held_out():  # scipy and pydantic: imported by the tests that use it
        import albumentations as A

    upright = _photo(420, 260, TALL)
    turn, names = STORED[orientation]
    steps = [getattr(A, name)(p=1) for name in names]
    stored = Image.fromarray(upright[..., ::-1]).transpose(turn)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    stored.save(buffer, fmt, quality=95, exif=exif)
    shown = ImageOps.exif_transpose(Image.open(io.BytesIO(buffer.getvalue())))
    assert shown.size == (260, 420)  # the test's own turn is right: Pillow shows it upright
    name = f"a.{fmt.lower()}"
    src = _manifest(tmp_path / "src", [(name, buffer.getvalue(), _columns(420, 260, TALL))])
    _pack(src, tmp_path / "out")  # --encode keep: the bytes as they are
    (record,) = iter_examples(tmp_path / "out", decode=True)  # as TensorFlow: not turned
    rows = [[b[1] / 260, b[0] / 420, b[3] / 260, b[2] / 420] for b in TALL.values()]
    params = A.BboxParams(format="albumentations", label_fields=["names"])
    done = A.Compose(steps, bbox_params=params)(image=upright, bboxes=rows, names=list(TALL))
    assert (done["image"][..., ::-1] == np.asarray(stored)).all()  # the oracle turns alike
    expected = list(zip(done["names"], np.asarray(done["bboxes"]).tolist(), strict=True))
    _check(record, expected, done["image"].shape[:2])


@pytest.mark.parametrize("orientation", [6, 8])  # the quarter turns: each undoes the other
def test_our_own_shards_repacked_keep_their_boxes_on_the_pixels(tmp_path: Path, orientation):
    """A pack's boxes describe its records as readers decode them (unturned): a repack that
    keeps the bytes moves them not at all, one that re-encodes (turning them upright) with
    them."""
    upright = _photo(420, 260, TALL)
    turn, _ = STORED[orientation]
    buffer = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(upright[..., ::-1]).transpose(turn).save(buffer, "JPEG", quality=95,
                                                             exif=exif)  # fmt: skip
    src = _manifest(tmp_path / "src", [("a.jpg", buffer.getvalue(), _columns(420, 260, TALL))])
    _pack(src, tmp_path / "first")
    (first,) = iter_examples(tmp_path / "first")
    _pack(tmp_path / "first", tmp_path / "kept")
    (kept,) = iter_examples(tmp_path / "kept")
    np.testing.assert_array_equal(kept["boxes"], first["boxes"])
    _pack(tmp_path / "first", tmp_path / "cropped", encode="png", resize=TARGET,
          resize_mode="center-crop")  # fmt: skip
    (cropped,) = iter_examples(tmp_path / "cropped", decode=True)
    _check(cropped, *_oracle(upright, TALL, "center-crop"))


def test_the_cli_says_what_it_dropped_and_refuses_in_one_line(tmp_path: Path):
    src = _manifest(tmp_path / "src", [("a.png", _png(_photo()), _columns())])
    args = ["pack", str(src), "--workers", "1", "--resize", "200x200", "--resize-mode",
            "center-crop"]  # fmt: skip
    done = CliRunner().invoke(app, [*args[:2], str(tmp_path / "out"), *args[2:]])
    assert done.exit_code == 0, done.output
    assert "\nboxes dropped: cropped away 1\n" in done.output  # as docs/sources.md shows it
    some = CliRunner().invoke(app, [*args[:2], str(tmp_path / "some"), *args[2:],
                                    "--min-visibility", "0.99"])  # fmt: skip
    assert "\nboxes dropped: cropped away 1, mostly cropped away 1\n" in some.output
    inspected = CliRunner().invoke(app, ["inspect", str(tmp_path / "out")])
    assert "\n  boxes dropped: cropped away 1\n" in inspected.output  # as pack says it
    assert "\n  boxes dropped, cropped away: a.png 1\n" in inspected.output  # which record
    write_jsonl(src, [{"path": "a.png", **_columns(), "keypoints": [[0.5, 0.8]]}])
    refused = CliRunner().invoke(app, [*args[:2], str(tmp_path / "again"), *args[2:]])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    (line,) = refused.output.strip().splitlines()
    assert "feature 'keypoints'" in line and "--resize 200x200" in line
    # --min-visibility on records holding no boxes did nothing, and said nothing
    write_jsonl(src, [{"path": "a.png", "caption": "a photo"}])
    boxless = CliRunner().invoke(app, [*args[:2], str(tmp_path / "boxless"), *args[2:],
                                       "--min-visibility", "0.5"])  # fmt: skip
    assert boxless.exit_code == 2 and "Traceback" not in boxless.output
    (line,) = boxless.output.strip().splitlines()
    assert line == (
        f"error: {src}: --min-visibility 0.5 drops boxes a crop leaves mostly cut away, and "
        "its records hold none (float32 rows of 4 named bbox, boxes, bboxes or objects/bbox, "
        "or declared with --box-columns); drop --min-visibility"
    )
    assert not (tmp_path / "boxless" / "index.json").exists()


def test_the_records_that_lost_boxes_are_named_the_first_of_each_reason_by_key(tmp_path: Path):
    """'37 boxes dropped' named no record: a user could not find them. Each split's summary
    names, of each reason, the first 20 records by key with the boxes each lost (the counts
    count them all): alike in one shard or three, kept by an append (which names a new record
    among them), and an index from before, which names none, reads as it did."""
    tiny, outside, inside = _png(_photo(8, 16, {})), [1.1, 0.0, 1.4, 0.5], [0.1, 0.1, 0.6, 0.6]
    rows = [(f"{i:02d}.png", tiny, {"boxes": [outside] * (1 + i % 2) + [inside]})
            for i in range(25)]  # fmt: skip
    src = _manifest(tmp_path / "src", rows)
    named = {f"{i:02d}.png": 1 + i % 2 for i in range(20)}
    for shards in (1, 3):
        pack(src, tmp_path / f"out{shards}", PackOptions(workers=1, shards=shards, seed=3))
        summary = json.loads((tmp_path / f"out{shards}" / "index.json").read_text())
        assert summary["summaries"]["train"]["boxes_dropped"] == {"outside the image": 37}
        assert summary["summaries"]["train"]["boxes_dropped_in"] == {"outside the image": named}
    out = tmp_path / "out3"
    (tmp_path / "src" / "00a.png").write_bytes(tiny)  # between 00.png and 01.png by key
    write_jsonl(src, [{"path": n, **c} for n, _, c in rows]
                + [{"path": "00a.png", "boxes": [outside] * 3}])  # fmt: skip
    pack(src, out, PackOptions(grow="append", workers=1))
    index = json.loads((out / "index.json").read_text())
    listed = index["summaries"]["train"]["boxes_dropped_in"]["outside the image"]
    assert list(listed.items())[:3] == [("00.png", 1), ("00a.png", 3), ("01.png", 2)]
    assert len(listed) == 20 and "19.png" not in listed
    said = CliRunner().invoke(app, ["inspect", str(out)]).output
    assert ("\n  boxes dropped, outside the image: 00.png 1, 00a.png 3, 01.png 2, 02.png 1, "
            in said and ", 18.png 1 (the first 20 records by key)\n" in said)  # fmt: skip
    del index["summaries"]["train"]["boxes_dropped_in"]  # as an index from before
    (out / "index.json").write_text(json.dumps(index))
    said = CliRunner().invoke(app, ["inspect", str(out)]).output
    assert "\n  boxes dropped: outside the image 40\n" in said and "00a.png 3" not in said


@pytest.mark.parametrize("mode", MODES)
def test_boxes_follow_a_reduced_jpeg_decode(tmp_path: Path, mode: str):
    """A JPEG large enough for libjpeg's 1/4 decode, of odd size (its scaled size rounds)."""
    scale = 4
    big = {c: tuple(v * scale for v in b) for c, b in OBJECTS.items()}
    pixels = _photo(HEIGHT * scale + 3, WIDTH * scale + 1, big)
    height, width = pixels.shape[:2]
    options = {"resize": TARGET, "resize_mode": mode}
    where = images.geometry(height, width, None, TARGET, mode)
    assert images.reduce_factor(height, width, where.scaled) >= 2  # the case is the one meant
    data = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    src = _manifest(tmp_path / "src", [("big.jpg", data, _columns(height, width, big))])
    _pack(src, tmp_path / "out", encode="png", **options)
    (record,) = iter_examples(tmp_path / "out", decode=True)
    _check(record, *_oracle(pixels, big, mode, **options))


def test_boxes_that_are_not_normalised_yxyx_are_not_moved_as_if_they_were(tmp_path: Path):
    coco = [[300.0, 50.0, 80.0, 100.0]]  # COCO's pixel [x, y, width, height] of the red object
    flipped = [[0.5, 0.8, 0.25, 0.9]]  # [ymin, xmin, ymax, xmax] with ymin over ymax
    rows = [("a.png", _png(_photo()), {"bbox": coco}), ("b.png", _png(_photo()), {"bbox": flipped}),
            ("c.png", _png(_photo()), {"bbox": [_normalised(OBJECT)]})]  # fmt: skip
    src = _manifest(tmp_path / "src", rows)
    result = _pack(src, tmp_path / "out", resize=TARGET, resize_mode="pad")
    reasons = {s["key"]: s["reason"] for s in result.to_json()["skipped_items"]}
    assert "'bbox' row 0 [300.0, 50.0, 80.0, 100.0] is not a normalised" in reasons["a.png"]
    assert "'bbox' row 0 [0.5, 0.8, 0.25, 0.9] is not a normalised" in reasons["b.png"]
    # pixels were told to name another order (--box-columns bbox:xyxy), which changes nothing
    assert reasons["a.png"].endswith("box of the image: its numbers reach past the image as a "
                                     "box in pixels does: divide them by the image's height and "
                                     "width (boxes in pixels are not read)")  # fmt: skip
    assert reasons["b.png"].endswith("or name its order with --box-columns bbox:xyxy (or xywh, "
                                     "cxcywh)")  # fmt: skip
    (kept,) = iter_examples(tmp_path / "out")
    assert kept["key"] == "c.png"
    with pytest.raises(ShardpackError, match=r"a\.png: 'bbox' row 0"):
        _pack(src, tmp_path / "fail", resize=TARGET, on_error="fail")


def test_an_append_moves_the_new_records_boxes_as_the_first_pack_did(tmp_path: Path):
    src = _manifest(tmp_path / "src", [("a.png", _png(_photo()), _columns())])
    out = tmp_path / "out"
    _pack(src, out, encode="png", resize=TARGET, resize_mode="center-crop")
    tall = _photo(420, 260, TALL)
    (tmp_path / "src" / "b.png").write_bytes(_png(tall))
    write_jsonl(src, [{"path": "a.png", **_columns()},
                      {"path": "b.png", **_columns(420, 260, TALL_BOXES)}])  # fmt: skip
    result = pack(src, out, PackOptions(grow="append", workers=1))  # the dataset's options
    records = {r["key"]: r for r in iter_examples(out, decode=True)}
    _check(records["b.png"], *_oracle(tall, TALL_BOXES, "center-crop"))
    assert result.to_json()["boxes_dropped"] == {"cropped away": 2}  # b.png's red and blue
