"""Near duplicates: a 64-bit DCT perceptual hash of each image (the same photo resized,
re-compressed, slightly cropped or colour-shifted hashes within a few bits), and the grouping
of hashes within a Hamming distance through bit bands, never pairwise."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from shardpack import images

# The short side the reduced decode keeps at least: the hash reads a 32x32 thumbnail.
_HASH_SIDE = 32
# The most sorts close_hashes makes: a large --near-distance compares more candidates instead.
MAX_SORTS = 256
# The most hashes of one bucket each hash is compared with (the next in the order of the whole
# hash): flat, blank or synthetic images share most bits, and a bucket of n compared in full
# costs n^2 (6,000 hashes free in 16 bits alone: 9 s of CPU; with this bound 0.1 s).
MAX_BUCKET = 64
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R BT.601, as OpenCV's RGB2GRAY


@functools.cache
def _dct() -> np.ndarray:
    """The orthonormal DCT-II's 8 lowest-frequency rows for 32 samples (cv2.dct's scaling):
    made on first use, as only a pack that hashes for near duplicates needs it."""
    dct = np.sqrt(2 / _HASH_SIDE) * np.cos(
        np.pi * np.outer(np.arange(8), 2 * np.arange(_HASH_SIDE) + 1) / (2 * _HASH_SIDE)
    )
    dct[0] /= np.sqrt(2)
    return dct


def phash(gray: np.ndarray) -> int:
    """The 64-bit DCT hash of a grayscale image: the 8x8 lowest frequencies of its 32x32
    thumbnail (area-averaged), each bit set where a coefficient is over the median of the 63
    beside DC."""
    small = images.resize(gray, (_HASH_SIDE, _HASH_SIDE)).astype(np.float32)
    dct = _dct()
    low = (dct @ small @ dct.T).ravel()
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


def close_hashes(unique: np.ndarray, distance: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (a, b), a < b, of positions of the distinct hashes `unique` within `distance`
    bits, as an (n, 2) array; and which hashes sat in a crowded bucket (over MAX_BUCKET),
    where each was compared with its MAX_BUCKET next alone, so some of their pairs may be left
    out.

    Pigeonhole: cut the 64 bits into distance + t blocks; two hashes that close agree on t of
    them at least, so hashes are compared only where they agree on some t blocks (a bucket),
    one sort per choice of t blocks (t grows until those keys hold about log2(n) bits)."""
    unique = np.asarray(unique, np.uint64)
    found = [np.empty(0, np.int64)]  # each pair as a * n + b: one 1-D unique at the end
    crowded = np.zeros(len(unique), bool)
    for mask in _masks(distance, len(unique)):
        key = unique & mask
        order = np.argsort(key)
        ordered = key[order]
        if len(order) > MAX_BUCKET and (ordered[MAX_BUCKET:] == ordered[:-MAX_BUCKET]).any():
            _sort_crowded(order, ordered, crowded)
        alive = np.flatnonzero(ordered[1:] == ordered[:-1])  # those with a partner one on
        for offset in range(1, MAX_BUCKET + 1):
            if offset > 1:  # those whose bucket goes this far on
                alive = alive[alive < len(order) - offset]
                alive = alive[ordered[alive + offset] == ordered[alive]]
            if not len(alive):
                break
            a, b = order[alive], order[alive + offset]
            close = np.bitwise_count(unique[a] ^ unique[b]) <= distance
            low, high = np.minimum(a[close], b[close]), np.maximum(a[close], b[close])
            found.append(low.astype(np.int64) * len(unique) + high)
    codes = _distinct(np.concatenate(found))
    return np.stack(np.divmod(codes, max(1, len(unique))), axis=1), crowded


def _sort_crowded(order: np.ndarray, ordered: np.ndarray, crowded: np.ndarray) -> None:
    """Each bucket over MAX_BUCKET in the order of the whole hash (so that the next MAX_BUCKET
    of a hash are those alike in more bits), its hashes marked crowded. `order` indexes a
    sorted array: sorting positions sorts by hash."""
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    big = sizes > MAX_BUCKET
    for start, size in zip(starts[big].tolist(), sizes[big].tolist(), strict=True):
        order[start : start + size].sort()
        crowded[order[start : start + size]] = True


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort: np.unique's hashing is 100x slower on millions)."""
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def _masks(distance: int, count: int) -> list[np.uint64]:
    """The bit masks of each choice of t of the distance + t blocks (see close_hashes)."""
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


def star_groups(order: list[int], pairs: np.ndarray) -> list[list[int]]:
    """Every position of `order` in one group, each group paired with its first: positions
    taken in `order` (the one to keep first), each not yet grouped with those of its partners
    not yet grouped. A chain a-b-c is one group only where a and c are paired too: no image
    joins a group for being close to an image that is not the one kept."""
    both = np.concatenate([pairs, pairs[:, ::-1]]).reshape(-1, 2)
    both = both[np.argsort(both[:, 0], kind="stable")]
    starts = np.searchsorted(both[:, 0], order)
    ends = np.searchsorted(both[:, 0], order, side="right")
    taken: set[int] = set()
    groups = []
    for position, start, end in zip(order, starts.tolist(), ends.tolist(), strict=True):
        if position not in taken:
            group = [position, *(p for p in both[start:end, 1].tolist() if p not in taken)]
            taken.update(group)
            groups.append(group)
    return groups
