"""An image file's format named from its first bytes: what images.probe reads the header of,
and what a body fetched from a URL must begin with to be an image (storage/fetch.py)."""

from __future__ import annotations

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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
