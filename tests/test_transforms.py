"""Resize modes, size filters, reduced JPEG decode, colour conversion and corrupt JPEGs, each
against a reference made with Pillow or OpenCV on real photo-like JPEGs."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps
from typer.testing import CliRunner

from shardpack.cli import app
from shardpack.errors import ShardpackError
from shardpack.images import BadImage, decode, fit, geometry, reduce_factor
from shardpack.options import PackOptions, parse_color
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from shardpack.read.verify import verify
from tests import helpers

# (width, height) of the photos every mode is checked on: landscape, portrait, a 5:1 strip
# and an image smaller than the target.
PHOTOS = {"landscape": (400, 300), "portrait": (300, 400), "strip": (500, 100), "tiny": (24, 18)}
TARGET = (128, 96)  # --resize 128x96: not square, so width and height cannot be swapped unseen


def _photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """RGB pixels like a photo's: sky gradient, soft shapes, fine texture, sensor noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    sky = np.stack([80 + 100 * y / height, 120 + 60 * x / width, 200 - 80 * y / height], -1)
    pixels = sky.copy()
    for _ in range(6):
        cy, cx, r = rng.uniform(0, height), rng.uniform(0, width), rng.uniform(0.1, 0.4)
        inside = (y - cy) ** 2 + (x - cx) ** 2 < (r * min(width, height)) ** 2
        pixels[inside] = rng.uniform(20, 235, 3)
    pixels += 12 * np.sin(x / 3.0)[..., None] * np.cos(y / 5.0)[..., None]
    pixels += rng.normal(0, 3, pixels.shape)
    return cv2.GaussianBlur(np.clip(pixels, 0, 255).astype(np.uint8), (3, 3), 0)


def _save(path: Path, pixels: np.ndarray | Image.Image, **params) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    im = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
    im.save(path, **params)
    return path


def _photos(src: Path) -> dict[str, Path]:
    return {
        name: _save(src / "photos" / f"{name}.jpg", _photo(w, h, seed=i), quality=92)
        for i, (name, (w, h)) in enumerate(PHOTOS.items())
    }


def _records(out: Path) -> dict[str, dict]:
    """Every record by its file's stem, pixels decoded (RGB)."""
    return {
        Path(r["key"]).stem: r
        for r in iter_examples(out, decode=True)  # decode puts RGB pixels in "image"
    }


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def _resized(im: Image.Image, size: tuple[int, int]) -> Image.Image:
    """Pillow's resize as shardpack's: box (area) averaging to shrink, bilinear to grow."""
    shrink = size[0] * size[1] < im.width * im.height
    return im.resize(size, Image.Resampling.BOX if shrink else Image.Resampling.BILINEAR)


def _reference(path: Path, mode: str, pad: tuple[int, int, int] = (255, 255, 255)) -> np.ndarray:
    """img2dataset's meaning of each mode, computed with Pillow on the upright image: sizes
    from ImageOps.cover and contain, albumentations' offsets ((big - small) // 2)."""
    im = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
    w, h = TARGET
    if mode == "stretch":
        return np.asarray(_resized(im, TARGET))
    cover = ImageOps.cover(im, TARGET)  # only its size is taken: the resampling is ours
    contain = ImageOps.contain(im, TARGET)
    if mode == "keep-ratio":
        return np.asarray(_resized(im, cover.size))
    if mode == "keep-ratio-largest":
        return np.asarray(_resized(im, contain.size))
    if mode == "center-crop":
        big = np.asarray(_resized(im, cover.size))
        top, left = (big.shape[0] - h) // 2, (big.shape[1] - w) // 2
        return big[top : top + h, left : left + w]
    small = np.asarray(_resized(im, contain.size))
    canvas = np.empty((h, w, 3), np.uint8)
    canvas[:] = pad
    top, left = (h - small.shape[0]) // 2, (w - small.shape[1]) // 2
    canvas[top : top + small.shape[0], left : left + small.shape[1]] = small
    return canvas


def _pack(src: Path, out: Path, **options) -> dict:
    pack(src, out, PackOptions(workers=1, shards=1, **options))
    return json.loads((out / "index.json").read_text())


@pytest.mark.parametrize(
    "mode", ["stretch", "center-crop", "pad", "keep-ratio", "keep-ratio-largest"]
)
def test_each_mode_matches_a_pillow_reference(tmp_path, mode):
    photos = _photos(tmp_path / "src")
    _pack(tmp_path / "src", tmp_path / "out", encode="png", resize=TARGET, resize_mode=mode)
    records = _records(tmp_path / "out")
    for name, path in photos.items():
        expected, got = _reference(path, mode), records[name]["image"]
        assert got.shape == expected.shape, (name, mode)
        assert (records[name]["height"], records[name]["width"]) == got.shape[:2]
        # the reduced decode's rounding and Pillow's box filter against OpenCV's area one
        assert _psnr(got, expected) >= 30, (name, mode, _psnr(got, expected))


def test_pad_fills_the_border_with_pad_color_and_keeps_every_image_one_size(tmp_path):
    _photos(tmp_path / "src")
    index = _pack(tmp_path / "src", tmp_path / "out", encode="png", resize=TARGET,
                  resize_mode="border", pad_color=(10, 200, 30))  # fmt: skip
    strip = _records(tmp_path / "out")["strip"]["image"]  # 128x26 on a 128x96 canvas
    assert strip.shape == (96, 128, 3)
    assert (strip[:30] == (10, 200, 30)).all() and (strip[-30:] == (10, 200, 30)).all()
    assert index["image_size"] == [96, 128]


def test_exif_orientation_is_applied_before_the_mode(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown portrait
    path = _save(tmp_path / "src" / "a" / "turned.jpg", _photo(400, 300), quality=92, exif=exif)
    _pack(tmp_path / "src", tmp_path / "out", encode="png", resize=TARGET,
          resize_mode="keep-ratio")  # fmt: skip
    got = _records(tmp_path / "out")["turned"]["image"]
    expected = _reference(path, "keep-ratio")
    assert got.shape == expected.shape == (171, 128, 3)  # portrait: width 128 covers it
    assert _psnr(got, expected) >= 30


@pytest.mark.parametrize(
    ("mode", "tiny", "landscape"),
    [
        ("stretch", (18, 24), (96, 128)),
        ("center-crop", (18, 24), (96, 128)),
        ("pad", (96, 128), (96, 128)),  # the canvas stays, the image is not enlarged
        ("keep-ratio", (18, 24), (96, 128)),
        ("keep-ratio-largest", (18, 24), (96, 128)),
    ],
)
def test_no_upscale_leaves_small_images_at_their_size(tmp_path, mode, tiny, landscape):
    _photos(tmp_path / "src")
    _pack(tmp_path / "src", tmp_path / "out", encode="png", resize=TARGET, resize_mode=mode,
          upscale=False)  # fmt: skip
    records = _records(tmp_path / "out")
    assert records["tiny"]["image"].shape[:2] == tiny
    assert records["landscape"]["image"].shape[:2] == landscape
    if mode == "pad":  # the tiny photo, as it is, in the middle of a white canvas
        image = records["tiny"]["image"]
        assert (image[:39] == 255).all() and not (image[39:57, 52:76] == 255).all()


def test_an_enlargement_over_max_pixels_is_refused(tmp_path):
    _save(tmp_path / "src" / "a" / "thin.png", _photo(400, 2))
    _save(tmp_path / "src" / "a" / "square.png", _photo(120, 120))  # a run must pack something
    index = _pack(tmp_path / "src", tmp_path / "out", resize=(100, 100),
                  resize_mode="keep-ratio", max_pixels=100_000)  # fmt: skip
    (skipped,) = index["skipped"]
    assert skipped["reason"] == "20000x100 pixels is over --max-pixels 100000"


def test_geometry_of_each_mode():
    assert geometry(300, 400, None, (128, 128), "center-crop").scaled == (128, 171)
    assert geometry(300, 400, None, (128, 128), "center-crop").canvas == (128, 128)
    assert geometry(300, 400, None, (128, 128), "keep-ratio").canvas == (128, 171)
    assert geometry(300, 400, None, (128, 128), "keep-ratio-largest").canvas == (96, 128)
    assert geometry(300, 400, None, (128, 128), "pad").scaled == (96, 128)
    assert geometry(96, 128, None, (128, 96), "stretch") is None  # already the size
    assert geometry(96, 128, None, (128, 96), "center-crop") is None


@pytest.mark.parametrize(
    ("mode", "factor"),
    [("stretch", 2), ("center-crop", 2), ("pad", 2), ("keep-ratio", 2), ("keep-ratio-largest", 2)],
)
def test_a_photo_decodes_at_half_size_for_a_128_target(mode, factor):
    """500x375 to 128x128: 1/2 scale (250x187) still covers what every mode scales to, 1/4
    (125x93) does not: libjpeg then decodes a quarter of the pixels."""
    where = geometry(375, 500, None, (128, 128), mode)
    assert reduce_factor(375, 500, where.scaled) == factor
    assert reduce_factor(1500, 2000, where.scaled) == 8  # and 1/8 where it serves


def test_a_center_crop_resizes_only_its_window_and_a_box_lands_where_its_pixels_go():
    """500x375 to 256x256: the 375x375 middle alone is resized (the columns cut off are never
    averaged), and a box lands where its object's pixels go. A white block's width and centre
    in each row and column (area averaging keeps both) are the moved box's to 0.02 px: the
    mapping of a whole resize to 341x256 and a cut at column 42 is up to 0.3 px away."""
    where = geometry(375, 500, None, (256, 256), "center-crop")
    assert where.window == (0, 62, 375, 375)  # 125 columns cut: 62 on the left, 63 right
    pixels = np.zeros((375, 500, 3), np.uint8)
    pixels[100:221, 140:331] = 255
    got = fit(pixels, where, (0, 0, 0))[..., 0].astype(np.float64) / 255
    assert got.shape == (256, 256)
    ymin, xmin, ymax, xmax = where.move_boxes([[100 / 375, 140 / 500, 221 / 375, 331 / 500]])[
        0] * 256  # fmt: skip
    for block, (low, high), (across_low, across_high) in (
        (got, (xmin, xmax), (ymin, ymax)),  # rows: the block's width and centre across
        (got.T, (ymin, ymax), (xmin, xmax)),  # columns: its height and centre down
    ):
        inside = block[int(across_low) + 2 : int(across_high) - 2]
        np.testing.assert_allclose(inside.sum(axis=1), high - low, atol=0.02)
        centres = (inside * (np.arange(256) + 0.5)).sum(axis=1) / inside.sum(axis=1)
        np.testing.assert_allclose(centres, (low + high) / 2, atol=0.02)


def test_img2dataset_names_and_bad_values():
    assert PackOptions(resize=(8, 8), resize_mode="center_crop").resize_mode == "center-crop"
    assert PackOptions(resize=(8, 8), resize_mode="border").resize_mode == "pad"
    assert PackOptions(resize=(8, 8), resize_mode="fixed").resize_mode == "stretch"
    with pytest.raises(ShardpackError, match=r"resize_mode= must be one of .* got: 'crop'"):
        PackOptions(resize=(8, 8), resize_mode="crop")
    with pytest.raises(ShardpackError, match="resize_mode='pad' needs resize="):
        PackOptions(resize_mode="pad")
    with pytest.raises(ShardpackError, match=r"pad_color= .* got: \(1, 2, 300\)"):
        PackOptions(resize=(8, 8), pad_color=(1, 2, 300))
    with pytest.raises(ShardpackError, match=r"max_aspect= .* got: 0\.5"):
        PackOptions(max_aspect=0.5)
    with pytest.raises(ShardpackError, match=r"min_side= .* got: 0"):
        PackOptions(min_side=0)
    assert parse_color("#0a0B0c") == (10, 11, 12) and parse_color("1,2,3") == (1, 2, 3)
    with pytest.raises(ShardpackError, match="got: 'blue'"):
        parse_color("blue")
    digest = PackOptions(resize=(8, 8)).output_fields()
    assert digest != PackOptions(resize=(8, 8), resize_mode="pad").output_fields()


def test_filters_skip_with_their_reason(tmp_path):
    _photos(tmp_path / "src")
    cases = {
        "min_side": (50, {"tiny": "shorter side 18 px is under --min-side 50"}),
        "max_aspect": (3.0, {"strip": "aspect 5.00 is over --max-aspect 3"}),
        "max_area": (100_000, {"landscape": "400x300 pixels is over --max-area 100000",
                               "portrait": "300x400 pixels is over --max-area 100000"}),
    }  # fmt: skip
    for option, (value, skipped) in cases.items():
        out = tmp_path / option
        index = _pack(tmp_path / "src", out, **{option: value})  # --encode keep: filters too
        assert {Path(s["key"]).stem: s["reason"] for s in index["skipped"]} == skipped
        assert set(_records(out)) == set(PHOTOS) - set(skipped)


def test_filters_from_the_command_line(tmp_path):
    _photos(tmp_path / "src")
    result = CliRunner().invoke(app, ["pack", str(tmp_path / "src"), str(tmp_path / "out"),
                                      "--min-side", "50", "--resize", "64x64", "--resize-mode",
                                      "keep_ratio_largest", "--no-upscale", "--workers", "1",
                                      "--encode", "png"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "shorter side 18 px is under --min-side 50" in result.output
    records = _records(tmp_path / "out")
    assert records["strip"]["image"].shape[:2] == (13, 64)


# Colour: every kind of input becomes 8-bit RGB, as Pillow converts it.


def _ycck_jpeg(rgb: np.ndarray) -> bytes:
    """A YCCK JPEG (Adobe transform 2) of these colours: Pillow writes CMYK only, so the planes
    are made YCCK here and written as CMYK, and the Adobe marker then says YCCK."""
    cmyk = np.asarray(Image.fromarray(rgb).convert("CMYK")).astype(np.float32)
    # A decoder turns YCC into (255 - C', 255 - M', 255 - Y') of the stored C'M'Y' (Adobe's
    # inverted CMYK: stored = 255 - Pillow's), so the YCC planes hold Pillow's C, M, Y as RGB.
    c, m, y = cmyk[..., 0], cmyk[..., 1], cmyk[..., 2]
    luma = 0.299 * c + 0.587 * m + 0.114 * y
    planes = [luma, 128 + 0.564 * (y - luma), 128 + 0.713 * (c - luma)]
    stored = np.stack([*planes, 255 - cmyk[..., 3]], -1)  # Pillow inverts each plane on save
    pillow = np.clip(np.round(255 - stored), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pillow, "CMYK").save(buf, "JPEG", quality=95)
    data = bytearray(buf.getvalue())
    adobe = data.index(b"Adobe")
    assert data[adobe + 11] == 0  # transform: 0 CMYK, 2 YCCK
    data[adobe + 11] = 2
    return bytes(data)


def _colour_inputs(folder: Path) -> dict[str, Path]:
    rgb = _photo(64, 48)
    folder.mkdir(parents=True)
    gray16 = (np.linspace(0, 65535, 64 * 48).reshape(48, 64)).astype(np.uint16)
    files = {
        "cmyk": _save(folder / "cmyk.jpg", Image.fromarray(rgb).convert("CMYK"), quality=95),
        "gray_jpeg": _save(folder / "gray_jpeg.jpg", rgb[..., 1], quality=95),
        "gray_png": _save(folder / "gray_png.png", rgb[..., 0]),
        "palette": folder / "palette.png",
        "gray16": _save(folder / "gray16.png", gray16),
        "rgb16": folder / "rgb16.png",
    }
    (folder / "ycck.jpg").write_bytes(_ycck_jpeg(rgb))
    files["ycck"] = folder / "ycck.jpg"
    Image.fromarray(rgb).quantize(64).save(files["palette"], transparency=3)
    cv2.imwrite(str(files["rgb16"]), (rgb[..., ::-1].astype(np.uint16) * 257 + 100))
    return files


def _pillow_rgb(path: Path) -> np.ndarray:
    """Pillow's 8-bit RGB of a file; 16-bit gray its top byte (Pillow's convert clips it)."""
    im = Image.open(path)
    if im.mode.startswith("I;16"):
        return np.repeat((np.asarray(im).astype(np.uint16) >> 8).astype(np.uint8)[..., None], 3, 2)
    return np.asarray(im.convert("RGB"))


def test_every_colour_mode_becomes_pillows_rgb(tmp_path):
    files = _colour_inputs(tmp_path / "src" / "a")
    assert Image.open(files["ycck"]).mode == "CMYK" and Image.open(files["gray16"]).mode == "I;16"
    _pack(tmp_path / "src", tmp_path / "out", encode="png")
    records = _records(tmp_path / "out")
    for name, path in files.items():
        got, expected = records[name]["image"], _pillow_rgb(path)
        assert got.dtype == np.uint8 and got.shape == (48, 64, 3), name
        # CMYK: Pillow divides by 255, OpenCV shifts by 8 bits: one level apart at most
        assert np.abs(got.astype(int) - expected).max() <= 1, name


@pytest.mark.heavy  # TensorFlow (and wids, torch) read what it wrote
def test_keep_makes_what_tensorflow_cannot_decode_png_losslessly(tmp_path):
    files = _colour_inputs(tmp_path / "src" / "a")
    result = CliRunner().invoke(app, ["pack", str(tmp_path / "src"), str(tmp_path / "out"),
                                      "--workers", "1", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["lossless"] == 2  # the CMYK and the YCCK JPEG
    records = _records(tmp_path / "out")
    for name in ("cmyk", "ycck"):
        assert records[name]["format"] == "png"
        # lossless: exactly the pixels OpenCV decodes from the original
        assert (records[name]["image"] == decode(files[name].read_bytes(), order="rgb")).all()
    assert records["gray_jpeg"]["format"] == "jpeg"  # TensorFlow reads it: passed through
    assert records["gray_jpeg"]["image"].shape == (48, 64, 3)
    assert helpers.tf_records(tmp_path / "out")  # and TensorFlow decodes every record
    text = CliRunner().invoke(app, ["pack", str(tmp_path / "src"), str(tmp_path / "out2"),
                                    "--workers", "1"]).output  # fmt: skip
    assert "re-encoded 2 images TensorFlow cannot decode" in text


# A corrupt JPEG: bytes overwritten inside the compressed data.


def _corrupt_jpeg(path: Path) -> Path:
    """A real JPEG with 64 bytes in the middle of its entropy-coded data zeroed: the markers
    stay, so every header check passes. (Not every overwrite makes libjpeg warn: a damage
    its Huffman decoder reads through unnoticed no decoder sees; these photos' do.)"""
    data = bytearray(path.read_bytes())
    start = data.index(b"\xff\xda") + 2 + int.from_bytes(data[data.index(b"\xff\xda") + 2 :][:2])
    middle = (start + len(data)) // 2
    for i in range(middle, middle + 64):
        data[i] = 0
    path.write_bytes(bytes(data))
    return path


def test_corrupt_jpeg_is_skipped_under_check_decode_and_nothing_reaches_stderr(tmp_path, capfd):
    photos = _photos(tmp_path / "src")
    _corrupt_jpeg(photos["landscape"])
    capfd.readouterr()
    index = _pack(tmp_path / "src", tmp_path / "out", check="decode")
    captured = capfd.readouterr()
    assert "Corrupt" not in captured.err and "JPEG" not in captured.err
    (skipped,) = index["skipped"]
    assert skipped["key"].endswith("landscape.jpg")
    assert skipped["reason"].startswith("corrupt JPEG (libjpeg: Corrupt JPEG data")


def test_cli_with_workers_names_the_corrupt_file_on_every_line_about_it(tmp_path):
    photos = _photos(tmp_path / "src")
    _corrupt_jpeg(photos["landscape"])
    _corrupt_jpeg(photos["portrait"])
    run = helpers.cli("pack", str(tmp_path / "src"), str(tmp_path / "out"), "--check", "decode",
                      "--workers", "2", "--shards", "2", "--no-progress", timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    said = [line for line in (run.stdout + run.stderr).splitlines() if "JPEG" in line]
    assert len(said) == 2 and all(".jpg: corrupt JPEG (libjpeg: " in line for line in said), said
    run = helpers.cli("verify", str(tmp_path / "out"), "--decode", timeout=120)
    assert run.returncode == 0 and "Corrupt" not in run.stdout + run.stderr


def test_corrupt_jpeg_is_bad_when_decoded_to_resize(tmp_path, capfd):
    photos = _photos(tmp_path / "src")
    _corrupt_jpeg(photos["portrait"])
    index = _pack(tmp_path / "src", tmp_path / "out", resize=TARGET, resize_mode="center-crop")
    assert [Path(s["key"]).name for s in index["skipped"]] == ["portrait.jpg"]
    assert "Corrupt" not in capfd.readouterr().err


def test_verify_decode_names_a_corrupt_jpeg(tmp_path, capfd):
    photos = _photos(tmp_path / "src")
    _corrupt_jpeg(photos["tiny"])
    _pack(tmp_path / "src", tmp_path / "out")  # --check header: passed through
    report = verify(tmp_path / "out", decode=True)
    (fault,) = report.faults
    assert "Corrupt JPEG data" in str(fault) and "tiny.jpg" in str(fault)
    assert "Corrupt" not in capfd.readouterr().err
    assert not verify(tmp_path / "out").faults  # without --decode: framing and hashes only


def test_decode_of_a_sound_jpeg_is_silent_and_accepted(tmp_path, capfd):
    path = _save(tmp_path / "a.jpg", _photo(64, 48), quality=90)
    assert decode(path.read_bytes()).shape == (48, 64, 3)
    with pytest.raises(BadImage, match="Corrupt JPEG data"):
        decode(_corrupt_jpeg(path).read_bytes())
    assert capfd.readouterr().err == ""


def test_threads_decoding_at_once_each_get_their_own_verdict_and_fd_2_back(tmp_path, capfd):
    from concurrent.futures import ThreadPoolExecutor

    sound = _save(tmp_path / "sound.jpg", _photo(300, 200), quality=90).read_bytes()
    bad = _corrupt_jpeg(_save(tmp_path / "bad.jpg", _photo(400, 300, seed=0), quality=92))
    inputs = [sound, bad.read_bytes()] * 40

    def verdict(data: bytes) -> bool:
        try:
            decode(data)
        except BadImage:
            return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(verdict, inputs)) == [True, False] * 40
    os.write(2, b"still the terminal\n")
    assert capfd.readouterr().err == "still the terminal\n"


# tf_dataset: one size everywhere needs no image_size.


@pytest.mark.heavy
def test_tf_dataset_batches_uniform_images_without_image_size(tmp_path):
    tf = helpers.heavy_import("tensorflow")
    from shardpack.read.stream import tf_dataset

    _photos(tmp_path / "src")
    index = _pack(tmp_path / "src", tmp_path / "out", encode="jpeg", resize=TARGET,
                  resize_mode="center-crop")  # fmt: skip
    assert index["image_size"] == [96, 128]
    ds = tf_dataset(tmp_path / "out", batch_size=4, shuffle=False)
    assert ds.element_spec["image"].shape.as_list() == [None, 96, 128, 3]
    (batch,) = list(ds)
    assert batch["image"].shape == (4, 96, 128, 3) and batch["image"].dtype == tf.uint8
    mixed = _pack(tmp_path / "src", tmp_path / "mixed", resize=TARGET, resize_mode="keep-ratio")
    assert mixed["image_size"] is None


@pytest.mark.heavy
def test_tfds_sees_the_one_size_of_a_center_crop(tmp_path):
    tfds = helpers.heavy_import("tensorflow_datasets")
    _photos(tmp_path / "src")
    _pack(tmp_path / "src", tmp_path / "out", resize=TARGET, resize_mode="center-crop")
    builder = tfds.builder_from_directory(str(tmp_path / "out"))
    assert builder.info.features["image"].shape == (96, 128, 3)
    (batch,) = tfds.as_numpy(builder.as_dataset(split="train", batch_size=4))
    assert batch["image"].shape == (4, 96, 128, 3)


def test_resume_names_a_changed_mode(tmp_path):
    from shardpack.errors import OutputError

    _photos(tmp_path / "src")
    _pack(tmp_path / "src", tmp_path / "out", resize=TARGET, resize_mode="center-crop")
    said = (r"resize_mode='pad' \(the journal's: 'center-crop'\); "
            r"upscale=False \(the journal's: True\)")  # fmt: skip
    with pytest.raises(OutputError, match=said):
        _pack(tmp_path / "src", tmp_path / "out", resize=TARGET, resize_mode="pad",
              upscale=False, resume=True)  # fmt: skip
