"""The built-in sample set: drawn shapes on textured backgrounds, as a class-folder tree."""

from __future__ import annotations

import math
import os

import cv2
import numpy as np

SHAPES = ("circle", "cross", "ring", "square", "triangle")


def _draw(shape: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """One BGR image: a shape of random colour, place and scale over a noisy gradient."""
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

    Args:
        dest: folder to create the tree in (SRC/<shape>/<n>.jpg|png).
        per_class: images per class.
        size: side of the square images in pixels.
        seed: makes the images repeat exactly.

    Returns:
        The folder, ready to pass to pack.
    """
    rng = np.random.default_rng(seed)
    dest = os.fspath(dest)
    for shape in SHAPES:
        os.makedirs(os.path.join(dest, shape), exist_ok=True)
        for i in range(per_class):
            ext = ".jpg" if i % 2 == 0 else ".png"
            cv2.imwrite(os.path.join(dest, shape, f"{shape}_{i:04d}{ext}"), _draw(shape, size, rng))
    return dest
