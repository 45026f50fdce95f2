"""One small object dataset packed once for the read tests: boxes with class names, a crowd
flag, an instance-id mask, and an image without objects (a Hugging Face Parquet file, which
carries them all today)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from tests.helpers import write_objects_parquet

CLASSES = ["cat", "dog", "eel"]


def _png(pixels: np.ndarray) -> bytes:
    return cv2.imencode(".png", pixels)[1].tobytes()


def _mask(height: int, width: int, regions: list[tuple[int, int, int, int]]) -> bytes:
    """An instance-id map: region i (pixels [y0, x0, y1, x1)) holds id i + 1, the rest 0."""
    ids = np.zeros((height, width), np.uint8)
    for i, (y0, x0, y1, x1) in enumerate(regions):
        ids[y0:y1, x0:x1] = i + 1
    return _png(ids)


# a.png 40x60 (h x w): two small objects with masks inside their boxes; b.png 120x100: a large
# and a medium one (COCO's sizes); c.png: none.
ROWS = [
    {"name": "a.png", "png": _png(np.full((40, 60, 3), 128, np.uint8)),
     "boxes": [[0.1, 0.1, 0.6, 0.5], [0.5, 0.5, 0.9, 0.95]], "labels": [0, 1],
     "is_crowd": [0, 1], "mask": _mask(40, 60, [(8, 10, 20, 26), (22, 34, 34, 54)])},
    {"name": "b.png", "png": _png(np.full((120, 100, 3), 200, np.uint8)),
     "boxes": [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.5, 0.5]], "labels": [2, 0]},
    {"name": "c.png", "png": _png(np.full((30, 30, 3), 60, np.uint8)), "boxes": [], "labels": []},
]  # fmt: skip


@dataclass(frozen=True)
class Packed:
    out: Path
    rows: list[dict]


def pack_objects(folder: Path, rows: list[dict]) -> Path:
    """rows (ROWS's form) written as a Parquet file in folder and packed into folder/out."""
    folder.mkdir(parents=True, exist_ok=True)
    src = write_objects_parquet(folder / "objects.parquet", rows, CLASSES)
    pack(src, folder / "out", PackOptions(workers=1, shuffle=False, shards=1))
    return folder / "out"


@pytest.fixture(scope="session")
def objects_out(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    """ROWS packed once: one shard, records in ROWS's order, keyed objects.parquet:<row>."""
    return Packed(pack_objects(tmp_path_factory.mktemp("objects"), ROWS), ROWS)
