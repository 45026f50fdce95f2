"""An image's format and declared size from its first bytes (signatures), against real files of
each format OpenCV writes."""

from __future__ import annotations

import cv2
import pytest

from shardpack import images
from shardpack.signatures import declared_size, sniff
from tests import helpers


@pytest.mark.parametrize("ext", [".jpg", ".png", ".webp", ".bmp", ".tif"])
def test_the_size_a_head_declares_is_the_probes_or_none_until_it_has_come(ext):
    """A URL's body is refused by the size its first bytes declare (storage/fetch.py): each
    head of a real file gives the size images.probe reads of the whole, or None while the
    header has not all come (never a wrong size, never an error); a TIFF's none."""
    data = cv2.imencode(ext, helpers.image(3, height=40, width=50))[1].tobytes()
    info = images.probe(data)
    assert (info.width, info.height) == (50, 40)
    heads = {declared_size(data[:n]) for n in range(len(data) + 1)}
    assert heads == ({None} if sniff(data) == "tiff" else {None, (50, 40)})
    assert declared_size(b"<html>" + data) is None
