"""Masks (packing/masks.py, images.fill_polygon, Turn.move_pixels, sources/shapes.py): outlines
drawn as pycocotools draws them, COCO's compressed RLE read as pycocotools writes it, maps
turned as Pillow turns pixels, renumbered after dropped objects, 16-bit past 255 objects."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image

from shardpack import images
from shardpack.errors import ImageError, SourceError
from shardpack.packing import masks
from shardpack.sources import shapes
from tests.packing.test_boxes import STORED


def _ids(png: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED)


def test_polygons_are_drawn_as_pycocotools_draws_them():
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(0)
    for _ in range(20):  # star-shaped polygons of 3-12 points at float coordinates
        n = int(rng.integers(3, 13))
        angles = np.sort(rng.uniform(0, 2 * np.pi, n))
        radius = rng.uniform(3, 25, n)
        centre = rng.uniform(5, 55, 2)
        polygon = np.column_stack([centre[0] + radius * np.cos(angles),
                                   centre[1] + radius * np.sin(angles)])  # fmt: skip
        ours = np.zeros((50, 60), np.uint8)
        images.fill_polygon(ours, polygon, 1)
        rle = coco_mask.frPyObjects([polygon.reshape(-1).tolist()], 50, 60)
        theirs = coco_mask.decode(rle)[..., 0]
        differ = np.argwhere(ours != theirs)
        # every pixel that differs has a neighbour where both agree on its value: one pixel
        for y, x in differ:
            window = theirs[max(y - 1, 0) : y + 2, max(x - 1, 0) : x + 2]
            assert (window == ours[y, x]).any(), (y, x)
        assert len(differ) <= max(3, theirs.sum() // 10)


def test_a_comb_of_many_spans_a_row_is_drawn_as_pycocotools_draws_it():
    from pycocotools import mask as coco_mask

    teeth = [
        (x, y)
        for i in range(12)
        for x, y in (
            (4 * i + 1.3, 2.2),
            (4 * i + 3.1, 2.2),
            (4 * i + 3.1, 30.6),
            (4 * i + 4.2, 30.6),
        )
    ]
    polygon = np.array([*teeth, (49.5, 37.4), (0.7, 37.4)])  # 12 teeth on a bar: 12 spans a row
    ours = np.zeros((40, 52), np.uint8)
    images.fill_polygon(ours, polygon, 1)
    theirs = coco_mask.decode(coco_mask.frPyObjects([polygon.reshape(-1).tolist()], 40, 52))
    np.testing.assert_array_equal(ours, theirs[..., 0])


def test_compressed_rle_is_read_as_pycocotools_writes_it():
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(1)
    mask = np.zeros((70, 50), np.uint8)
    for _ in range(6):
        y, x = rng.integers(0, 60), rng.integers(0, 40)
        mask[y : y + rng.integers(1, 30), x : x + rng.integers(1, 30)] ^= 1
    text = coco_mask.encode(np.asfortranarray(mask))["counts"].decode()
    rle = shapes.check({"size": [70, 50], "counts": text}, 70, 50)
    np.testing.assert_array_equal(masks.rle_mask("k", rle, 70, 50), mask.astype(bool))


@pytest.mark.parametrize("orientation", sorted(STORED))
def test_a_map_turns_as_its_pixels_and_points_do(orientation: int):
    upright = np.zeros((6, 10), np.uint8)
    upright[1, 7] = 1  # one marked pixel, centre (x 7.5, y 1.5)
    stored = np.asarray(Image.fromarray(upright).transpose(STORED[orientation][0]))
    turn = images.Turn(orientation)
    np.testing.assert_array_equal(turn.move_pixels(upright), stored)
    np.testing.assert_array_equal(images.Turn(orientation, upright=True).move_pixels(stored),
                                  upright)  # fmt: skip
    (y, x), height, width = np.argwhere(stored)[0], *stored.shape
    np.testing.assert_allclose(turn.move_points([[1.5 / 6, 7.5 / 10]]),
                               [[(y + 0.5) / height, (x + 0.5) / width]])  # fmt: skip


def test_dropped_objects_leave_the_map_and_the_rest_are_renumbered():
    outlines = [[[0, 0, 4, 0, 4, 4, 0, 4]], [[5, 0, 9, 0, 9, 4, 5, 4]], [[0, 5, 4, 5, 4, 9, 0, 9]]]
    blob = shapes.encode(10, 10, [shapes.check(o, 10, 10) for o in outlines], [0, 0, 0])
    ids = _ids(masks.drawn("k", blob, (), (10, 10), np.array([True, False, True])))
    assert ids[2, 2] == 1 and ids[2, 7] == 0 and ids[7, 2] == 2


def test_past_255_objects_the_map_is_16_bit():
    outlines = [[[x, y, x + 1, y, x + 1, y + 1, x, y + 1]] for y in range(20) for x in range(15)]
    checked = [shapes.check(o, 20, 15) for o in outlines]
    png = masks.drawn("k", shapes.encode(20, 15, checked, [0] * 300), (), (20, 15))
    ids = _ids(png)
    assert ids.dtype == np.uint16 and ids.max() == 300 and ids[19, 14] == 300
    where = images.Geometry((40, 30), (40, 30), (20, 15))  # twice the size, the same ids
    assert _ids(masks.drawn("k", png, (where,), (40, 30)))[39, 29] == 300


def test_an_image_of_more_polygon_points_than_it_draws_is_refused_by_name():
    """Polygons under the cap one by one, over it together (drawing costs rows x points: a
    hostile JSON held a worker for minutes an image), are refused before any is drawn."""
    polygon = [np.tile(np.array([[0, 0], [9, 0], [9, 9]], "<f4"), (3000, 1))]  # 9,000 points
    outlines = [polygon] * 28  # 252,000 points
    blob = shapes.encode(10, 10, outlines, [0] * len(outlines))
    with pytest.raises(ImageError, match=r"k: its objects' polygons hold 252,000 points, more"):
        masks.drawn("k", blob, (), (10, 10))


def test_polygons_spanning_more_point_rows_than_it_draws_are_refused_by_name():
    """Under the points' cap, but over the rows of a JSON's size (a 100x100 image annotated as
    13,000 x 13,000 is taken for a resized copy): drawing costs points x rows, and held a worker
    29 s a record. Refused before any is drawn; the same points over fewer rows are drawn."""
    zigzag = np.array([((i % 2) * 9, i * 0.2) for i in range(10_000)], "<f4")  # 2,000 rows
    outlines = [[zigzag]] * 13  # 130,000 points over 2,000 rows: 260,000,000 point-rows
    blob = shapes.encode(2000, 10, outlines, [0] * len(outlines))
    said = r"k: its objects' polygons span 260,000,000 point-rows \(each one's points times"
    with pytest.raises(ImageError, match=said):
        masks.drawn("k", blob, (), (2000, 10))
    flat = [[zigzag * np.array([1, 0.1], "<f4")]] * 13  # the same points over 200 rows: drawn
    blob = shapes.encode(2000, 10, flat, [0] * len(flat))
    assert _ids(masks.drawn("k", blob, (), (2000, 10))).max() == 13


def test_rle_masks_decoding_more_pixels_than_it_decodes_are_refused_by_name():
    """Each RLE decodes its whole map, at the size the JSON gives (a 100x100 image annotated as
    13,000 x 13,000 is taken for a resized copy): ten RLEs of two counts, 1.7 KB of JSON, held
    a worker 9 s. Refused before any is decoded; as many of a smaller map are decoded."""
    rle = shapes.check({"size": [2000, 2000], "counts": [0, 4_000_000]}, 2000, 2000)
    blob = shapes.encode(2000, 2000, [rle] * 251, [1] * 251)  # 1,004,000,000 pixels
    said = r"k: its objects' 251 RLE masks of 2000x2000 pixels each decode 1,004,000,000 pixels"
    with pytest.raises(ImageError, match=said):
        masks.drawn("k", blob, (), (2000, 2000))
    small = shapes.check({"size": [20, 20], "counts": [0, 400]}, 20, 20)
    blob = shapes.encode(20, 20, [small] * 251, [1] * 251)
    assert _ids(masks.drawn("k", blob, (), (20, 20))).max() == 251


def test_a_mask_that_is_no_map_is_refused_by_name():
    with pytest.raises(ImageError, match="its 'mask' is not a PNG id map"):
        masks.drawn("k", b"not a map", (images.Turn(6),), (4, 4))


def test_a_stored_map_of_another_shape_than_its_image_is_named_not_an_annotation_file():
    """A repack's or a table's `mask` PNG (no COCO JSON, no VOC <size>) of the stored pixels of
    a kept JPEG whose EXIF turns it a quarter, or of another shape: the reason names the mask."""
    png = masks.encode(np.zeros((4, 6), np.uint16), 0)  # 6 wide, 4 high: the stored pixels
    turned = r"k: its 'mask' is a map of a 6x4 image, but the image is 4x6 as displayed: its EXIF"
    with pytest.raises(ImageError, match=turned) as refused:
        masks.drawn("k", png, (images.Turn(6),), (4, 6))
    assert "COCO" not in str(refused.value) and "draw the 'mask' at 4x6" in str(refused.value)
    other = r"its 'mask' is a map of a 6x4 image .* but the image is 9x9: draw the 'mask' at 9x9"
    with pytest.raises(ImageError, match=other):
        masks.drawn("k", png, (images.Geometry((18, 18), (18, 18), (9, 9)),), (18, 18))


@pytest.mark.parametrize("upright", [False, True], ids=["displayed-to-stored", "stored-to-upright"])
def test_a_normalised_polygon_is_drawn_at_the_size_its_moves_start_from(upright: bool):
    """YOLO's polygons (fractions of the image's sides) give the map a polygon in pixels of the
    image the moves start from gives: a quarter turn's sides swapped, a geometry's source."""
    polygon = np.array([[0.113, 0.217], [0.709, 0.131], [0.887, 0.809], [0.291, 0.613]], "<f4")
    start = (60, 90)  # the image the annotations describe, (height, width)
    turned = start[::-1]
    where = images.geometry(*turned, None, (40, 30), "center-crop")
    moves = (images.Turn(6, upright=upright), where)
    in_pixels = shapes.encode(*start, [[(polygon * [start[1], start[0]]).astype("<f4")]], [0])
    expected = _ids(masks.drawn("k", in_pixels, moves, (30, 40)))
    assert masks.shown_size(moves, (30, 40)) == start
    assert expected.any()
    mine = _ids(masks.drawn("k", shapes.encode_normalised([[polygon]]), moves, (30, 40)))
    np.testing.assert_array_equal(mine, expected)
    alone = _ids(masks.drawn("k", shapes.encode_normalised([[polygon], []]), moves[:1], turned))
    np.testing.assert_array_equal(alone, images.Turn(6, upright).move_pixels(
        _ids(masks.drawn("k", in_pixels, (), start))))  # fmt: skip
    assert alone.max() == 1  # the second object, of no polygon, has no pixel


def test_a_stored_map_of_more_pixels_than_max_pixels_is_refused_before_it_is_decoded(tmp_path):
    """A repack's `mask` PNG is a stranger's bytes: one of the image's shape but 10 times its
    sides (a resized copy, taken) was decoded whatever its size, where an image's size is
    checked against --max-pixels first: 900 KB of PNG made a worker decode 30,000 x 30,000
    pixels (2.6 GB, 25 s) a record. It is refused from its header, as an image is."""
    import json

    from shardpack.containers import example, tfrecord
    from shardpack.options import PackOptions
    from shardpack.packing.packer import pack
    from shardpack.storage import storage_at
    from tests.helpers import vouch_size, write_image

    src, out = tmp_path / "src", tmp_path / "out"
    write_image(src / "val/a.png", np.full((80, 120, 3), 128, np.uint8))
    (src / "annotations").mkdir()
    (src / "annotations/instances_val.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.png", "width": 120, "height": 80}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 20],
                         "segmentation": [[10, 10, 40, 10, 40, 30, 10, 30]]}],
        "categories": [{"id": 1, "name": "cat"}]}))  # fmt: skip
    pack(src, out, PackOptions(workers=1, shuffle=False))
    (file,) = [p.name for p in out.iterdir() if ".tfrecord-" in p.name]
    ((_, data),) = tfrecord.iter_records(storage_at(str(out)), file)
    record = example.decode_example(bytes(data))
    big = np.zeros((800, 1200), np.uint8)
    big[100:300, 100:400] = 1
    record["mask"] = [masks.encode(big, 1)]  # the polygon's own map, at 10 times the sides
    (out / file).write_bytes(tfrecord.frame(example.encode_example(record)))
    vouch_size(out, file)
    options = PackOptions(workers=1, resize=(60, 40), max_pixels=500_000)
    said = r"1 item skipped \(the first, val/a\.png: its 'mask': 1200x800 pixels is over"
    with pytest.raises(SourceError, match=said):  # its only record: nothing packed
        pack(out, tmp_path / "again", options)
