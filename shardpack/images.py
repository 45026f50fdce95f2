"""One image: sniff its format, probe and check its header, decode, resize and encode.

Pixels are uint8 HxWx3 in the channel order the caller names: "bgr" as OpenCV's encoders
want it, "rgb" as raw records store it. Decoding straight into the order the output needs
means no colour swap on the way.
"""

from __future__ import annotations

import functools
import os
import struct
import tempfile
import threading
import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from shardpack.options import DEFAULT_MAX_PIXELS
from shardpack.signatures import JPEG_FRAMES, JPEG_NO_LENGTH, fixed_size, sniff, too_many_pixels
from shardpack.stops import stops_held

# JPEG frame types TensorFlow's decoder reads: baseline, extended and progressive Huffman.
_TF_JPEG_FRAMES = frozenset({0xC0, 0xC1, 0xC2})
# Bytes at the end of a JPEG searched first for its end marker (cameras may pad after it).
_EOI_TAIL = 4096
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
_ENCODERS = {  # extension, and the name of OpenCV's quality flag
    "jpeg": (".jpg", "IMWRITE_JPEG_QUALITY"),
    "png": (".png", None),
    "webp": (".webp", "IMWRITE_WEBP_QUALITY"),
}
# libjpeg can decode at 1/2, 1/4 or 1/8 scale for a fraction of the cost of a full decode.
_REDUCED = {8: "IMREAD_REDUCED_COLOR_8", 4: "IMREAD_REDUCED_COLOR_4",
            2: "IMREAD_REDUCED_COLOR_2", 1: "IMREAD_COLOR"}  # fmt: skip
# The most bytes one pixel takes in any format read here: 16-bit RGBA stored uncompressed (TIFF,
# PNG's worst case, BMP); JPEG's worst case is under 4 bytes for a 3-channel pixel.
MAX_BYTES_PER_PIXEL = 8
# Room for what a file carries besides its first image: EXIF, ICC profiles, XMP, the later
# frames of an animated GIF or WebP, a multi-page TIFF's other pages.
MAX_EXTRA_BYTES = 64 * 2**20
# TIFF tags of the first image's size, and the field types that may hold them.
_TIFF_WIDTH, _TIFF_LENGTH = 256, 257
_TIFF_TYPES = {3: "H", 4: "I"}  # SHORT, LONG
# The EXIF Orientation tag, and its values that turn the image a quarter (or transpose it):
# decoding with the orientation applied swaps their width and height.
_ORIENTATION = 0x0112
_EXIF_NAME = b"Exif\x00\x00"
QUARTER_TURNS = frozenset({5, 6, 7, 8})
# What libjpeg prints when the compressed data is damaged; OpenCV decodes such a file anyway,
# grey or smeared where the damage is, so these make the image bad.
_CORRUPT = ("Corrupt JPEG data", "Premature end of JPEG file")
# The most of a decoder's messages kept for a skip reason.
_MESSAGE_BYTES = 4096


@functools.cache
def _opencv():
    """OpenCV, imported on first use: a passthrough (--encode keep) never decodes or encodes,
    and the import is ~0.06 s of every start (python -X importtime). Set up once a process:
    one thread (there is a worker per core already, and OpenCV's own threads would
    oversubscribe them), and its own warnings ("[ WARN:0@0.2] global grfmt_tiff.cpp ...") kept
    off stderr, since what went wrong reaches the user as the skip reason. Imported with
    Ctrl-C held off: its loader swallows one that arrives inside it, and the run went on."""
    with stops_held():
        import cv2

    cv2.setNumThreads(1)
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    return cv2


class BadImage(ValueError):
    """The bytes are not a usable image; the message says why in a few words."""


class ImageInfo(NamedTuple):
    """What a header says: format, size and channels, and whether TensorFlow decodes it as is.

    A named tuple, not a frozen dataclass: every record's probe makes one, and a frozen
    dataclass's __init__ sets each field through object.__setattr__ (benchmarks/README.md,
    "Measurements behind the code").
    """

    format: str
    height: int
    width: int
    channels: int
    tf_readable: bool = True
    # the EXIF orientation of a JPEG (1: none) or of a PNG's eXIf chunk; other images: None
    orientation: int | None = None


def max_file_bytes(max_pixels: int) -> int:
    """The largest file that can hold an image of at most max_pixels pixels: a larger one is
    refused before it is read whole."""
    return max_pixels * MAX_BYTES_PER_PIXEL + MAX_EXTRA_BYTES


def probe(data: bytes) -> ImageInfo | None:
    """Read size and channels from the header of any format sniff names.

    For JPEG and PNG the check walks every segment or chunk without decoding pixels, so a
    file cut short (which TensorFlow refuses at training time, and which OpenCV 4 decodes with
    only a warning) is caught here without the cost of a decode. For the others the size alone
    is read: enough to refuse a decompression bomb before decoding it.

    Returns:
        The header's facts, or None if sniff names no format.

    Raises:
        BadImage: the file is truncated or its header is malformed.
    """
    fmt = sniff(data)
    if fmt == "jpeg":
        return _probe_jpeg(data)
    if fmt == "png":
        return _probe_png(data)
    if fmt is None:
        return None
    width, height = _other_size(fmt, data)
    if not width or not height:
        raise BadImage(f"corrupt {fmt.upper()}: {width}x{height} pixels")
    return ImageInfo(fmt, height, width, 3, tf_readable=False)


def _other_size(fmt: str, data: bytes) -> tuple[int, int]:
    """(width, height) from a BMP, GIF, WebP or TIFF header."""
    try:
        size = _tiff_size(data) if fmt == "tiff" else fixed_size(fmt, data)
    except struct.error:
        raise BadImage(f"truncated {fmt.upper()} (header cut short)") from None
    if size is None:
        raise BadImage(f"corrupt WEBP: unknown first chunk {_printable(data[12:16])}")
    return size


def _tiff_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a TIFF's first image (the one decoded), from its first IFD."""
    order = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack_from(order + "I", data, 4)
    (entries,) = struct.unpack_from(order + "H", data, ifd)  # at most 65,535: a bounded walk
    size: dict[int, int] = {}
    for pos in range(ifd + 2, ifd + 2 + 12 * entries, 12):
        tag, kind, count = struct.unpack_from(order + "HHI", data, pos)
        if tag in (_TIFF_WIDTH, _TIFF_LENGTH):
            if kind not in _TIFF_TYPES or count != 1:
                raise BadImage(f"corrupt TIFF: image size of field type {kind}, count {count}")
            (size[tag],) = struct.unpack_from(order + _TIFF_TYPES[kind], data, pos + 8)
    if len(size) < 2:
        raise BadImage("corrupt TIFF: no ImageWidth and ImageLength in its first IFD")
    return size[_TIFF_WIDTH], size[_TIFF_LENGTH]


def _printable(name: bytes) -> str:
    """A chunk or marker name for a message: printable ASCII kept, other bytes as \\xNN."""
    return "".join(chr(b) if 32 < b < 127 and b != 92 else f"\\x{b:02x}" for b in name)


# A JPEG segment's head: 0xFF and the marker (as one number), and for most markers the segment's
# length. One unpack for all three: a small JPEG has ~9 segments, and the probe is 10% of its cost.
_SEGMENT = struct.Struct(">HH").unpack_from
# The heads of segments with a length, and of those among them the probe reads (a frame, EXIF,
# the scan's start): a photo's other segments (tables, its JFIF header: ~7 of its ~9) are
# stepped over after two set tests, not five tests.
_WITH_LENGTH = frozenset(0xFF00 | m for m in range(256) if m not in JPEG_NO_LENGTH)
_READ = frozenset(0xFF00 | m for m in (*JPEG_FRAMES, 0xE1, 0xDA))


def _probe_jpeg(data: bytes) -> ImageInfo:
    pos, frame, size, orientation = 2, None, len(data), None
    while True:
        try:
            head, length = _SEGMENT(data, pos)
        except struct.error:  # under 4 bytes left: the loop's test, paid once, not a segment
            break
        if head not in _WITH_LENGTH:  # rare
            if head >> 8 != 0xFF:
                raise BadImage(f"corrupt JPEG: no marker at byte {pos}")
            if head == 0xFFD9:
                raise BadImage("corrupt JPEG: ends before any image data")
            pos += 1 if head == 0xFFFF else 2  # a fill byte before a marker, or a marker alone
            continue
        end = pos + 2 + length
        if length < 2 or end > size:
            raise BadImage("truncated JPEG (header cut short)")
        if head not in _READ:
            pos = end
            continue
        marker = head & 0xFF
        if marker in JPEG_FRAMES:
            if length < 8:
                raise BadImage("corrupt JPEG: short frame header")
            precision, height, width, channels = struct.unpack_from(">BHHB", data, pos + 4)
            if not height or not width:
                raise BadImage(f"corrupt JPEG: frame of {width}x{height} pixels")
            readable = marker in _TF_JPEG_FRAMES and channels in (1, 3) and precision == 8
            frame = (height, width, channels, readable)
        elif marker == 0xE1 and orientation is None and data[pos + 4 : pos + 10] == _EXIF_NAME:
            orientation = _exif_orientation(data[pos + 10 : end])  # the first EXIF, as OpenCV
        elif marker == 0xDA:  # start of scan: the entropy-coded data follows
            if frame is None:
                raise BadImage("corrupt JPEG: image data before any frame header")
            # Entropy-coded bytes stuff every 0xFF with 0x00, so FF D9 can only be the end marker.
            # It is almost always in the last bytes: look there first, not through the whole scan.
            tail = max(end, size - _EOI_TAIL)
            if data.rfind(b"\xff\xd9", tail) < 0 and data.find(b"\xff\xd9", end, tail + 2) < 0:
                raise BadImage("truncated JPEG (no end-of-image marker)")
            return ImageInfo("jpeg", *frame, orientation or 1)
        pos = end
    raise BadImage("truncated JPEG (no image data)")


def _probe_png(data: bytes) -> ImageInfo:
    pos, size, info, transparent, orientation = 8, len(data), None, False, None
    while pos + 12 <= size:
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if end > size:
            raise BadImage(f"truncated PNG (chunk {_printable(kind)} cut short)")
        (crc,) = struct.unpack_from(">I", data, end - 4)
        if zlib.crc32(data[pos + 4 : end - 4]) != crc:
            raise BadImage(f"corrupt PNG: CRC mismatch in chunk {_printable(kind)} at byte {pos}")
        if kind == b"IHDR":
            width, height, _depth, color = struct.unpack_from(">IIBB", data, pos + 8)
            if color not in _PNG_CHANNELS or not width or not height:
                raise BadImage("corrupt PNG: invalid IHDR")
            info = (height, width, color)
        elif kind == b"tRNS":
            transparent = True
        elif kind == b"eXIf" and orientation is None:  # OpenCV applies it, before IDAT or after
            orientation = _exif_orientation(data[pos + 8 : end - 4])
        elif kind == b"IEND":
            if info is None:
                raise BadImage("corrupt PNG: no IHDR chunk")
            height, width, color = info
            channels = _PNG_CHANNELS[color] + (1 if transparent and color in (0, 2, 3) else 0)
            return ImageInfo("png", height, width, channels, orientation=orientation)
        pos = end
    raise BadImage("truncated PNG (no IEND chunk)")


def decode(
    data: bytes,
    reduce: int = 1,
    order: str = "bgr",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    orient: bool = True,
) -> np.ndarray:
    """Decode to uint8 HxWx3 as cv2.IMREAD_COLOR does (first frame, no alpha, 8-bit); HxW for
    order "gray".

    Args:
        data: the encoded file.
        reduce: 2, 4 or 8 asks libjpeg for a scaled-down decode; 1 decodes at full size.
        order: "bgr" or "rgb" channel order of the result, or "gray" for one channel.
        max_pixels: refuse a result larger than this: the last line behind the header checks.
        orient: apply the EXIF orientation (JPEG, PNG, WebP), as OpenCV does by default, to
            turn a photo upright before it is re-encoded. False decodes a stored record as
            TensorFlow's decoders do, at the size its header (and so its fields) say.

    Raises:
        BadImage: OpenCV cannot decode the bytes, or the image is over max_pixels.
    """
    cv2 = _opencv()
    flags = getattr(cv2, _REDUCED[reduce])
    if order == "rgb":
        flags = (flags & ~cv2.IMREAD_COLOR) | cv2.IMREAD_COLOR_RGB
    elif order == "gray":  # the same flags' grayscale twins (IMREAD_REDUCED_GRAYSCALE_8, ...)
        flags &= ~cv2.IMREAD_COLOR
    if not orient:
        flags |= cv2.IMREAD_IGNORE_ORIENTATION
    try:
        pixels, said = _imdecode(cv2, np.frombuffer(data, np.uint8), flags)
    except cv2.error as e:
        raise BadImage(f"cannot decode ({_cv2_reason(e)})") from None
    corrupt = next((line for line in said.splitlines() if line.startswith(_CORRUPT)), None)
    if corrupt is not None:
        raise BadImage(f"corrupt JPEG (libjpeg: {corrupt})")
    if pixels is None:
        raise BadImage("cannot decode: not an image OpenCV can read")
    check_pixels(*pixels.shape[:2], max_pixels)
    return pixels


_SINKS: dict[int, int] = {}  # per process id: a forked worker must not share its parent's
# fd 2 is the process's: threads decoding at once (a Dask worker's) take turns, so that each
# message is its own image's and fd 2 is always put back as it was.
_FD2_LOCK = threading.Lock()


def _imdecode(cv2, buf: np.ndarray, flags: int) -> tuple[np.ndarray | None, str]:
    """cv2.imdecode with file descriptor 2 sent to a file of this process for the call, and what
    the C libraries printed there: libjpeg's warnings name no file, so they become the reason
    an image is refused instead of a line on the terminal. What else lands there (another
    thread's progress line) is dropped: a bar redraws itself."""
    with _FD2_LOCK:
        fd = _SINKS.get(os.getpid())
        if fd is None:
            fd, path = tempfile.mkstemp(prefix="shardpack-decoder-")
            os.unlink(path)  # a nameless file, gone with the process
            _SINKS[os.getpid()] = fd
        saved = os.dup(2)
        try:
            os.dup2(fd, 2)
            pixels = cv2.imdecode(buf, flags)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        size = os.lseek(fd, 0, os.SEEK_CUR)
        if not size:
            return pixels, ""
        said = os.pread(fd, min(size, _MESSAGE_BYTES), 0).decode("utf-8", "replace")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return pixels, said


def jpeg_upright_size(data: bytes, info: ImageInfo) -> tuple[int, int]:
    """(height, width) of a JPEG once its EXIF orientation is applied: the size decode() gives.

    libjpeg scales the image as stored and OpenCV turns it afterwards, so a scaled-down decode
    is planned from this size, not the header's. The orientation is the one probe read in
    `info` (of `data`).
    """
    if info.orientation in QUARTER_TURNS:
        return info.width, info.height
    return info.height, info.width


# For each EXIF orientation, where the stored image's (y, x) come from in the image as displayed:
# (axis of the displayed image, 0 y or 1 x; whether it runs backwards). Orientation 6 (shown
# turned a quarter clockwise): stored y = 1 - displayed x, stored x = displayed y.
_STORED_AXES = {1: ((0, False), (1, False)), 2: ((0, False), (1, True)),
                3: ((0, True), (1, True)), 4: ((0, True), (1, False)),
                5: ((1, False), (0, False)), 6: ((1, True), (0, False)),
                7: ((1, True), (0, True)), 8: ((1, False), (0, True))}  # fmt: skip


@dataclass(frozen=True)
class Turn:
    """An image's EXIF orientation as a move between its stored pixels (as every reader decodes
    a JPEG or PNG kept as it is) and the image as displayed (as decode gives it to be re-encoded):
    from the displayed image onto the stored one, or back (`upright`)."""

    orientation: int
    upright: bool = False

    def move_boxes(self, boxes: np.ndarray) -> np.ndarray:
        """Normalised [ymin, xmin, ymax, xmax] rows of one image as the same rows of the other."""
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
        sides = []
        for axis, backwards in _STORED_AXES[self._from()]:
            low, high = boxes[:, axis], boxes[:, axis + 2]
            sides.append((1 - high, 1 - low) if backwards else (low, high))
        (ymin, ymax), (xmin, xmax) = sides
        return np.stack([ymin, xmin, ymax, xmax], axis=1)

    def move_points(self, points: np.ndarray) -> np.ndarray:
        """Normalised [y, x] rows of one image as the same points of the other: a box of no
        size, as move_boxes moves it."""
        points = np.asarray(points, np.float64).reshape(-1, 2)
        return self.move_boxes(np.concatenate([points, points], axis=1))[:, :2]

    def move_pixels(self, pixels: np.ndarray) -> np.ndarray:
        """An array of one image's pixels (an instance-id map) as the other's: the same turn."""
        (axis, back_y), (_, back_x) = _STORED_AXES[self._from()]
        turned = pixels.swapaxes(0, 1) if axis == 1 else pixels
        return np.ascontiguousarray(turned[:: -1 if back_y else 1, :: -1 if back_x else 1])

    def _from(self) -> int:
        """The orientation whose _STORED_AXES row takes this turn's source onto its result."""
        return {6: 8, 8: 6}.get(self.orientation, self.orientation) if self.upright else (
            self.orientation)  # fmt: skip


def stored_turn(orientation: int | None) -> Turn | None:
    """The Turn (displayed onto stored) of an image whose EXIF orientation (as probe read it, a
    JPEG's or a PNG's; None for others) is other than upright; None for any other."""
    return Turn(orientation) if orientation in _STORED_AXES and orientation != 1 else None


def _exif_orientation(tiff: bytes) -> int:
    """The Orientation tag in the first IFD of an EXIF block, or 1 if it holds none. Read
    where OpenCV 5 reads it: probe passes it a JPEG's first APP1 segment named "Exif" (XMP is
    APP1 too) before the image data, or a PNG's first eXIf chunk."""
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None:
        return 1
    try:
        magic, ifd = struct.unpack_from(order + "HI", tiff, 2)
        if magic != 42:  # TIFF's number (BigTIFF's 43 too): OpenCV reads no tag past another
            return 1
        (entries,) = struct.unpack_from(order + "H", tiff, ifd)  # the block is under 64 KiB
        for pos in range(ifd + 2, ifd + 2 + 12 * entries, 12):
            tag, _kind, _count, value = struct.unpack_from(order + "HHIH", tiff, pos)
            if tag == _ORIENTATION:
                return value
    except struct.error:  # cut short: OpenCV finds no orientation there either
        pass
    return 1


def check_pixels(height: int, width: int, max_pixels: int) -> None:
    """Raise BadImage if an image of this size holds more than `max_pixels` pixels."""
    if reason := too_many_pixels(width, height, max_pixels):
        raise BadImage(reason)


def _cv2_reason(error: Exception) -> str:
    """The last line of an OpenCV error: the part that says what went wrong."""
    return str(error).strip().splitlines()[-1]


def target_size(
    height: int, width: int, max_side: int | None, resize: tuple[int, int] | None
) -> tuple[int, int] | None:
    """Return (height, width) after --max-side or --resize, or None if the size stays."""
    if resize is not None:
        return None if (width, height) == resize else (resize[1], resize[0])
    if max_side is None or max(height, width) <= max_side:
        return None
    scale = max_side / max(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


@dataclass(frozen=True)
class Geometry:
    """Where an image goes: resized to `scaled` (height, width), then its middle cut out, or
    the whole centred on a border, to `canvas` (height, width). A cut is made first where
    `window` says: (top, left, height, width) of the image before, the part resized to the
    whole canvas, so that no pixel cut off is resized. Pixels (fit) and boxes (move_boxes)
    take their numbers from here alone, so they cannot disagree."""

    scaled: tuple[int, int]
    canvas: tuple[int, int]
    # (height, width) of the upright image it was made for: what a mask drawn for that image
    # must match before it is taken through the same steps (None: not said)
    source: tuple[int, int] | None = field(default=None, compare=False)
    window: tuple[int, int, int, int] | None = None

    @property
    def offset(self) -> tuple[int, int]:
        """(top, left) of the scaled image on the canvas: negative where its middle is cut out
        (the odd pixel goes from the far side), positive where a border centres it."""
        return tuple(  # type: ignore[return-value]
            -((s - c) // 2) if s >= c else (c - s) // 2
            for s, c in zip(self.scaled, self.canvas, strict=True)
        )

    def move_boxes(self, boxes: np.ndarray) -> np.ndarray:
        """Normalised [ymin, xmin, ymax, xmax] rows of the image before (upright) as the same
        rows of the canvas, unclipped: the resize maps the image's edges onto the scaled
        image's edges (as OpenCV's resize does), then the offset shifts them; or the window's
        edges onto the canvas's."""
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
        if self.window is not None:  # the window's edges are the canvas's
            top, left, height, width = self.window
            source_h, source_w = self.source  # type: ignore[misc]
            scale = np.array([source_h, source_w, source_h, source_w], np.float64)
            shift = np.array([top, left, top, left], np.float64)
            size = np.array([height, width, height, width], np.float64)
            return (boxes * scale - shift) / size
        (height, width), (out_h, out_w), (top, left) = self.scaled, self.canvas, self.offset
        scale = np.array([height, width, height, width], np.float64)
        shift = np.array([top, left, top, left], np.float64)
        size = np.array([out_h, out_w, out_h, out_w], np.float64)
        return (boxes * scale + shift) / size

    def move_points(self, points: np.ndarray) -> np.ndarray:
        """Normalised [y, x] rows of the image before as the same points of the canvas,
        unclipped: a box of no size, as move_boxes moves it."""
        points = np.asarray(points, np.float64).reshape(-1, 2)
        return self.move_boxes(np.concatenate([points, points], axis=1))[:, :2]


def geometry(
    height: int,
    width: int,
    max_side: int | None,
    resize: tuple[int, int] | None,
    mode: str = "stretch",
    upscale: bool = True,
) -> Geometry | None:
    """The --max-side or --resize/--resize-mode size of an upright image of this size, with
    img2dataset's meanings; None if the image stays as it is.

    center-crop and keep-ratio scale so that the image covers (width, height) (center-crop
    then cuts the middle out), pad and keep-ratio-largest so that it fits inside (pad then
    centres it on the full size). Without `upscale` no image is enlarged.
    """
    if resize is None or mode == "stretch":
        size = target_size(height, width, max_side, resize)
        if size is not None and not upscale:
            size = min(size[0], height), min(size[1], width)
        return None if size in (None, (height, width)) else Geometry(size, size, (height, width))
    out = resize[1], resize[0]
    cover = mode in ("center-crop", "keep-ratio")
    scale = (max if cover else min)(out[0] / height, out[1] / width)
    scale = scale if upscale else min(scale, 1.0)
    scaled = max(1, round(height * scale)), max(1, round(width * scale))
    canvas = scaled
    if mode == "center-crop":
        canvas = min(out[0], scaled[0]), min(out[1], scaled[1])
    elif mode == "pad":  # rounding never spills over the canvas
        scaled, canvas = (min(out[0], scaled[0]), min(out[1], scaled[1])), out
    if scaled == canvas == (height, width):
        return None
    cut = mode == "center-crop" and canvas != scaled
    window = _window((height, width), scale, canvas) if cut else None
    return Geometry(scaled, canvas, (height, width), window)


def _window(
    source: tuple[int, int], scale: float, canvas: tuple[int, int]
) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the part of an image of size `source` that a resize by
    `scale` and a cut of its middle to `canvas` keep, in whole pixels of the source (centred,
    the odd pixel left on the far side). Resizing that part alone to the canvas costs the
    cut's share less: a 500x375 photo center-cropped to 256x256 resizes its 375x375 middle,
    not all of it to 341x256 (benchmarks/README.md)."""
    sides = [min(s, max(1, round(c / scale))) for s, c in zip(source, canvas, strict=True)]
    starts = [(s - side) // 2 for s, side in zip(source, sides, strict=True)]
    return starts[0], starts[1], sides[0], sides[1]


def fit(
    pixels: np.ndarray,
    where: Geometry,
    pad_color: tuple[int, int, int],
    order: str = "bgr",
    nearest: bool = False,
) -> np.ndarray:
    """Resize pixels to where.scaled, then crop the middle or pad around to where.canvas;
    pad_color is (r, g, b) whatever the pixels' order. `nearest`: the pixels are labels (an
    instance-id map), resized nearest-neighbour and padded with pad_color[0]. With a window,
    its part alone is resized to the canvas (in the pixels' own scale where a reduced decode
    gave fewer than the source's)."""
    if where.window is not None:
        return np.ascontiguousarray(resize(_cut(pixels, where), where.canvas, nearest))
    pixels = resize(pixels, where.scaled, nearest)
    (height, width), (out_h, out_w), (top, left) = where.scaled, where.canvas, where.offset
    if (height, width) == (out_h, out_w):
        return pixels
    if height >= out_h and width >= out_w:
        return np.ascontiguousarray(pixels[-top : out_h - top, -left : out_w - left])
    color = pad_color[0] if nearest else pad_color if order == "rgb" else pad_color[::-1]
    bottom, right = out_h - height - top, out_w - width - left
    return _opencv().copyMakeBorder(
        pixels, top, bottom, left, right, _opencv().BORDER_CONSTANT, value=color
    )


def _cut(pixels: np.ndarray, where: Geometry) -> np.ndarray:
    """The window of `where` out of pixels of its source, or of a smaller decode of it."""
    top, left, height, width = where.window  # type: ignore[misc]
    (source_h, source_w), (got_h, got_w) = where.source, pixels.shape[:2]  # type: ignore[misc]
    if (got_h, got_w) != (source_h, source_w):
        top, height = round(top * got_h / source_h), max(1, round(height * got_h / source_h))
        left, width = round(left * got_w / source_w), max(1, round(width * got_w / source_w))
    return pixels[top : top + height, left : left + width]


def reduce_factor(height: int, width: int, target: tuple[int, int]) -> int:
    """The largest libjpeg scale (8, 4, 2) that still decodes at least the target size."""
    for factor in (8, 4, 2):
        if height // factor >= target[0] and width // factor >= target[1]:
            return factor
    return 1


def resize(pixels: np.ndarray, size: tuple[int, int], nearest: bool = False) -> np.ndarray:
    """Resize to (height, width): area averaging to shrink, bilinear to grow; labels
    (`nearest`) nearest-neighbour, each pixel the one under its centre."""
    height, width = size
    if pixels.shape[:2] == size:
        return pixels
    shrink = height * width < pixels.shape[0] * pixels.shape[1]
    cv2 = _opencv()
    how = cv2.INTER_NEAREST_EXACT if nearest else cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    try:
        if how == cv2.INTER_AREA and pixels.dtype == np.uint8 and _in_floats(pixels.shape, size):
            averaged = cv2.resize(np.float32(pixels), (width, height), interpolation=how)
            return cv2.convertScaleAbs(averaged)  # rounded and saturated as OpenCV's own
        return cv2.resize(pixels, (width, height), interpolation=how)
    except cv2.error as e:
        raise BadImage(f"cannot resize to {width}x{height} ({_cv2_reason(e)})") from None


def _in_floats(shape: tuple[int, ...], size: tuple[int, int]) -> bool:
    """Whether OpenCV's area averaging of 8-bit pixels from `shape` to `size` is its float
    one: a shrink of both sides by a fraction (a whole factor on both is summed in integers).
    Given float32 pixels it runs the same sums ~15% faster (byte for byte the same, once
    rounded), more than the conversion costs (benchmarks/README.md)."""
    (height, width), (to_h, to_w) = shape[:2], size
    shrink = to_h <= height and to_w <= width
    return shrink and (height % to_h != 0 or width % to_w != 0)


def interleave(planes: np.ndarray) -> np.ndarray:
    """C x H x W planar uint8 pixels (a CIFAR record) as H x W x C, C-contiguous.

    OpenCV's merge: numpy's transposing copy walks an inner axis of 3, at half the speed.
    """
    return _opencv().merge(tuple(planes))


def encode(pixels: np.ndarray, fmt: str, quality: int = 95, order: str = "bgr") -> bytes:
    """Encode pixels of the given channel order as jpeg, png or webp, or as raw RGB bytes."""
    if fmt == "raw" and order == "rgb":
        return pixels.tobytes()
    cv2 = _opencv()
    if fmt == "raw":
        rgb = cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB)
        return rgb.tobytes()
    if order == "rgb":
        pixels = cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR)
    ext, quality_flag = _ENCODERS[fmt]
    params = [getattr(cv2, quality_flag), quality] if quality_flag is not None else []
    try:
        ok, buf = cv2.imencode(ext, pixels, params)
    except cv2.error as e:
        raise BadImage(f"OpenCV could not encode {fmt} ({_cv2_reason(e)})") from None
    if not ok:
        raise BadImage(f"OpenCV could not encode {fmt}")
    return buf.tobytes()


# Cells of one polygon's rows x (edges + columns) tables filled at a time: bounds the memory of
# a polygon of many points over a tall image (a hostile one: 32 MB a step).
_FILL_CELLS = 1 << 22


def fill_polygon(labels: np.ndarray, polygon: np.ndarray, value: int) -> None:
    """Set `value` in the pixels of one-channel `labels` whose centres lie inside `polygon`
    (n x 2 (x, y) rows in pixels from the image's top-left corner, as COCO gives them; the
    even-odd rule), as pycocotools samples them. Not cv2.fillPoly: it also fills every pixel
    the outline touches, two pixels past pycocotools at a sharp tip."""
    if not labels.flags.c_contiguous:
        raise ValueError("fill_polygon draws into a C-contiguous array")
    points = np.asarray(polygon, np.float64).reshape(-1, 2)
    x0, y0 = points[:, 0], points[:, 1]
    x1, y1 = np.concatenate([x0[1:], x0[:1]]), np.concatenate([y0[1:], y0[:1]])
    height, width = labels.shape[:2]
    # the rows and columns whose centres (+ 0.5) may lie inside
    top, bottom = max(int(np.ceil(y0.min() - 0.5)), 0), min(int(np.ceil(y0.max() - 0.5)), height)
    step = max(1, _FILL_CELLS // (len(points) + width))
    slope = (x1 - x0) / np.where(y1 == y0, 1.0, y1 - y0)  # a level edge crosses no row
    for first in range(top, bottom, step):
        rows = np.arange(first, min(first + step, bottom))
        centre = rows[:, None] + 0.5
        crosses = (y0 <= centre) != (y1 <= centre)  # half-open: a vertex counted once
        xs = np.where(crosses, x0 + (centre - y0) * slope, np.inf)
        xs.sort(axis=1)
        most = int(crosses.sum(axis=1).max(initial=0))  # the crossings of the busiest row
        starts, ends = xs[:, 0:most:2], xs[:, 1:most:2]
        spans = np.isfinite(ends)
        # the pixels j with start <= j + 0.5 < end
        begin = np.where(spans, np.ceil(starts - 0.5), 0).clip(0, width).astype(np.intp)
        end = np.where(spans, np.ceil(ends - 0.5), 0).clip(0, width).astype(np.intp)
        row, pair = np.nonzero(begin < end)
        begin, end = begin[row, pair], end[row, pair]
        # every pixel of every span as one flat index: the spans' starts, each repeated along
        # its length, plus a running count (one assignment, whatever the spans)
        lengths = end - begin
        flat = (rows[row] * width + begin - np.cumsum(lengths) + lengths).repeat(lengths)
        labels.reshape(-1)[flat + np.arange(len(flat))] = value


def encode_labels(labels: np.ndarray) -> bytes:
    """A one-channel 8- or 16-bit label map (an instance-id map) as a lossless PNG."""
    ok, buf = _opencv().imencode(".png", labels)
    if not ok:
        raise BadImage("OpenCV could not encode a label map as PNG")
    return buf.tobytes()


def decode_labels(data: bytes) -> np.ndarray:
    """A one-channel 8- or 16-bit PNG label map (a mask of class or instance ids) as it is
    stored (no colour conversion)."""
    cv2 = _opencv()
    labels = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if labels is None or labels.ndim != 2:
        raise BadImage("not a one-channel PNG of ids")
    return labels
