"""images.py: sniff, header probe and structure check, decode, size arithmetic, encode."""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np
import pytest

from shardpack.images import (
    BadImage,
    ImageInfo,
    decode,
    encode,
    jpeg_upright_size,
    probe,
    reduce_factor,
    resize,
    sniff,
    target_size,
)
from tests import helpers


def _photo(height: int = 48, width: int = 64, seed: int = 0) -> np.ndarray:
    """A BGR image with structure and noise, so that a JPEG's scan is long enough to cut."""
    base = cv2.resize(helpers.image(seed), (width, height), interpolation=cv2.INTER_LINEAR)
    noise = np.random.default_rng(seed).integers(-25, 26, base.shape)
    return (base.astype(np.int16) + noise).clip(0, 255).astype(np.uint8)


def _encode(ext: str, pixels: np.ndarray, *params: int) -> bytes:
    ok, buf = cv2.imencode(ext, pixels, list(params))
    assert ok, ext
    return buf.tobytes()


def _jpeg(pixels: np.ndarray | None = None, progressive: bool = False) -> bytes:
    pixels = _photo() if pixels is None else pixels
    return _encode(".jpg", pixels, cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive))


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _palette_png(height: int, width: int, transparent: bool = False) -> bytes:
    """An 8-bit palette PNG (colour type 3), which cv2.imencode cannot write."""
    palette = bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
    rows = b"".join(b"\x00" + bytes((x + y) % 4 for x in range(width)) for y in range(height))
    chunks = [
        _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)),
        _chunk(b"PLTE", palette),
    ]
    if transparent:
        chunks.append(_chunk(b"tRNS", bytes([0, 255, 255, 128])))
    chunks += [_chunk(b"IDAT", zlib.compress(rows)), _chunk(b"IEND", b"")]
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


def _tf():
    import tensorflow as tf

    return tf


# ---- sniff ---------------------------------------------------------------------------------


SNIFF_CASES = {
    "jpeg": (lambda: _jpeg(), "jpeg"),
    "png": (lambda: _encode(".png", _photo()), "png"),
    "bmp": (lambda: _encode(".bmp", _photo()), "bmp"),
    "webp": (lambda: _encode(".webp", _photo()), "webp"),
    "tiff-II": (lambda: _encode(".tiff", _photo()), "tiff"),
    "tiff-MM": (lambda: b"MM\x00*" + bytes(12), "tiff"),
    "gif89": (lambda: b"GIF89a" + bytes(10), "gif"),
    "gif87": (lambda: b"GIF87a" + bytes(10), "gif"),
    "empty": (lambda: b"", None),
    "jpeg-2-bytes": (lambda: b"\xff\xd8", None),
    "riff-wave": (lambda: b"RIFF\x00\x00\x00\x00WAVEfmt ", None),
    "text": (lambda: b"hello, this is text", None),
    "zeros": (lambda: bytes(32), None),
}


@pytest.mark.parametrize("case", list(SNIFF_CASES))
def test_sniff(case):
    make, expected = SNIFF_CASES[case]
    assert sniff(make()) == expected


def test_probe_returns_none_for_what_is_not_an_image():
    assert probe(b"not an image") is None


def _tiff(order: str, width: int, height: int, kind: int) -> bytes:
    """A one-strip 8-bit grey TIFF written field by field: `order` "<" (II) or ">" (MM), the
    size in fields of type `kind` (3 SHORT, 4 LONG)."""
    pixels = bytes((x * 7 + y * 3) % 256 for y in range(height) for x in range(width))
    size_format = {3: "HH", 4: "I"}[kind]
    fields = [  # tag, type, count, value (SHORT values padded to the 4-byte slot)
        (256, kind, 1, width), (257, kind, 1, height), (258, 3, 1, 8), (259, 3, 1, 1),
        (262, 3, 1, 1), (273, 4, 1, 0), (277, 3, 1, 1), (278, 4, 1, height),
        (279, 4, 1, len(pixels)),
    ]  # fmt: skip
    ifd_size = 2 + 12 * len(fields) + 4
    data_at = 8 + ifd_size
    entries = b""
    for tag, typ, count, value in fields:
        value = data_at if tag == 273 else value
        slot = struct.pack(
            order + ("HH" if typ == 3 else "I"), *((value, 0) if typ == 3 else (value,))
        )
        if tag in (256, 257):
            slot = struct.pack(order + size_format, *((value, 0) if kind == 3 else (value,)))
        entries += struct.pack(order + "HHI", tag, typ, count) + slot
    head = (b"II*\x00" if order == "<" else b"MM\x00*") + struct.pack(order + "I", 8)
    ifd = struct.pack(order + "H", len(fields)) + entries + struct.pack(order + "I", 0)
    return head + ifd + pixels


def _field(order: str, tag: int, kind: int, count: int) -> bytes:
    """The start of an IFD entry, to find and change it in a TIFF."""
    return struct.pack(order + "HHI", tag, kind, count)


@pytest.mark.parametrize("order", ["<", ">"], ids=["II", "MM"])
@pytest.mark.parametrize("kind", [3, 4], ids=["SHORT", "LONG"])
def test_probe_reads_the_size_of_a_tiff_from_its_ifd(order, kind):
    data = _tiff(order, 7, 5, kind)
    assert sniff(data) == "tiff"
    assert probe(data) == ImageInfo("tiff", 5, 7, 3, tf_readable=False)
    assert decode(data).shape == (5, 7, 3)  # the file is real: OpenCV reads the same size


def test_probe_reads_the_size_of_a_tiff_opencv_wrote():
    assert probe(_encode(".tiff", _photo(30, 50))) == ImageInfo("tiff", 30, 50, 3, False)


@pytest.mark.parametrize(
    "data, match",
    [
        (_tiff("<", 7, 5, 3)[:20], "truncated TIFF"),
        (b"II*\x00" + struct.pack("<I", 10**6), "truncated TIFF"),  # IFD past the end
        (_tiff("<", 7, 5, 3).replace(_field("<", 256, 3, 1), _field("<", 256, 3, 2)), "count 2"),
        (_tiff(">", 7, 5, 4).replace(_field(">", 257, 4, 1), _field(">", 257, 5, 1)),
         "field type 5"),
        (_tiff("<", 7, 5, 3).replace(struct.pack("<HH", 257, 3), struct.pack("<HH", 999, 3)),
         "no ImageWidth and ImageLength"),
        (_tiff("<", 0, 5, 3), "0x5 pixels"),
    ],
    ids=["cut", "ifd-past-end", "count", "type", "no-length", "zero-width"],
)  # fmt: skip
def test_malformed_tiff_headers_are_bad_image(data, match):
    with pytest.raises(BadImage, match=match):
        probe(data)


def test_decode_refuses_a_result_over_max_pixels():
    data = _encode(".png", _photo(30, 50))
    assert decode(data, max_pixels=1500).shape == (30, 50, 3)
    with pytest.raises(BadImage, match="50x30 pixels is over --max-pixels 1499"):
        decode(data, max_pixels=1499)


@pytest.mark.parametrize("ext, params", [(".bmp", []), (".webp", [cv2.IMWRITE_WEBP_QUALITY, 80]),
                                         (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101])])  # fmt: skip
def test_probe_reads_the_size_of_bmp_and_webp_for_the_pixel_limit(ext, params):
    pixels = _photo()
    info = probe(_encode(ext, pixels, *params))
    assert (info.height, info.width) == pixels.shape[:2] and not info.tf_readable


def test_probe_reads_the_size_of_a_gif():
    header = b"GIF89a" + (300).to_bytes(2, "little") + (200).to_bytes(2, "little") + b"\x00" * 7
    info = probe(header)
    assert (info.width, info.height, info.format) == (300, 200, "gif")


# ---- probe: real files ---------------------------------------------------------------------


def _frame_markers(data: bytes) -> set[int]:
    return {
        data[i + 1] for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] in (0xC0, 0xC2)
    }


@pytest.mark.parametrize(
    ("data", "channels", "frame"),
    [
        (_jpeg(_photo(24, 32)), 3, 0xC0),
        (_jpeg(_photo(24, 32), progressive=True), 3, 0xC2),
        (_jpeg(cv2.cvtColor(_photo(24, 32), cv2.COLOR_BGR2GRAY)), 1, 0xC0),
    ],
    ids=["baseline", "progressive", "grayscale"],
)
@pytest.mark.heavy
def test_probe_jpeg(data, channels, frame):
    assert _frame_markers(data) == {frame}  # the fixture is the kind of JPEG it claims to be
    assert probe(data) == ImageInfo("jpeg", 24, 32, channels, tf_readable=True, orientation=1)
    assert _tf().io.decode_jpeg(data, channels=0).shape == (24, 32, channels)


PNGS = {
    "rgb": (lambda: _encode(".png", _photo(24, 32)), 3),
    "rgba": (
        lambda: _encode(".png", np.dstack([_photo(24, 32), np.full((24, 32), 7, np.uint8)])),
        4,
    ),
    "gray": (lambda: _encode(".png", _photo(24, 32)[..., 0]), 1),
    "rgb16": (lambda: _encode(".png", _photo(24, 32).astype(np.uint16) * 257), 3),
    "gray16": (lambda: _encode(".png", _photo(24, 32)[..., 1].astype(np.uint16) * 257), 1),
    "palette": (lambda: _palette_png(24, 32), 3),
    "palette_trns": (lambda: _palette_png(24, 32, transparent=True), 4),
}


@pytest.mark.heavy
@pytest.mark.parametrize("case", list(PNGS))
def test_probe_png(case):
    make, channels = PNGS[case]
    data = make()
    assert probe(data) == ImageInfo("png", 24, 32, channels)
    # TensorFlow's native channel count for the same file agrees with the header's.
    assert _tf().io.decode_png(data, channels=0).shape == (24, 32, channels)


def test_probe_png_16_bit_fixture_really_is_16_bit():
    data = PNGS["rgb16"][0]()
    depth, color = data[24], data[25]  # IHDR: 8 signature + 8 chunk head + 8 width/height
    assert (depth, color) == (16, 2)


def test_probe_gray_png_with_trns_has_alpha():
    data = _encode(".png", _photo(24, 32)[..., 0])
    iend = data.rindex(b"IEND") - 4
    data = data[:iend] + _chunk(b"tRNS", b"\x00\x07") + data[iend:]
    assert probe(data).channels == 2


# ---- probe: damaged files ------------------------------------------------------------------


def _scan_start(data: bytes) -> int:
    sos = data.index(b"\xff\xda")
    return sos + 2 + struct.unpack_from(">H", data, sos + 2)[0]


@pytest.mark.heavy
def test_truncated_jpeg_is_bad_image_and_tensorflow_refuses_it():
    data = _jpeg()
    start = _scan_start(data)
    assert len(data) - start > 1000  # a long scan, so the cut lands in the pixels
    cut = data[: (start + len(data)) // 2]
    with pytest.raises(BadImage, match="no end-of-image"):
        probe(cut)
    tf = _tf()
    assert tf.io.decode_jpeg(data).shape == (48, 64, 3)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_jpeg(cut)
    # Note: OpenCV 4.x decoded such a file with only a warning, which is why the header check
    # exists; OpenCV 5 refuses it too, so decode() (check="decode") also reports it.
    with pytest.raises(BadImage):
        decode(cut)


@pytest.mark.parametrize("drop", [1, 2, 50])
def test_jpeg_without_its_end_marker_is_bad_image(drop):
    with pytest.raises(BadImage, match="no end-of-image"):
        probe(_jpeg()[:-drop])


def test_progressive_jpeg_cut_after_some_scans_is_bad_image():
    data = _jpeg(progressive=True)
    scans = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    assert len(scans) > 3
    with pytest.raises(BadImage, match="no end-of-image"):
        probe(data[: scans[3]])


@pytest.mark.parametrize("cut", [3, 10, 40, 150])
def test_jpeg_cut_in_its_header_is_bad_image(cut):
    data = _jpeg()
    assert cut < _scan_start(data)
    with pytest.raises(BadImage, match="truncated JPEG"):
        probe(data[:cut])


def _with_exif_eoi(data: bytes) -> bytes:
    """Insert, after SOI, an APP1 'Exif' segment whose body holds FF D9 (as thumbnails do)."""
    body = b"Exif\x00\x00" + b"MM\x00*" + b"\xff\xd8\xff\xd9" * 4 + b"thumbnail\xff\xd9"
    app1 = b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body
    return data[:2] + app1 + data[2:]


@pytest.mark.heavy
def test_exif_segment_holding_ff_d9_does_not_hide_a_truncated_scan():
    data = _with_exif_eoi(_jpeg())
    assert probe(data) == ImageInfo("jpeg", 48, 64, 3, orientation=1)
    assert _tf().io.decode_jpeg(data).shape == (48, 64, 3)  # the fixture is a valid JPEG
    start = _scan_start(data)
    assert data.find(b"\xff\xd9") < start  # an FF D9 sits before the scan...
    cut = data[: (start + len(data)) // 2]
    with pytest.raises(BadImage, match="no end-of-image"):  # ...and is not taken for the end
        probe(cut)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff\xd8\xff\xd9" + bytes(4), "ends before any image data"),
        (b"\xff\xd8\xff\xda\x00\x02" + b"\x00" * 8 + b"\xff\xd9", "before any frame header"),
        (
            b"\xff\xd8\xff\xc0\x00\x0b\x08\x00\x00\x00\x10\x01\x01\x11\x00" + bytes(4),
            "0 pixels|16x0",
        ),
        (b"\xff\xd8\xff\xc0\x00\x05\x08\x00\x10" + bytes(4), "short frame header"),
        (b"\xff\xd8\xff\xe0\x00\x04\x00\x00" + bytes(4), "no marker at byte 8"),
        (b"\xff\xd8\xff\xe0\x00\x01\x00\x00", "header cut short"),
    ],
    ids=["soi-eoi", "scan-before-frame", "zero-height", "short-frame", "no-marker", "bad-length"],
)
def test_malformed_jpeg_headers_are_bad_image(data, match):
    with pytest.raises(BadImage, match=match):
        probe(data)


@pytest.mark.parametrize("keep", [8, 20, 33, -12, -1])
def test_truncated_png_is_bad_image(keep):
    data = _encode(".png", _photo())
    with pytest.raises(BadImage, match="truncated PNG"):
        probe(data[:keep])


def test_png_cut_in_idat_is_bad_image():
    data = _encode(".png", _photo())
    idat = data.index(b"IDAT")
    with pytest.raises(BadImage, match=r"chunk IDAT cut short") as caught:
        probe(data[: idat + 100])
    assert "b'" not in str(caught.value)  # no Python repr in a message


def test_png_chunk_names_are_printed_escaped():
    kind = b"I\nD\xff"
    data = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 100) + kind + b"\x00" * 14
    with pytest.raises(BadImage, match=r"chunk I\\x0aD\\xff cut short"):
        probe(data)


def test_png_with_a_flipped_pixel_byte_is_bad_image():
    data = bytearray(_encode(".png", _photo()))
    data[data.index(b"IDAT") + 50] ^= 0x01
    with pytest.raises(BadImage, match="CRC mismatch"):
        probe(bytes(data))


def test_png_with_zero_width_is_bad_image():
    head = _chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 5, 8, 2, 0, 0, 0))
    data = b"\x89PNG\r\n\x1a\n" + head + _chunk(b"IEND", b"")
    with pytest.raises(BadImage, match="invalid IHDR"):
        probe(data)


def test_png_without_ihdr_is_bad_image():
    with pytest.raises(BadImage, match="no IHDR"):
        probe(b"\x89PNG\r\n\x1a\n" + _chunk(b"IEND", b""))


# ---- decode --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        _jpeg(cv2.cvtColor(_photo(), cv2.COLOR_BGR2GRAY)),
        _encode(".png", np.dstack([_photo(), np.zeros((48, 64), np.uint8)])),
        _encode(".png", _photo().astype(np.uint16) * 257),
        _palette_png(48, 64, transparent=True),
        _encode(".webp", _photo()),
        _encode(".bmp", _photo()),
    ],
    ids=["gray-jpeg", "rgba-png", "png16", "palette", "webp", "bmp"],
)
def test_decode_gives_uint8_three_channels(data):
    pixels = decode(data)
    assert pixels.shape == (48, 64, 3)
    assert pixels.dtype == np.uint8


# 16-bit samples where their high byte (v >> 8) and a rounding (v / 257) part, and the ends.
SAMPLES16 = np.array([[0, 127, 128, 255, 256, 383, 384, 32767, 32768, 65280, 65407, 65535]],
                     np.uint16)  # fmt: skip


def _pillow_rgb(data: bytes) -> np.ndarray:
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_16_bit_samples_become_their_high_byte_as_pillow_reads_16_bit_colour():
    """The rule docs/packing.md states: v >> 8 (not v / 257 rounded), in every channel order;
    Pillow reads a 16-bit colour PNG so, and clamps a 16-bit grey one (mode I;16) at 255."""
    high = (SAMPLES16 >> 8).astype(np.uint8)
    colour = _encode(".png", np.dstack([SAMPLES16] * 3))
    grey = _encode(".png", SAMPLES16)
    for data in (colour, grey):
        for order in ("bgr", "rgb"):
            np.testing.assert_array_equal(decode(data, order=order), np.dstack([high] * 3))
        np.testing.assert_array_equal(decode(data, order="gray"), high)
    np.testing.assert_array_equal(_pillow_rgb(colour), np.dstack([high] * 3))
    np.testing.assert_array_equal(_pillow_rgb(grey)[..., 0], np.minimum(SAMPLES16, 255))


@pytest.mark.heavy
def test_16_bit_samples_become_their_high_byte_as_tensorflow_decodes_them():
    """What a record kept 16-bit (--encode keep) gives a TensorFlow reader is what a re-encode
    stores."""
    for data in (_encode(".png", np.dstack([SAMPLES16] * 3)), _encode(".png", SAMPLES16)):
        tf_pixels = _tf().io.decode_image(data, channels=3, expand_animations=False).numpy()
        np.testing.assert_array_equal(tf_pixels, decode(data, order="rgb"))


@pytest.mark.parametrize(
    ("reduce", "shape"), [(1, (48, 64)), (2, (24, 32)), (4, (12, 16)), (8, (6, 8))]
)
def test_decode_reduced_jpeg(reduce, shape):
    assert decode(_jpeg(), reduce=reduce).shape == (*shape, 3)


@pytest.mark.parametrize("data", [b"", b"garbage", b"\xff\xd8\xff", bytes(100)])
def test_decode_garbage_is_bad_image(data):
    with pytest.raises(BadImage, match="cannot decode"):
        decode(data)


def _app1(body: bytes) -> bytes:
    return b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body


def _exif(
    orientation: int, order: str = "<", name: bytes = b"Exif\x00\x00", magic: int = 42
) -> bytes:
    """An APP1 segment of EXIF whose first IFD holds one tag: Orientation (a SHORT)."""
    tiff = (b"II" if order == "<" else b"MM") + struct.pack(order + "HIH", magic, 8, 1)
    tiff += struct.pack(order + "HHIHHI", 0x0112, 3, 1, orientation, 0, 0)
    return _app1(name + tiff)


def _with_segments(jpeg: bytes, *segments: bytes) -> bytes:
    """The JPEG with these segments put right after its start-of-image marker."""
    return jpeg[:2] + b"".join(segments) + jpeg[2:]


def test_decode_applies_exif_orientation_unless_told_not_to():
    plain = _jpeg()  # 48 high, 64 wide
    data = _with_segments(plain, _exif(6))  # stored on its side: upright it is 64 high
    assert decode(data).shape == (64, 48, 3)
    assert decode(data, reduce=2).shape == (32, 24, 3)  # libjpeg scales, then OpenCV turns
    assert np.array_equal(decode(data), np.rot90(decode(plain), k=-1))  # 6: a quarter clockwise
    assert np.array_equal(decode(data, orient=False), decode(plain))  # as TensorFlow reads it
    assert decode(data, order="rgb", orient=False).shape == (48, 64, 3)


_XMP = _app1(b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta/>")


@pytest.mark.parametrize(
    "segments",
    [(_exif(o),) for o in range(1, 9)]
    + [
        (_exif(6, ">"),),
        (_exif(8, ">"),),
        (_XMP, _exif(6)),  # OpenCV finds the EXIF past another APP1
        (_exif(6, name=b"Nope\x00\x00"),),  # not EXIF: no orientation
        (_app1(b"Exif\x00\x00II*\x00" + struct.pack("<IH", 8, 1)),),  # no room for its entry
        (_exif(9),),  # not an orientation
        # a TIFF header of another number (BigTIFF's): OpenCV reads no orientation, and a kept
        # JPEG's boxes were turned a quarter onto pixels that every reader decodes unturned
        (_exif(6, magic=43),),
        (_exif(8, ">", magic=0),),
        (),
    ],
)
def test_jpeg_upright_size_is_the_size_opencv_decodes(segments):
    data = _with_segments(_jpeg(), *segments)
    assert jpeg_upright_size(data, probe(data)) == decode(data).shape[:2]
    assert decode(data, orient=False).shape[:2] == (48, 64)  # the header's, whatever the tag


@pytest.mark.parametrize("where", ["before", "after"])  # the eXIf chunk before IDAT, or after
def test_a_png_orientation_is_probed_where_opencv_applies_it(where: str):
    plain = _encode(".png", _photo())  # 48 high, 64 wide
    tiff = _exif(6)[10:]  # the segment's TIFF block: what an eXIf chunk holds
    at = plain.index(b"IDAT") - 4 if where == "before" else plain.index(b"IEND") - 4
    data = plain[:at] + _chunk(b"eXIf", tiff) + plain[at:]
    assert decode(data).shape == (64, 48, 3)  # OpenCV turns it
    assert probe(data).orientation == 6 and probe(plain).orientation is None


# ---- size arithmetic -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("height", "width", "max_side", "size", "expected"),
    [
        (100, 300, None, None, None),
        (100, 300, 300, None, None),  # already fits
        (100, 300, 400, None, None),  # never enlarges
        (100, 300, 150, None, (50, 150)),
        (300, 100, 150, None, (150, 50)),
        (375, 500, 250, None, (188, 250)),  # 187.5 rounds to even
        (1, 1000, 10, None, (1, 10)),  # never below one pixel
        (100, 300, None, (300, 100), None),  # --resize WxH equal to the size
        (100, 300, None, (224, 112), (112, 224)),  # (width, height) in, (height, width) out
        (10, 10, None, (64, 32), (32, 64)),  # resize also enlarges
    ],
)
def test_target_size(height, width, max_side, size, expected):
    assert target_size(height, width, max_side, size) == expected


@pytest.mark.parametrize(
    ("height", "width", "target", "factor"),
    [
        (480, 640, (60, 80), 8),
        (480, 640, (61, 80), 4),
        (480, 640, (120, 160), 4),
        (480, 640, (121, 160), 2),
        (480, 640, (240, 321), 1),
        (480, 640, (480, 640), 1),
        (375, 500, (46, 62), 8),  # 375 // 8 = 46, 500 // 8 = 62
        (375, 500, (47, 62), 4),
    ],
)
def test_reduce_factor(height, width, target, factor):
    assert reduce_factor(height, width, target) == factor
    # The factor's decode is never smaller than the target.
    assert height // factor >= target[0] and width // factor >= target[1]


def test_reduced_decode_is_at_least_the_target():
    data = _jpeg(_photo(96, 128))
    target = target_size(96, 128, 20, None)
    factor = reduce_factor(96, 128, target)
    assert factor == 4
    pixels = decode(data, reduce=factor)
    assert pixels.shape[0] >= target[0] and pixels.shape[1] >= target[1]
    assert resize(pixels, target).shape[:2] == target


@pytest.mark.parametrize("size", [(24, 32), (100, 30), (48, 64), (1, 1)])
def test_resize_shape(size):
    pixels = _photo()
    out = resize(pixels, size)
    assert out.shape == (*size, 3)
    if size == (48, 64):
        assert out is pixels


def test_resize_shrink_averages():
    pixels = np.zeros((4, 4, 3), np.uint8)
    pixels[:, :2] = 200  # left half bright
    assert resize(pixels, (1, 2))[0, :, 0].tolist() == [200, 0]
    assert resize(pixels, (1, 1))[0, 0, 0] == 100


@pytest.mark.parametrize(
    ("shape", "size"),
    [((375, 375, 3), (256, 256)), ((375, 500, 3), (256, 341)), ((300, 400, 4), (97, 131)),
     ((61, 59), (40, 17)), ((375, 500, 3), (375, 333))],
)  # fmt: skip
def test_a_fractional_shrink_is_opencv_s_own_area_averaging_byte_for_byte(shape, size):
    """resize sums a fractional shrink in floats (faster): its bytes are still those of
    cv2.resize's INTER_AREA on the 8-bit pixels, views (a cut window) and grey included."""
    rng = np.random.default_rng(len(shape) + size[1])
    noise = rng.integers(0, 256, (shape[0], shape[1] + 7, *shape[2:]), dtype=np.uint8)
    for pixels in (noise, cv2.GaussianBlur(noise, (5, 5), 0)):
        window = pixels[:, 3 : 3 + shape[1]]  # a view, as center-crop resizes it
        expected = cv2.resize(window, size[::-1], interpolation=cv2.INTER_AREA)
        got = resize(window, size)
        assert got.dtype == np.uint8 and np.array_equal(got, expected)


# ---- encode --------------------------------------------------------------------------------


def test_raw_is_rgb_bytes():
    pixels = np.zeros((2, 3, 3), np.uint8)
    pixels[0, 0] = (255, 0, 0)  # blue in BGR
    pixels[1, 2] = (0, 0, 200)  # red in BGR
    raw = encode(pixels, "raw")
    assert len(raw) == 2 * 3 * 3
    rgb = np.frombuffer(raw, np.uint8).reshape(2, 3, 3)
    assert rgb[0, 0].tolist() == [0, 0, 255]
    assert rgb[1, 2].tolist() == [200, 0, 0]
    assert raw == pixels[..., ::-1].tobytes()


def test_png_round_trip_is_exact():
    pixels = _photo()
    data = encode(pixels, "png")
    assert sniff(data) == "png"
    assert probe(data) == ImageInfo("png", 48, 64, 3)
    assert np.array_equal(decode(data), pixels)


@pytest.mark.parametrize(("fmt", "tolerance"), [("jpeg", 12), ("webp", 12)])
def test_lossy_round_trip_is_close(fmt, tolerance):
    pixels = _photo()
    data = encode(pixels, fmt, quality=95)
    assert sniff(data) == fmt
    back = decode(data)
    assert back.shape == pixels.shape
    assert np.abs(back.astype(int) - pixels.astype(int)).mean() < tolerance


def test_jpeg_quality_changes_the_bytes():
    pixels = _photo()
    assert len(encode(pixels, "jpeg", quality=10)) < len(encode(pixels, "jpeg", quality=95))


@pytest.mark.heavy
@pytest.mark.parametrize("fmt", ["jpeg", "png", "webp"])
def test_tensorflow_decodes_encoded_images_as_rgb(fmt):
    tf = _tf()
    pixels = _photo()
    data = encode(pixels, fmt)
    if fmt == "webp":
        rgb = tf.io.decode_webp(data, channels=3)[0].numpy()
    else:
        rgb = tf.io.decode_image(data, channels=3, expand_animations=False).numpy()
    assert rgb.shape == (48, 64, 3)
    expected = pixels[..., ::-1].astype(int)  # TensorFlow gives RGB
    assert np.abs(rgb.astype(int) - expected).mean() < 12


@pytest.mark.slow
def test_a_ctrl_c_as_opencv_loads_stops_the_caller():
    # OpenCV was imported at the first decode, so inside a pack's first shard: a Ctrl-C that
    # came then was swallowed by OpenCV's loader, and the pack went on to the end, exit 0
    run = helpers.ctrl_c_as_opencv_loads(
        "from shardpack import images\ntry:\n    images._opencv()\nexcept KeyboardInterrupt:\n"
        "    sys.exit(130)\nprint('went on')"
    )
    assert (run.returncode, run.stdout) == (130, ""), run.stderr
