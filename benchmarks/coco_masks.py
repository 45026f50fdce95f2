"""What COCO's objects cost a pack: a synthetic COCO folder (640x480 JPEGs, 7 objects an image,
each a 30-point polygon about 100 px across) packed with boxes only and with boxes and masks,
passed through and resized; the scan's rate; one polygon drawn by shardpack and by pycocotools.

    .venv/bin/python -m benchmarks.coco_masks [--images 100] [--scan-images 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

import shardpack
from shardpack import images
from shardpack.options import PackOptions
from shardpack.sources import scan

OBJECTS = 7  # COCO 2017 train: 7.3 annotations an image


def _polygon(rng: np.random.Generator) -> np.ndarray:
    """A star-shaped 30-point polygon, 40 to 160 px across, inside a 640x480 image."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, 30))
    radius = rng.uniform(20, 80, 30)
    centre = rng.uniform(100, 380, 2)
    return np.column_stack([centre[0] + radius * np.cos(angles),
                            centre[1] + radius * np.sin(angles)]).round(2)  # fmt: skip


def make(root: Path, count: int, photos: bool = True) -> dict:
    """SRC/annotations/instances_val2017.json and SRC/val2017/<i>.jpg; the JSON's doc."""
    rng = np.random.default_rng(0)
    (root / "annotations").mkdir(parents=True)
    (root / "val2017").mkdir()
    doc: dict = {"images": [], "annotations": [], "categories": [{"id": 1, "name": "thing"}]}
    for i in range(count):
        name = f"{i:012d}.jpg"
        if photos:
            noise = rng.integers(0, 255, (480, 640, 3), np.uint8)
            cv2.imwrite(str(root / "val2017" / name), cv2.GaussianBlur(noise, (9, 9), 3),
                        [cv2.IMWRITE_JPEG_QUALITY, 90])  # fmt: skip
        else:
            (root / "val2017" / name).write_bytes(b"")
        doc["images"].append({"id": i, "file_name": name, "width": 640, "height": 480})
        for _ in range(OBJECTS):
            polygon = _polygon(rng)
            (x0, y0), (x1, y1) = polygon.min(0), polygon.max(0)
            doc["annotations"].append({
                "id": len(doc["annotations"]), "image_id": i, "category_id": 1, "iscrowd": 0,
                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": 0.0,
                "segmentation": [polygon.reshape(-1).tolist()],
            })  # fmt: skip
    return doc


def _write(root: Path, doc: dict) -> None:
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(doc))


def packs(root: Path, doc: dict, count: int, repeat: int) -> None:
    boxes_only = {**doc, "annotations": [{k: v for k, v in a.items() if k != "segmentation"}
                                         for a in doc["annotations"]]}  # fmt: skip
    for label, written in (("boxes", boxes_only), ("boxes + masks", doc)):
        _write(root, written)
        for options in ({}, {"resize": (320, 320), "resize_mode": "pad"}):
            took = []
            for _ in range(repeat):  # the best of them: a shared machine's noise only adds
                out = root.parent / "out"
                shutil.rmtree(out, ignore_errors=True)
                start = time.perf_counter()
                shardpack.pack(root, out, PackOptions(workers=1, **options))
                took.append((time.perf_counter() - start) / count * 1e3)
            said = "--resize 320x320 --resize-mode pad" if options else "--encode keep"
            print(f"pack, one worker, {label:13s} {said:36s} {min(took):6.2f} ms an image")


def scans(root: Path, count: int) -> None:
    _write(root, make(root, count, photos=False))
    start = time.perf_counter()
    scan(root)
    took = time.perf_counter() - start
    print(f"scan of {count:,} images, {count * OBJECTS:,} polygons: {took:.2f} s, "
          f"{took / count * 1e6:.0f} us an image")  # fmt: skip


def polygons() -> None:
    from pycocotools import mask as coco_mask  # a test extra: the oracle

    polygon = _polygon(np.random.default_rng(1))
    labels = np.zeros((480, 640), np.uint16)
    for name, draw in (
        ("shardpack (images.fill_polygon)", lambda: images.fill_polygon(labels, polygon, 1)),
        ("pycocotools (frPyObjects, decode)", lambda: coco_mask.decode(
            coco_mask.frPyObjects([polygon.reshape(-1).tolist()], 480, 640))),
    ):  # fmt: skip
        draw()
        start = time.perf_counter()
        for _ in range(200):
            draw()
        print(f"one 30-point polygon, {name}: {(time.perf_counter() - start) / 200 * 1e6:.0f} us")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--scan-images", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "coco"
        packs(root, make(root, args.images), args.images, args.repeat)
        shutil.rmtree(root)
        scans(root, args.scan_images)
    polygons()


if __name__ == "__main__":
    main()
