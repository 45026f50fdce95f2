"""Workloads the harness makes for itself and caches under CACHE/workloads/.

Every image is drawn, not noise: a sky and ground gradient, low-frequency lighting, a horizon
with mountains, buildings, trees, a sun and a foreground object whose hue follows the class,
then a slight blur and sensor-like noise. Each image comes from its own seed, so a workload is
the same bytes on every machine with the same OpenCV, and regenerating it is never needed:
a stamp file written last marks a workload complete.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import struct
from dataclasses import dataclass
from typing import ClassVar

import cv2
import numpy as np

# Bump when the drawing changes, so that cached workloads are made again.
VERSION = 2
STAMP = ".workload.json"
CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
PHOTO_CLASSES = ("beach", "city", "desert", "field", "forest", "lake", "mountain", "snow")
PHOTO_QUALITY = 90
# Images per generation task: big enough that a loky task costs nothing, small enough to
# spread over the cores.
_CHUNK = 250

# name -> (maker, parameters); parameters are part of the cache key.
_SPECS: dict[str, tuple[str, dict]] = {
    "sample": ("sample", {"per_class": 1000}),
    "cifar10": ("cifar10", {"per_batch": 10_000}),
    "small-jpeg": ("small_jpeg", {"from": "cifar10"}),
    "small-jpeg-5k": ("subset", {"from": "small-jpeg", "every": 10}),
    "photos": ("photos", {"count": 3000}),
    "photos-600": ("photos", {"count": 600}),  # the first 600 of photos: the storage pairings
    "photos-6000": ("photos", {"count": 6000}),  # the Hub Parquet pairing (issue 39's size)
    "photos-large": ("photos", {"count": 16_000}),
    # The listing-scale run: a class-folder tree of a million files, hard links of a few dozen
    # photos (ext4 allows 65,000 links per file), so it costs directory entries, not disk.
    "million": ("links", {"from": "photos", "count": 1_000_000, "classes": 100, "sources": 48}),
    "demo": ("sample", {"per_class": 200}),  # what `shardpack demo` packs: 1,000 images
}
NAMES = tuple(_SPECS)


@dataclass(frozen=True)
class Workload:
    """A source folder ready to pack: its layout, image count and bytes on disk."""

    name: str
    path: str
    kind: str  # "folder" (class folders) or "cifar" (CIFAR-10 python batches)
    num_images: int
    input_bytes: int

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "path": self.path,
            "kind": self.kind,
            "num_images": self.num_images,
            "input_mb": round(self.input_bytes / 1e6, 1),
        }


def ensure(name: str, cache: str, log=print) -> Workload:
    """Return the named workload, making it under cache/workloads/ first if it is not there."""
    if name not in _SPECS:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(NAMES)}")
    maker, params = _SPECS[name]
    dest = os.path.join(os.path.abspath(cache), "workloads", name)
    key = {"name": name, "version": VERSION, "maker": maker, "params": params}
    stamp = _read_stamp(dest)
    if stamp is None or stamp.get("key") != key:
        if "from" in params:
            ensure(params["from"], cache, log)
        log(f"making workload {name} in {dest} (once; it is cached)")
        tmp = dest + ".partial"
        for path in (tmp, dest):
            shutil.rmtree(path, ignore_errors=True)
        os.makedirs(tmp)
        kind = _MAKERS[maker](tmp, os.path.dirname(dest), **params)
        count, size = _count(tmp, kind)
        stamp = {"key": key, "kind": kind, "num_images": count, "input_bytes": size}
        with open(os.path.join(tmp, STAMP), "w") as f:
            json.dump(stamp, f)
        os.replace(tmp, dest)
    return Workload(name, dest, stamp["kind"], stamp["num_images"], stamp["input_bytes"])


def from_path(path: str) -> Workload:
    """A user's SRC folder (class folders or CIFAR batches) as a workload."""
    from shardpack.sources import scan

    dataset = scan(path)
    kind = "folder" if dataset.kind == "folder" else "cifar"
    if kind == "cifar" and dataset.kind != "cifar10-python":
        raise ValueError(f"{path}: the seed's scripts read CIFAR-10 python batches only")
    _, size = _count(dataset.root.path(), kind)
    name = os.path.basename(os.path.normpath(path)) or "src"
    return Workload(name, dataset.root.path(), kind, dataset.num_items, size)


def image_files(root: str) -> list[str]:
    """Every image file of a class-folder tree, sorted, as absolute paths."""
    found = []
    for cls in sorted(os.listdir(root)):
        folder = os.path.join(root, cls)
        if cls.startswith(".") or not os.path.isdir(folder):
            continue
        found.extend(os.path.join(folder, n) for n in sorted(os.listdir(folder)))
    return found


def _read_stamp(dest: str) -> dict | None:
    try:
        with open(os.path.join(dest, STAMP)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _count(root: str, kind: str) -> tuple[int, int]:
    """(images, bytes) of a finished workload folder."""
    if kind == "cifar":
        names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
        paths = [os.path.join(root, n) for n in names if os.path.exists(os.path.join(root, n))]
        images = sum(len(_load_pickle(p)[b"labels"]) for p in paths)
        return images, sum(os.path.getsize(p) for p in paths)
    files = image_files(root)
    return len(files), sum(os.path.getsize(p) for p in files)


def _load_pickle(path: str) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f, encoding="bytes")


# ---- drawing -------------------------------------------------------------------------------


def _noise_tile() -> np.ndarray:
    """A fixed field of sensor-like noise; each image takes a random crop of it (cheap)."""
    rng = np.random.default_rng(20_240_601)
    return np.clip(rng.normal(0, 5, (768, 768, 3)), -20, 20).astype(np.float32)


def _hsv(hue: float, sat: float, val: float) -> np.ndarray:
    pixel = np.array([[[hue % 180, sat, val]]], np.uint8)
    return cv2.cvtColor(pixel, cv2.COLOR_HSV2BGR)[0, 0].astype(np.float32)


def _color(rng: np.random.Generator, hue: float, spread: float = 12) -> tuple[int, int, int]:
    value = _hsv(hue + rng.uniform(-spread, spread), rng.uniform(60, 230), rng.uniform(50, 240))
    return tuple(int(c) for c in value)


def scene(
    rng: np.random.Generator, height: int, width: int, label: int, noise: np.ndarray
) -> np.ndarray:
    """Draw one BGR uint8 landscape-like image whose palette and main object follow `label`."""
    hue = label * 180 / 10 + rng.uniform(-8, 8)
    horizon = int(height * rng.uniform(0.35, 0.7))
    rows = np.empty((height, 1, 3), np.float32)
    sky = (
        _hsv(105 + rng.uniform(-10, 10), rng.uniform(40, 160), rng.uniform(150, 250)),
        _hsv(100, rng.uniform(10, 80), rng.uniform(200, 255)),
    )
    ground = (
        _hsv(hue, rng.uniform(80, 200), rng.uniform(80, 180)),
        _hsv(hue + 15, rng.uniform(60, 200), rng.uniform(30, 120)),
    )
    t = np.linspace(0, 1, max(horizon, 1), dtype=np.float32)[:, None]
    rows[:horizon, 0] = sky[0] * (1 - t) + sky[1] * t
    t = np.linspace(0, 1, max(height - horizon, 1), dtype=np.float32)[:, None]
    rows[horizon:, 0] = ground[0] * (1 - t) + ground[1] * t
    light = cv2.resize(
        rng.uniform(-25, 25, (3, 4)).astype(np.float32),
        (width, height),
        interpolation=cv2.INTER_CUBIC,
    )
    image = np.clip(rows + light[:, :, None], 0, 255).astype(np.uint8)
    unit = max(1, min(height, width) // 32)
    aa = cv2.LINE_AA
    # mountains along the horizon
    for _ in range(rng.integers(1, 4)):
        base = int(rng.uniform(0, width))
        half, peak = int(rng.uniform(0.1, 0.35) * width), int(rng.uniform(0.1, 0.3) * height)
        points = np.array([[base - half, horizon], [base, horizon - peak], [base + half, horizon]])
        cv2.fillPoly(image, [points.astype(np.int32)], _color(rng, hue + 60, 20), aa)
    # sun
    if rng.random() < 0.6:
        center = (int(rng.uniform(0, width)), int(rng.uniform(0, horizon * 0.6)))
        cv2.circle(image, center, int(rng.uniform(1.5, 4) * unit), (180, 235, 255), -1, aa)
    # buildings with windows
    for _ in range(rng.integers(0, 5)):
        x, w = int(rng.uniform(0, width)), int(rng.uniform(2, 7) * unit)
        top = horizon - int(rng.uniform(0.1, 0.45) * height)
        cv2.rectangle(image, (x, top), (x + w, horizon), _color(rng, 20, 30), -1, aa)
        for wy in range(top + unit, horizon - unit, 2 * unit):
            cv2.line(image, (x + unit // 2, wy), (x + w - unit // 2, wy), (40, 200, 230), 1)
    # trees
    for _ in range(rng.integers(0, 6)):
        x, y = int(rng.uniform(0, width)), int(rng.uniform(horizon, height))
        r = int(rng.uniform(1, 3) * unit)
        cv2.line(image, (x, y), (x, y - 2 * r), (30, 50, 70), max(1, unit // 2), aa)
        cv2.ellipse(
            image, (x, y - 2 * r), (r, int(r * 1.4)), 0, 0, 360, _color(rng, 60, 10), -1, aa
        )
    # grass, pebbles and leaves: short strokes that give the ground real edges
    if min(height, width) > 64:
        count = height * width // 400
        starts = rng.uniform(0, 1, (count, 2)) * (width, height - horizon) + (0, horizon)
        ends = starts + rng.normal(0, 0.6 * unit, (count, 2))
        shades = rng.uniform(-35, 35, (count, 3)) + ground[0]
        for p, q, shade in zip(starts.astype(int), ends.astype(int), shades, strict=True):
            color = tuple(int(c) for c in np.clip(shade, 0, 255))
            cv2.line(image, (int(p[0]), int(p[1])), (int(q[0]), int(q[1])), color, 1)
    # the class's object in the foreground
    center = (int(rng.uniform(0.2, 0.8) * width), int(rng.uniform(0.45, 0.85) * height))
    axes = (int(rng.uniform(0.12, 0.3) * width), int(rng.uniform(0.08, 0.2) * height))
    angle = rng.uniform(0, 180)
    cv2.ellipse(image, center, axes, angle, 0, 360, _color(rng, hue + 90, 6), -1, aa)
    cv2.ellipse(image, center, axes, angle, 0, 360, (20, 20, 20), max(1, unit // 2), aa)
    if min(height, width) > 64:
        image = cv2.GaussianBlur(image, (3, 3), 0)
    # surface texture at three scales (coarse blotches to fine grain), then sensor noise
    y0 = int(rng.integers(0, noise.shape[0] - height + 1))
    x0 = int(rng.integers(0, noise.shape[1] - width + 1))
    pixels = image + noise[y0 : y0 + height, x0 : x0 + width]
    for cell, amplitude in ((48, 14), (12, 10), (3, 7)):
        rows_, cols_ = max(2, height // cell), max(2, width // cell)
        field = rng.uniform(-amplitude, amplitude, (rows_, cols_, 3)).astype(np.float32)
        pixels += cv2.resize(field, (width, height), interpolation=cv2.INTER_LINEAR)
    return np.clip(pixels, 0, 255).astype(np.uint8)


# ---- makers: each fills `dest` and returns the workload kind --------------------------------


def _parallel(function, tasks) -> list:
    from joblib import Parallel, delayed

    return Parallel(n_jobs=-1)(delayed(function)(*task) for task in tasks)


class _Py2Pickler(pickle._Pickler):
    """Pickles as Python 2's cPickle wrote the real CIFAR files: protocol 2, byte strings as
    BINSTRING (not Python 3's _codecs.encode detour) and numpy under `numpy.core`."""

    dispatch: ClassVar[dict] = dict(pickle._Pickler.dispatch)

    def save_bytes(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_bytes

    def save_global(self, obj, name: str | None = None) -> None:
        module = getattr(obj, "__module__", None)
        module = "numpy.core.multiarray" if module == "numpy._core.multiarray" else module
        self.write(pickle.GLOBAL + f"{module}\n{name or obj.__qualname__}\n".encode())
        self.memoize(obj)


def python2_pickle(value: object) -> bytes:
    """value pickled as Python 2's cPickle wrote the real CIFAR files."""
    out = io.BytesIO()
    _Py2Pickler(out, protocol=2).dump(value)
    return out.getvalue()


def _cifar_batch(path: str, name: str, count: int, seed: int) -> None:
    rng = np.random.default_rng((seed, 7))
    noise = _noise_tile()
    labels = [int(v) for v in rng.integers(0, 10, count)]
    images = np.stack([scene(rng, 32, 32, label, noise) for label in labels])
    rgb = images[..., ::-1]  # drawn in BGR; CIFAR stores planar RGB rows
    data = np.ascontiguousarray(rgb.transpose(0, 3, 1, 2)).reshape(count, 3072)
    batch = {
        b"batch_label": f"{name} (drawn by shardpack's benchmarks)".encode(),
        b"labels": labels,
        b"data": data,
        b"filenames": [f"{name}_{i:05d}.png".encode() for i in range(count)],
    }
    with open(path, "wb") as f:
        f.write(python2_pickle(batch))


def _make_cifar10(dest: str, _workloads: str, per_batch: int) -> str:
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    _parallel(_cifar_batch, [(os.path.join(dest, n), n, per_batch, k) for k, n in enumerate(names)])
    meta = {
        b"num_cases_per_batch": per_batch,
        b"label_names": [c.encode() for c in CIFAR10_CLASSES],
        b"num_vis": 3072,
    }
    with open(os.path.join(dest, "batches.meta"), "wb") as f:
        f.write(python2_pickle(meta))
    return "cifar"


def _make_small_jpeg(dest: str, workloads: str, **_params) -> str:
    """The seed's first script's output: CIFAR-10's 50,000 training images as JPEG folders."""
    from benchmarks.seed_cifar_to_jpg import convert

    src = os.path.join(workloads, "cifar10")
    convert([os.path.join(src, f"data_batch_{i}") for i in range(1, 6)], CIFAR10_CLASSES, dest)
    return "folder"


def _make_subset(dest: str, workloads: str, every: int, **params) -> str:
    """Every n-th image of another folder workload, hard-linked (no copy)."""
    src = os.path.join(workloads, params["from"])
    for i, path in enumerate(image_files(src)):
        if i % every:
            continue
        target = os.path.join(dest, os.path.relpath(path, src))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
    return "folder"


def _make_links(dest: str, workloads: str, count: int, classes: int, sources: int, **params) -> str:
    """`count` files in `classes` class folders, each a hard link to one of the first `sources`
    images of another folder workload."""
    originals = image_files(os.path.join(workloads, params["from"]))[:sources]
    per_class = -(-count // classes)
    for c in range(classes):
        folder = os.path.join(dest, f"class_{c:03d}")
        os.makedirs(folder)
        for i in range(c * per_class, min(count, (c + 1) * per_class)):
            os.link(originals[i % len(originals)], os.path.join(folder, f"{i:07d}.jpg"))
    return "folder"


def _photo_chunk(dest: str, start: int, end: int) -> None:
    noise = _noise_tile()
    params = [cv2.IMWRITE_JPEG_QUALITY, PHOTO_QUALITY]
    for i in range(start, end):
        rng = np.random.default_rng((i, 11))
        label = i % len(PHOTO_CLASSES)
        height, width = (375, 500) if rng.random() < 0.85 else (500, 375)
        pixels = scene(rng, height, width, label, noise)
        _, buf = cv2.imencode(".jpg", pixels, params)
        path = os.path.join(dest, PHOTO_CLASSES[label], f"img_{i:05d}.jpg")
        with open(path, "wb") as f:
            f.write(buf.tobytes())


def _make_photos(dest: str, _workloads: str, count: int) -> str:
    for cls in PHOTO_CLASSES:
        os.makedirs(os.path.join(dest, cls))
    bounds = [(s, min(s + _CHUNK, count)) for s in range(0, count, _CHUNK)]
    _parallel(_photo_chunk, [(dest, s, e) for s, e in bounds])
    return "folder"


def _make_sample(dest: str, _workloads: str, per_class: int) -> str:
    from shardpack.demo import make_sample

    make_sample(dest, per_class=per_class)
    return "folder"


_MAKERS = {
    "sample": _make_sample,
    "cifar10": _make_cifar10,
    "small_jpeg": _make_small_jpeg,
    "subset": _make_subset,
    "links": _make_links,
    "photos": _make_photos,
}
