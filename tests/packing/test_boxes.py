"""Boxes follow the pixels (packing/boxes.py, images.Geometry): a manifest's boxes packed with a
geometric transform are moved with the same arithmetic as the pixels, clipped, and dropped
(counted by reason) when nothing of them is left; what cannot be moved is refused.

The images are real JPEGs and PNGs holding one coloured object at a known place; the packed
boxes are checked against albumentations (an independent oracle) and against the object's own
pixels in the packed image.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.errors import ShardpackError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from tests.helpers import write_jsonl

# The photo: 400x200, one red object at x 300-380, y 50-150.
WIDTH, HEIGHT = 400, 200
OBJECT = (50, 300, 150, 380)  # ymin, xmin, ymax, xmax in pixels
RED = (0, 0, 255)  # BGR


def _photo(height: int = HEIGHT, width: int = WIDTH, box: tuple = OBJECT) -> np.ndarray:
    """A grey image with a red rectangle over `box` (pixels, [ymin, xmin, ymax, xmax))."""
    pixels = np.full((height, width, 3), 128, np.uint8)
    ymin, xmin, ymax, xmax = box
    pixels[ymin:ymax, xmin:xmax] = RED
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


def test_a_transform_that_would_leave_geometry_behind_is_refused(tmp_path: Path):
    src = _manifest(tmp_path / "src", [("a.png", _png(_photo()), {
        "boxes": [_normalised(OBJECT)]})])  # fmt: skip
    with pytest.raises(ShardpackError, match=r"--resize 200x200 --resize-mode center-crop .*"
                                             r"'boxes'"):  # fmt: skip
        _pack(src, tmp_path / "out", resize=(200, 200), resize_mode="center-crop")
    assert not (tmp_path / "out" / "index.json").exists()
    _pack(src, tmp_path / "kept")  # no transform: nothing to move, nothing refused
    (record,) = iter_examples(tmp_path / "kept")
    np.testing.assert_allclose(record["boxes"], [_normalised(OBJECT)])
