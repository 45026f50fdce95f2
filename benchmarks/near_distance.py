"""How far apart --dedup near's perceptual hashes are: copies of a photo (resized, re-compressed,
cropped, colour-shifted) against distinct photos, which sets options.NEAR_DISTANCE.

    python -m benchmarks.near_distance [--photos 300]

The photos are the benchmark's (benchmarks.workloads.scene, 500x375 or 375x500, JPEG q90 here);
each copy is hashed from its JPEG bytes as pack hashes a file (packing.near.image_hash).
"""

from __future__ import annotations

import argparse
import sys

import cv2
import numpy as np

from benchmarks.workloads import _noise_tile, scene
from shardpack.packing.near import image_hash


def _jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    return cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes()


def _shifted(pixels: np.ndarray) -> np.ndarray:
    """Hues turned by 20 degrees, contrast x1.1, brightness +10."""
    hsv = cv2.cvtColor(pixels, cv2.COLOR_BGR2HSV)
    hsv[..., 0] = (hsv[..., 0].astype(int) + 10) % 180
    return cv2.convertScaleAbs(cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR), alpha=1.1, beta=10)


def _crop(pixels: np.ndarray, fraction: float) -> np.ndarray:
    """`fraction` of each side cut off, half on each end."""
    h, w = pixels.shape[:2]
    dy, dx = int(h * fraction / 2), int(w * fraction / 2)
    return pixels[dy : h - dy, dx : w - dx]


def _scaled(pixels: np.ndarray, factor: float) -> np.ndarray:
    h, w = pixels.shape[:2]
    return cv2.resize(pixels, (int(w * factor), int(h * factor)), interpolation=cv2.INTER_AREA)


COPIES = {
    "0.7x, quality 60": lambda p: _jpeg(_scaled(p, 0.7), 60),
    "quality 60": lambda p: _jpeg(p, 60),
    "0.5x, quality 75": lambda p: _jpeg(_scaled(p, 0.5), 75),
    "5% cropped": lambda p: _jpeg(_crop(p, 0.05)),
    "10% cropped": lambda p: _jpeg(_crop(p, 0.10)),
    "colour-shifted": lambda p: _jpeg(_shifted(p)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.near_distance", description=__doc__)
    parser.add_argument("--photos", type=int, default=300)
    args = parser.parse_args(argv)
    noise, hashes, copies = _noise_tile(), [], {name: [] for name in COPIES}
    for i in range(args.photos):
        rng = np.random.default_rng((i, 11))  # as workloads._photo_chunk draws photo i
        height, width = (375, 500) if rng.random() < 0.85 else (500, 375)
        pixels = scene(rng, height, width, i % 10, noise)
        hashes.append(image_hash(_jpeg(pixels), 10**9))
        for name, make in COPIES.items():
            copies[name].append(bin(hashes[-1] ^ image_hash(make(pixels), 10**9)).count("1"))
    print(f"bits apart, {args.photos} photos\n\n| pair | median | 99th percentile | max |")
    print("|---|---:|---:|---:|")
    for name, found in copies.items():
        print(f"| {name} | {np.median(found):g} | {np.percentile(found, 99):g} | {max(found)} |")
    h = np.array(hashes, np.uint64)
    apart = np.bitwise_count(h[:, None] ^ h[None, :])[np.triu_indices(len(h), 1)]
    print(
        f"| distinct photos ({len(apart):,} pairs; 0.1% within {np.percentile(apart, 0.1):g}) "
        f"| {np.median(apart):g} | | min {apart.min()} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
