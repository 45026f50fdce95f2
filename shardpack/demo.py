"""The built-in sample set: drawn shapes on textured backgrounds, as a class-folder tree."""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from shardpack import images
from shardpack.errors import OutputError, ShardpackError
from shardpack.index import load_index

SHAPES = ("circle", "cross", "ring", "square", "triangle")
# The dataset name pack gives the sample: its folder's, OUT/sample.
SAMPLE_NAME = "sample"
# The only names a sample holds: anything else in its folder is not the demo's to remove.
_SAMPLE_FILE = re.compile(rf"(?:{'|'.join(SHAPES)})_\d{{4,}}\.(?:jpg|png)")


def _draw(shape: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """One BGR image: a shape of random colour, place and scale over a noisy gradient."""
    cv2 = images._opencv()  # with Ctrl-C held off as it loads (its loader swallows one)
    base = rng.integers(0, 256, 3)
    ramp = np.linspace(0.6, 1.0, size)[:, None, None] * base[None, None, :]
    image = np.broadcast_to(ramp, (size, size, 3)) + rng.normal(0, 12, (size, size, 3))
    image = np.clip(image, 0, 255).astype(np.uint8)
    color = tuple(int(c) for c in (255 - base + rng.integers(-40, 40, 3)) % 256)
    r = int(size * rng.uniform(0.18, 0.32))
    cx, cy = (int(c) for c in rng.integers(r + 2, size - r - 2, 2))
    thick = max(2, size // 16)
    if shape == "circle":
        cv2.circle(image, (cx, cy), r, color, -1, cv2.LINE_AA)
    elif shape == "ring":
        cv2.circle(image, (cx, cy), r, color, thick, cv2.LINE_AA)
    elif shape == "square":
        cv2.rectangle(image, (cx - r, cy - r), (cx + r, cy + r), color, -1, cv2.LINE_AA)
    elif shape == "cross":
        cv2.line(image, (cx - r, cy - r), (cx + r, cy + r), color, thick, cv2.LINE_AA)
        cv2.line(image, (cx - r, cy + r), (cx + r, cy - r), color, thick, cv2.LINE_AA)
    else:
        angle = rng.uniform(0, 2 * math.pi)
        points = [
            (
                cx + r * math.cos(angle + k * 2 * math.pi / 3),
                cy + r * math.sin(angle + k * 2 * math.pi / 3),
            )
            for k in range(3)
        ]
        cv2.fillPoly(image, [np.array(points, np.int32)], color, cv2.LINE_AA)
    return image


def make_sample(
    dest: str | os.PathLike, per_class: int = 200, size: int = 96, seed: int = 0
) -> str:
    """Write a labelled class-folder tree of drawn shapes, half JPEG and half PNG.

    The tree holds exactly what was asked: an earlier sample in dest is replaced whole. The new
    one is built beside dest and renamed into place, and only then is the old one removed; a
    dest holding anything this function does not write is refused and left as it is.

    Args:
        dest: folder to create the tree in (SRC/<shape>/<n>.jpg|png).
        per_class: images per class.
        size: side of the square images in pixels.
        seed: makes the images repeat exactly.

    Returns:
        The folder, ready to pass to pack.

    Raises:
        OutputError: dest (or a path above it) is a file, or dest holds something that is not
            an earlier sample's image.
    """
    dest = os.path.abspath(os.fspath(dest))
    old = _sample_files(dest)  # refuse before drawing anything
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    new = tempfile.mkdtemp(prefix=".sample-", dir=parent)
    try:
        cv2 = images._opencv()
        rng = np.random.default_rng(seed)
        for shape in SHAPES:
            os.mkdir(os.path.join(new, shape))
            for i in range(per_class):
                ext = ".jpg" if i % 2 == 0 else ".png"
                path = os.path.join(new, shape, f"{shape}_{i:04d}{ext}")
                if not cv2.imwrite(path, _draw(shape, size, rng)):
                    raise OutputError(f"{path}: cannot write; check the free space in {parent}")
    except BaseException:
        _remove_sample(new, _sample_files(new) or [])
        raise
    retired = None
    if old is not None:
        retired = tempfile.mkdtemp(prefix=".sample-old-", dir=parent)
        os.rename(dest, os.path.join(retired, "sample"))
    os.rename(new, dest)
    if retired is not None:
        _remove_sample(os.path.join(retired, "sample"), old)
        os.rmdir(retired)
    return dest


@dataclass(frozen=True)
class Undo:
    """What a demo run is about to make, noted before it writes anything, so that a stopped run
    (Ctrl-C, SIGTERM) or a failed one (a full disk) leaves none of it, and nothing that was
    there before is touched."""

    made: tuple[str, ...]  # OUT and the missing folders above it, that the run makes: OUT first
    sample: str | None  # OUT/sample, where there was none
    shards: str | None  # OUT/shards, where there was none

    @classmethod
    def before(cls, out: str | os.PathLike) -> Undo:
        """What is missing at `out`, its folders above and its sample and shards folders."""
        out = os.path.abspath(os.fspath(out))
        made, path = [], out
        while not os.path.lexists(path) and os.path.dirname(path) != path:
            made.append(path)
            path = os.path.dirname(path)
        sample, shards = os.path.join(out, SAMPLE_NAME), os.path.join(out, "shards")
        return cls(tuple(made), None if os.path.lexists(sample) else sample,
                   None if os.path.lexists(shards) else shards)  # fmt: skip

    def __call__(self) -> None:
        """Remove what the run made of those: all of OUT where it made OUT, else the sample and
        shards folders it made; then the folders above OUT it made, where they are empty."""
        if self.made:  # nothing in it was there before the run
            shutil.rmtree(self.made[0], ignore_errors=True)
        else:
            if self.shards is not None and not os.path.islink(self.shards):
                shutil.rmtree(self.shards, ignore_errors=True)
            if self.sample is not None:
                with contextlib.suppress(OSError, OutputError):  # a file of the user's: kept
                    _remove_sample(self.sample, _sample_files(self.sample) or [])
        for folder in self.made:
            with contextlib.suppress(OSError):  # not empty: something of another's is there
                os.rmdir(folder)


def refuse_links(*folders: str | os.PathLike) -> None:
    """Refuse a link at OUT/sample or OUT/shards: the demo writes there as its own, and would
    write (or remove) wherever the link points.

    Raises:
        OutputError: one of them is a link.
    """
    for folder in folders:
        if os.path.islink(folder):
            raise OutputError(f"{folder}: is a link; the demo writes into this folder itself: "
                              "remove the link, or choose another OUT")  # fmt: skip


def _sample_files(dest: str) -> list[str] | None:
    """The images of an earlier sample in dest (relative paths); None if dest is absent or empty.

    Raises OutputError naming the first entry that a sample never holds.
    """
    try:
        entries = list(os.scandir(dest))
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # dest, or a folder above it, is a file: name that one
        raise OutputError(f"{_file_in_the_way(dest)}: is a file; the demo needs a folder there: "
                          "move the file, or choose another folder") from None  # fmt: skip
    if not entries:
        return None
    found = []
    for entry in entries:
        if entry.name not in SHAPES or not entry.is_dir(follow_symlinks=False):
            raise _not_ours(entry.path, dest)
        for item in os.scandir(entry.path):
            if not (_SAMPLE_FILE.fullmatch(item.name) and item.is_file(follow_symlinks=False)):
                raise _not_ours(item.path, dest)
            found.append(os.path.join(entry.name, item.name))
    return found


def _file_in_the_way(dest: str) -> str:
    """The path that makes dest no folder: dest, or the nearest path above it that exists."""
    path = dest
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _not_ours(path: str, dest: str) -> OutputError:
    return OutputError(
        f"{path}: not a file the demo wrote; move it out of {dest}, or choose another folder "
        "for the demo"
    )


def _remove_sample(dest: str, files: list[str]) -> None:
    """Remove the listed sample images, then the folders they leave empty."""
    for name in files:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(dest, name))
    for shape in SHAPES:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(os.path.join(dest, shape))
    os.rmdir(dest)


def earlier_demo(shards: str | os.PathLike) -> bool:
    """`shards` holds what an earlier demo packed there: an index of the sample (its name and
    the shape classes), which a rerun replaces; anything else there is the user's."""

    try:
        index = load_index(shards)
    except (ShardpackError, OSError):  # none, or not one shardpack can read: not the demo's
        return False
    return index.name == SAMPLE_NAME and tuple(index.classes) == SHAPES
