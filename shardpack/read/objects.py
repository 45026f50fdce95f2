"""A record's objects as readers use them: boxes in pixels, and the instance-id map (one PNG
an image, schema.py's MASK) checked and decoded."""

from __future__ import annotations

import numpy as np

from shardpack import images
from shardpack.options import DEFAULT_MAX_PIXELS


def pixel_boxes(boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """Normalised [ymin, xmin, ymax, xmax] rows as [xmin, ymin, xmax, ymax] in pixels of an image
    of height x width: what torchvision's detection models take (float32, (n, 4))."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    scale = np.array([width, height, width, height], np.float32)
    return boxes[:, [1, 0, 3, 2]] * scale


def mask_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) of an instance-id map PNG, from its header (every chunk's CRC checked, no
    pixel decoded); None for no map (empty bytes: an image without one).

    Raises:
        images.BadImage: the bytes are not a whole PNG.
    """
    if not data:
        return None
    info = images.probe(data)
    if info is None or info.format != "png":
        raise images.BadImage("not a PNG")
    return info.height, info.width


def decode_mask(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray | None:
    """An instance-id map PNG as an (h, w) integer array (0 background, i the i-th object), its
    size checked against max_pixels first; None for empty bytes.

    Raises:
        images.BadImage: not a whole single-channel PNG, or too large.
    """
    size = mask_size(data)
    if size is None:
        return None
    images.check_pixels(*size, max_pixels)
    return images.decode_labels(data)  # OpenCV loads only when a mask is decoded
