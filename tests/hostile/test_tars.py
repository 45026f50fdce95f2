"""Hostile WebDataset tars (issue 34, items 5-11): each built for real, byte by byte where
tarfile cannot write it (GNU sparse headers, a negative size, a bad checksum, a cut header),
scanned and loaded as a pack does."""

from __future__ import annotations

import io
import signal
import tarfile
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import pytest

from shardpack.errors import ImageError, SourceError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.sources import scan
from shardpack.sources import tars as tars_source
from tests import helpers

BLOCK = 512


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE, patch: dict | None = None) -> bytes:
    """One 512-byte GNU tar header, fields at byte offsets overwritten by `patch`, its
    checksum made again (so tarfile reads it)."""
    info = tarfile.TarInfo(name)
    info.size, info.type = max(size, 0), kind
    block = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    for at, data in (patch or {}).items():
        block[at : at + len(data)] = data
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def member(name: str, data: bytes) -> bytes:
    """A regular member: its header, its data padded to a block."""
    return header(name, len(data)) + data + bytes(-len(data) % BLOCK)


def write(path: Path, *parts: bytes, end: bool = True) -> Path:
    path.write_bytes(b"".join(parts) + (bytes(2 * BLOCK) if end else b""))
    return path


def sample(key: str, seed: int, label: int) -> bytes:
    return member(f"{key}.jpg", helpers.jpeg(seed)) + member(f"{key}.cls", b"%d" % label)


def sparse(name: str, stored: bytes, real_size: int) -> bytes:
    """An old-style GNU sparse member (type S): `stored` kept, `real_size` stated."""
    patch = {386: b"%011o\0" % 0 + b"%011o\0" % len(stored), 483: b"%011o\0" % real_size}
    head = header(name, len(stored), tarfile.GNUTYPE_SPARSE, patch)
    return head + stored + bytes(-len(stored) % BLOCK)


def pax_sparse(name: str, real_size: int) -> bytes:
    """A GNU sparse 1.0 member (pax records, then its map as the data's first block): one
    empty stretch stored, `real_size` stated."""
    body = b""
    for key, value in {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(real_size),
    }.items():
        record = f" {key}={value}\n".encode()
        length = len(record) + len(str(len(record) + 2))
        body += str(length).encode() + record
    records = header("././@PaxHeader", len(body), tarfile.XHDTYPE) + body
    sparse_map = b"1\n0\n0\n".ljust(BLOCK, b"\0")
    return records + bytes(-len(body) % BLOCK) + header(name, BLOCK) + sparse_map


def keys(dataset) -> list[str]:
    return [item.key for item in dataset.splits["train"]]


@contextmanager
def deadline(seconds: int):
    """Fail, not hang, where a walk would never end (a pure-Python loop: SIGALRM stops it)."""

    def stop(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---- 5, 7: sparse members --------------------------------------------------------------------


@pytest.mark.parametrize("kind", [sparse, pax_sparse])
def test_a_sparse_image_is_refused_never_a_neighbours_bytes(tmp_path, kind):
    # a's image states 2,048 bytes and stores none: read as stated, they are b's header and JPEG
    made = kind("a.jpg", b"", 2048) if kind is sparse else kind("a.jpg", 2048)
    src = write(tmp_path / "t.tar", member("a.cls", b"0"), made, sample("b", 2, 1))
    dataset = scan(src)
    assert keys(dataset) == ["t.tar:b"]
    assert "is sparse: refused" in dict(dataset.skipped)["t.tar:a"]


def test_sparse_captions_claiming_holes_cost_no_memory(tmp_path):
    # 100 samples whose .txt states 16 MiB (less a byte: under the member limit), storing 10
    parts = []
    for i in range(100):
        parts += [member(f"s{i:03d}.jpg", helpers.jpeg(i % 3)),
                  sparse(f"s{i:03d}.txt", b"x" * 10, 16 * 2**20 - 1)]  # fmt: skip
    src = write(tmp_path / "t.tar", *parts)
    tracemalloc.start()
    try:
        dataset = scan(src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert keys(dataset) == [] and len(dataset.skipped) == 100
    assert all("is sparse" in reason for _, reason in dataset.skipped)
    assert peak < 4 * 2**20, peak  # the tar is 300 KB


def test_the_scan_bounds_the_small_members_it_keeps(tmp_path, monkeypatch):
    monkeypatch.setattr(tars_source, "MAX_KEPT_BYTES", 1000)
    parts = [member(f"s{i}.jpg", helpers.jpeg(i)) + member(f"s{i}.txt", b"c" * 300)
             for i in range(5)]  # fmt: skip
    src = write(tmp_path / "t.tar", *parts)
    with pytest.raises(SourceError, match=r"t\.tar: the tars' members but the images .* over "
                                          r"1,000 bytes"):  # fmt: skip
        scan(src)


# ---- 6, 8: walks that would not end, tars that end early --------------------------------------


def test_a_negative_size_ends_the_walk_and_is_named(tmp_path):
    # b.jpg's size is -512 (base-256): tarfile's next header is b's own, again and again
    negative = b"\xff" + (-512 % 2**88).to_bytes(11, "big")
    at = len(sample("a", 1, 0))
    src = write(tmp_path / "t.tar", sample("a", 1, 0),
                header("b.jpg", 0, patch={124: negative}), sample("c", 3, 1))  # fmt: skip
    with deadline(20):
        dataset = scan(src)
    assert keys(dataset) == ["t.tar:a"]
    ((key, reason),) = dataset.skipped
    assert key == f"t.tar:@{at}"
    assert f"ends early at byte {at:,}" in reason and "size of -512 bytes" in reason
    assert "samples found past it: 1;" in reason  # c, found by its headers


def six_samples(path: Path) -> tuple[Path, int]:
    """Six samples as tarfile writes them; the offset of the fourth one's first header."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(6):
            for ext, data in (("jpg", helpers.jpeg(i)), ("cls", b"%d" % (i % 2))):
                info = tarfile.TarInfo(f"s{i}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with tarfile.open(path) as tar:
        return path, tar.getmember("s3.jpg").offset


def test_a_header_with_a_bad_checksum_is_said_with_what_it_loses(tmp_path):
    src, at = six_samples(tmp_path / "t.tar")
    data = bytearray(src.read_bytes())
    data[at] ^= 0x01  # s3.jpg -> r3.jpg, the checksum no longer matching
    src.write_bytes(data)
    dataset = scan(src)
    assert keys(dataset) == ["t.tar:s0", "t.tar:s1", "t.tar:s2"]
    ((key, reason),) = dataset.skipped
    assert key == f"t.tar:@{at}"
    assert f"ends early at byte {at:,}: a damaged header (bad checksum)" in reason
    assert "samples found past it: 3;" in reason  # s3 (its .cls), s4, s5


def test_a_tar_cut_inside_a_header_is_said_and_fail_stops(tmp_path):
    src, at = six_samples(tmp_path / "t.tar")
    src.write_bytes(src.read_bytes()[: at + 100])
    dataset = scan(src)
    assert keys(dataset) == ["t.tar:s0", "t.tar:s1", "t.tar:s2"]
    assert "cut inside a header" in dict(dataset.skipped)[f"t.tar:@{at}"]
    done = helpers.run_cli("pack", str(src), str(tmp_path / "out"), "--on-error", "fail")
    helpers.one_line_error(done, f"t.tar:@{at}", "ends early", "cut inside a header")
    assert not (tmp_path / "out" / "index.json").exists()


def test_a_tar_whose_last_padding_is_missing_is_whole(tmp_path):
    src, _ = six_samples(tmp_path / "t.tar")
    with tarfile.open(src) as tar:
        last = tar.getmember("s5.cls")
    src.write_bytes(src.read_bytes()[: last.offset_data + last.size])
    dataset = scan(src)
    assert len(keys(dataset)) == 6 and not dataset.skipped


# ---- 9: brace patterns -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("x-{0..99999999999}.tar", "names over 1,000,000 tars"),
        ("x-{0..1999999}.tar", "names over 1,000,000 tars"),
        ("x-{0..999}-{0..9999}.tar", "names over 1,000,000 tars"),
        ("x-{0..%s}.tar" % ("9" * 5000), "a range bound of 5,000 digits"),
    ],
)
def test_a_brace_pattern_is_counted_before_it_is_expanded(tmp_path, pattern, said):
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(SourceError, match=said):
            scan(f"{tmp_path}/{pattern}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20 and time.perf_counter() - started < 2, peak


def test_a_brace_pattern_still_names_its_tars(tmp_path):
    for name in ("x-08.tar", "x-09.tar", "x-10.tar"):
        write(tmp_path / name, sample(name[:4], 1, 0))
    dataset = scan(f"{tmp_path}/x-{{08..10}}.tar")
    assert keys(dataset) == ["x-08.tar:x-08", "x-09.tar:x-09", "x-10.tar:x-10"]


# ---- 10: a key repeated later in a tar -------------------------------------------------------


def test_a_repeated_key_is_kept_apart_and_dedup_keeps_both(tmp_path):
    # webdataset reads three samples (group_by_keys starts one where the key changes)
    src = write(tmp_path / "t.tar", sample("a", 1, 0), sample("b", 2, 1), sample("a", 3, 2))
    dataset = scan(src)
    assert keys(dataset) == ["t.tar:a", "t.tar:b", "t.tar:a#2"]
    assert any("kept apart as t.tar:a#2" in w for w in dataset.warnings), dataset.warnings
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, dedup="exact"))
    packed = {key: example["label"] for key, example in helpers.our_examples(out).items()}
    assert packed == {"t.tar:a": [0], "t.tar:b": [1], "t.tar:a#2": [2]}


@pytest.mark.parametrize(("planted", "why"), [
    (b"[1, 2]", "is not a JSON object"), (b"{not json", "is not JSON text"),
    (b'"text"', "is not a JSON object"), (b"[" * 100_000 + b"]" * 100_000, "is nested too deeply"),
])  # fmt: skip
def test_a_json_that_is_no_object_skips_its_sample_once(tmp_path, planted, why):
    """A sample whose .json is no JSON object was listed twice in the skips (index.json's
    `skipped` naming it twice, `num_skipped` counting it twice): its reason was set on the
    sample after the skips were listed, and its row refused again. Its reason says what it
    is (text of no JSON, nested too deeply: each was 'not a JSON object')."""
    src = write(tmp_path / "t.tar", sample("a", 1, 0), member("a.json", b'{"x": 1}'),
                sample("b", 2, 1), member("b.json", planted))  # fmt: skip
    result = pack(src, tmp_path / "out", PackOptions(workers=1))
    assert result.num_records == 1
    assert result.index.num_skipped == 1
    assert [s.key for s in result.index.skipped] == ["t.tar:b"]
    assert why in result.index.skipped[0].reason


# ---- 11: a tar rewritten after the scan -----------------------------------------------------


def test_a_tar_rewritten_after_the_scan_is_refused_by_name(tmp_path):
    a, b = helpers.jpeg(1), helpers.jpeg(2)
    size = max(len(a), len(b))
    a, b = a + bytes(size - len(a)), b + bytes(size - len(b))  # same length: same offsets
    src = write(tmp_path / "t.tar", member("a.jpg", a), member("a.cls", b"0"),
                member("b.jpg", b), member("b.cls", b"1"))  # fmt: skip
    dataset = scan(src)
    first = dataset.splits["train"][0]
    assert tars_source.SOURCE.load(first, dataset.root, PackOptions(), {}) == a
    write(src, member("b.jpg", b), member("b.cls", b"1"), member("a.jpg", a),
          member("a.cls", b"0"))  # fmt: skip
    with pytest.raises(ImageError, match=rf"{src}: changed since the scan") as caught:
        tars_source.SOURCE.load(first, dataset.root, PackOptions(), {})
    assert caught.value.key == "t.tar:a"


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_long_and_foreign_names_load_as_scanned(tmp_path, fmt):
    names = ["short", "d" * 60 + "/" + "k" * 70, "é" * 30, "a/" + "ü" * 70]
    if fmt == tarfile.USTAR_FORMAT:
        names = names[:3]  # ustar holds no name of over 256 bytes
    src = tmp_path / "t.tar"
    with tarfile.open(src, "w", format=fmt, encoding="utf-8") as tar:
        for i, name in enumerate(names):
            info = tarfile.TarInfo(f"{name}.jpg")
            info.size = len(helpers.jpeg(i))
            tar.addfile(info, io.BytesIO(helpers.jpeg(i)))
    dataset = scan(src)
    loaded = [tars_source.SOURCE.load(item, dataset.root, PackOptions(), {})
              for item in dataset.splits["train"]]  # fmt: skip
    assert loaded == [helpers.jpeg(i) for i in range(len(names))]


def test_the_count_past_an_early_end_is_bounded(tmp_path, monkeypatch):
    # a damaged header, then 64 KiB that is no tar, then a whole sample
    damaged = bytearray(header("b.jpg", 0))
    damaged[0] ^= 0x01
    src = write(tmp_path / "t.tar", sample("a", 1, 0), bytes(damaged), b"\x01" * 2**16,
                sample("c", 3, 1))  # fmt: skip
    assert (
        "samples found past it: 1;" in dict(scan(src).skipped)[f"t.tar:@{len(sample('a', 1, 0))}"]
    )
    monkeypatch.setattr(tars_source, "_MAX_LOST_TRIES", 16)
    ((_, reason),) = scan(src).skipped
    assert "samples found past it: at least 0;" in reason


def test_a_sample_without_the_label_member_the_others_hold_says_so(tmp_path):
    """Its sample said "label b'' is not a class number (decimal, from 0)": a label it never
    had, in bytes' repr. So did a sample a pax header renamed away from its .cls."""
    renamed = tarfile.TarInfo("s2.jpg")  # pax path: the image is sample `moved`'s
    renamed.size, renamed.pax_headers = len(helpers.jpeg(2)), {"path": "moved.jpg"}
    pax = renamed.tobuf(tarfile.PAX_FORMAT) + helpers.jpeg(2) + bytes(-renamed.size % BLOCK)
    src = write(tmp_path / "a.tar", sample("s0", 0, 0), member("s1.jpg", helpers.jpeg(1)),
                pax, member("s2.cls", b"1"))  # fmt: skip
    dataset = scan(src)
    assert keys(dataset) == ["a.tar:s0"]
    missing = "no .cls member, which other samples hold: give each sample its label"
    assert dict(dataset.skipped) == {
        "a.tar:s1": missing,
        "a.tar:moved": missing,
        "a.tar:s2": "no image member (.jpg, .jpeg, .png, .webp, ...)",
    }
