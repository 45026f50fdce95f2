"""An image file's format named from its first bytes, and the pixel size its header declares
there: what images.probe reads the header of, and what a body fetched from a URL must begin
with to be an image, refused as soon as its header is over --max-pixels (storage/fetch.py)."""

from __future__ import annotations

import struct

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG frame markers (start of frame, any coding): the frame header holds the image's size.
JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# What comes after 0xFF with no length behind it: a fill byte (0xFF), TEM, RST0-7, SOI, EOI.
JPEG_NO_LENGTH = frozenset({0xFF, 0x01, *range(0xD0, 0xDA)})
_JPEG_SCAN = 0xDA  # start of scan: the entropy-coded data follows, no header after it
# How a refusal for size reads: --on-error fail's line then says to raise the limit instead.
OVER_MAX_PIXELS = "is over --max-pixels"


def sniff(data: bytes) -> str | None:
    """Name the format from the first bytes: jpeg, png, gif, bmp, webp, tiff, or None."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == _PNG_SIGNATURE:
        return "png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data[:2] == b"BM":
        return "bmp"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    return None


def too_many_pixels(width: int, height: int, max_pixels: int) -> str | None:
    """Why an image of this size is refused (it holds more than `max_pixels` pixels), else
    None."""
    if width * height > max_pixels:
        return f"{width}x{height} pixels {OVER_MAX_PIXELS} {max_pixels}"
    return None


def declared_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) the header among an image's first bytes declares; None where they do not
    hold it yet, where it is malformed (images.probe says how, once it is all read), for bytes
    of no format sniff names, and for a TIFF (its size may sit anywhere in the file)."""
    fmt = sniff(head)
    try:
        if fmt == "jpeg":
            return _jpeg_frame_size(head)
        if fmt == "png":  # IHDR comes first
            return struct.unpack_from(">II", head, 16) if head[12:16] == b"IHDR" else None
        if fmt in ("bmp", "gif", "webp"):
            return fixed_size(fmt, head)
    except struct.error:  # cut short
        return None
    return None


def fixed_size(fmt: str, data: bytes) -> tuple[int, int] | None:
    """(width, height) from a BMP, GIF or WebP header, at its fixed place; None for a WebP
    whose first chunk is none of VP8X, VP8L, VP8.

    Raises:
        struct.error: the data end before the size.
    """
    if fmt == "bmp":
        if struct.unpack_from("<I", data, 14)[0] == 12:  # OS/2 core header
            return struct.unpack_from("<HH", data, 18)
        width, height = struct.unpack_from("<ii", data, 18)
        return abs(width), abs(height)  # a negative height means top-down rows
    if fmt == "gif":
        return struct.unpack_from("<HH", data, 6)
    chunk = data[12:16]
    if chunk == b"VP8X":  # each side less one, in 24 bits
        w_low, w_high, h_low, h_high = struct.unpack_from("<HBHB", data, 24)
        return (w_low | w_high << 16) + 1, (h_low | h_high << 16) + 1
    if chunk == b"VP8L":
        bits = struct.unpack_from("<I", data, 21)[0]
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        w, h = struct.unpack_from("<HH", data, 26)
        return w & 0x3FFF, h & 0x3FFF
    return None


def _jpeg_frame_size(head: bytes) -> tuple[int, int] | None:
    """A JPEG's frame size, its segments stepped over up to the frame header; None before it
    has come (or where the scan starts first, or a byte is no marker)."""
    pos = 2
    while pos + 9 <= len(head):
        if head[pos] != 0xFF:
            return None
        marker = head[pos + 1]
        if marker in JPEG_NO_LENGTH:
            pos += 1 if marker == 0xFF else 2
        elif marker in JPEG_FRAMES:
            height, width = struct.unpack_from(">HH", head, pos + 5)
            return width, height
        elif marker == _JPEG_SCAN:
            return None
        else:
            pos += 2 + struct.unpack_from(">H", head, pos + 2)[0]
    return None
