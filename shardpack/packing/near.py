"""Near duplicates: a 64-bit DCT perceptual hash of each image (the same photo resized,
re-compressed, slightly cropped or colour-shifted hashes within a few bits), and the grouping
of hashes within a Hamming distance through bit bands, never pairwise."""

from __future__ import annotations

import itertools
import math

import numpy as np

from shardpack import images

# The short side the reduced decode keeps at least: the hash reads a 32x32 thumbnail.
_HASH_SIDE = 32
# The most sorts near_pairs makes: a large --near-distance compares more candidates instead.
MAX_SORTS = 256
# The orthonormal DCT-II's 8 lowest-frequency rows for 32 samples (cv2.dct's scaling).
_DCT = np.sqrt(2 / _HASH_SIDE) * np.cos(
    np.pi * np.outer(np.arange(8), 2 * np.arange(_HASH_SIDE) + 1) / (2 * _HASH_SIDE)
)
_DCT[0] /= np.sqrt(2)
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R BT.601, as OpenCV's RGB2GRAY


def phash(gray: np.ndarray) -> int:
    """The 64-bit DCT hash of a grayscale image: the 8x8 lowest frequencies of its 32x32
    thumbnail (area-averaged), each bit set where a coefficient is over the median of the 63
    beside DC."""
    small = images.resize(gray, (_HASH_SIDE, _HASH_SIDE)).astype(np.float32)
    low = (_DCT @ small @ _DCT.T).ravel()
    return int(np.packbits(low > np.median(low[1:])).view(">u8")[0])


def image_hash(loaded: bytes | np.ndarray, max_pixels: int) -> int:
    """The hash of what a source loaded: pixels (RGB) as they are; an image file from a
    grayscale decode, reduced for a JPEG (libjpeg's 1/2..1/8 scale, keeping a short side of 32
    or more).

    Raises:
        images.BadImage: the file is not an image OpenCV decodes, or is over max_pixels.
    """
    if not isinstance(loaded, bytes):
        gray = loaded if loaded.ndim == 2 else loaded[:, :, :3].astype(np.float32) @ _LUMA
        return phash(np.round(gray).astype(np.uint8))
    info = images.probe(loaded)
    if info is None:
        raise images.BadImage("not an image (unknown format)")
    images.check_pixels(info.height, info.width, max_pixels)
    short = min(info.height, info.width)
    reduce = 1
    if info.format == "jpeg":
        reduce = next(f for f in (8, 4, 2, 1) if short // f >= _HASH_SIDE or f == 1)
    return phash(images.decode(loaded, reduce, "gray", max_pixels))


def near_pairs(hashes: np.ndarray, distance: int) -> np.ndarray:
    """Pairs (i, j), i < j, of positions whose hashes are within `distance` bits, as an (n, 2)
    array: every such pair but among equal hashes, each paired with the first alone (the same
    groups for components(), without a pair for each two of a thousand copies).

    Pigeonhole: cut the 64 bits into distance + t blocks; two hashes that close agree on t of
    them at least, so hashes are compared only where they agree on some t blocks, one sort per
    choice of t blocks (t grows until those keys hold about log2(n) bits)."""
    hashes = np.asarray(hashes, np.uint64)
    unique, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    found = set()
    for mask in _masks(distance, len(unique)):
        key = unique & mask
        order = np.argsort(key)
        ordered = key[order]
        for offset in range(1, len(order)):
            same = np.flatnonzero(ordered[offset:] == ordered[:-offset])
            if not len(same):
                break
            a, b = order[same], order[same + offset]
            close = np.bitwise_count(unique[a] ^ unique[b]) <= distance
            found.update(zip(a[close].tolist(), b[close].tolist(), strict=True))
    pairs = [_same_hash_pairs(inverse, first)]
    if found:
        pairs.append(np.sort(first[np.array(sorted(found), np.int64)], axis=1))
    return np.unique(np.concatenate(pairs), axis=0)


def _masks(distance: int, count: int) -> list[np.uint64]:
    """The bit masks of each choice of t of the distance + t blocks (see near_pairs)."""
    if distance >= 64:
        return [np.uint64(0)]
    wanted = max(16, int(np.log2(max(count, 2))) + 1)
    t = 1
    while 64 * t / (distance + t) < wanted and math.comb(distance + t + 1, t + 1) <= MAX_SORTS:
        t += 1
    k = distance + t
    cuts = [round(64 * b / k) for b in range(k + 1)]
    blocks = [((1 << (hi - lo)) - 1) << lo for lo, hi in itertools.pairwise(cuts)]
    return [np.uint64(sum(chosen)) for chosen in itertools.combinations(blocks, t)]


def _same_hash_pairs(inverse: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Each position paired with the first position of its hash (itself excluded)."""
    base = first[inverse.ravel()]
    other = np.flatnonzero(base != np.arange(len(base)))
    return np.stack([base[other], other], axis=1).astype(np.int64)


def components(count: int, pairs: np.ndarray) -> list[list[int]]:
    """The groups of two or more positions that pairs join (union-find), sorted."""
    parent = list(range(count))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs.tolist():
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for x in {int(p) for p in pairs.ravel()}:
        groups.setdefault(root(x), []).append(x)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)
