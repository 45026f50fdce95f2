"""What shardpack withstands from SRC. Each test builds the hostile file for real (FIFOs,
device links, sparse files, TIFF bombs, crafted pickles written opcode by opcode), runs
`shardpack pack` on it in a child process with a time limit and an address-space limit, and
checks the outcome: a skip with its reason in index.json, or one line on stderr and exit 2;
never a hang, a traceback, a crash or unbounded memory.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import pickle
import resource
import signal
import struct
import subprocess
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.images import max_file_bytes
from shardpack.options import PackOptions
from shardpack.storage.srcfiles import RefusedFile, read_regular
from tests import forkserver, helpers

# The child's address space: room for Python, numpy and OpenCV (about 1.5 GB of mappings),
# far less than what reading /dev/zero or a 3 GB file whole would need.
_ADDRESS_SPACE = 3 * 2**30
_LIMITS = ((resource.RLIMIT_AS, _ADDRESS_SPACE),)
# Runs the CLI, then leaves its peak resident memory (KiB, its own or a worker's) in a file.
_RUNNER = f"""
import resource, runpy, sys
peak_file = sys.argv.pop(1)
try:
    runpy.run_module("shardpack", run_name="__main__", alter_sys=True)
finally:
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    open(peak_file, "w").write(str(max({helpers.PEAK_KIB}, workers)))
"""


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    peak_mib: float


def _pack(tmp_path: Path, src: Path, *args: str, timeout: float = 60) -> Run:
    """`shardpack pack SRC tmp_path/out --workers 1 ARGS` in its own session, killed (with any
    worker it started) if it runs past `timeout`."""
    peak = tmp_path / "peak"
    child = forkserver.start(
        _RUNNER, str(peak), "pack", str(src), str(tmp_path / "out"), "--workers", "1",
        "--no-progress", *args, start_new_session=True, limits=_LIMITS,
    )  # fmt: skip
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        pytest.fail(f"shardpack pack still running after {timeout} s")
    peak_mib = int(peak.read_text()) / 1024 if peak.exists() else float("nan")
    return Run(child.returncode, stdout, stderr, peak_mib)


def _refused(run: Run, *words: str) -> str:
    """The run ended in one line on stderr and exit 2, holding every word; returns the line."""
    assert run.rc == 2, (run.rc, run.stderr[-2000:])
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _skipped(tmp_path: Path, run: Run) -> dict[str, str]:
    """The run succeeded; returns index.json's skipped items as {key: reason}."""
    assert run.rc == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    return {s["key"]: s["reason"] for s in index["skipped"]}


# ---- special files in a class folder ---------------------------------------------------------


def test_a_fifo_named_like_an_image_is_skipped_not_waited_on(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 2})
    os.mkfifo(src / "a" / "pipe.jpg")
    skipped = _skipped(tmp_path, _pack(tmp_path, src, timeout=60))
    assert skipped == {"a/pipe.jpg": "not a regular file (a FIFO)"}


def test_a_name_with_terminal_codes_and_line_breaks_is_printed_escaped(tmp_path):
    """The error line and the summary escape a hostile name: its codes reached the terminal
    as they were (a title set, a line forged after a carriage return)."""
    src = helpers.make_tree(tmp_path / "src", {"a": 2})
    name = "\x1b]0;pwned\x07\nFAKE\rx.jpg"
    os.mkfifo(src / "a" / name)
    for extra, stream in ((["--on-error", "fail"], "stderr"), ([], "stdout")):
        run = helpers.cli("pack", str(src), str(tmp_path / f"out{len(extra)}"), "--workers", "1",
                          "--no-progress", *extra, timeout=60)  # fmt: skip
        text = getattr(run, stream)
        assert "a/\\x1b]0;pwned\\x07\\nFAKE\\rx.jpg: not a regular file" in text, text
        assert not any(c in text for c in "\x1b\x07\r")
        if stream == "stderr":
            assert run.returncode == 2 and len(text.strip().splitlines()) == 1, text


def test_dev_zero_linked_as_an_image_is_skipped_unread(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 2})
    (src / "a" / "zero.jpg").symlink_to("/dev/zero")
    run = _pack(tmp_path, src)
    assert _skipped(tmp_path, run) == {"a/zero.jpg": "not a regular file (a character device)"}
    assert run.peak_mib < 400


def test_a_fifo_in_a_local_url_src_is_skipped_not_waited_on(tmp_path):
    """local:// (fsspec's name for this disk) is this disk: the same special-file checks."""
    src = helpers.make_tree(tmp_path / "src", {"a": 2})
    os.mkfifo(src / "a" / "pipe.jpg")
    skipped = _skipped(tmp_path, _pack(tmp_path, f"local://{src}", timeout=60))
    assert skipped == {"a/pipe.jpg": "not a regular file (a FIFO)"}


def test_a_fifo_or_dev_zero_named_by_local_url_in_a_manifest_is_skipped_unread(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 2})
    os.mkfifo(src / "pipe.jpg")
    rows = [{"path": f"local://{src}/a/img_000.jpg", "label": "a"},
            {"path": f"local://{src}/pipe.jpg", "label": "a"},
            {"path": "local:///dev/zero", "label": "a"}]  # fmt: skip
    run = _pack(tmp_path, helpers.write_csv(src / "rows.csv", rows), timeout=60)
    reasons = sorted(_skipped(tmp_path, run).values())  # by line: the FIFO's is line 3
    assert len(reasons) == 2, reasons
    assert "pipe.jpg: not a regular file (a FIFO)" in reasons[0]
    assert "/dev/zero: not a regular file (a character device)" in reasons[1]
    assert run.peak_mib < 400


def test_a_3_gb_sparse_jpeg_is_refused_before_it_is_read(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 2})
    big = src / "a" / "big.jpg"
    with open(big, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0")  # a JPEG's first bytes, then 3 GB of holes
        f.truncate(3 * 2**30)
    run = _pack(tmp_path, src)
    (reason,) = _skipped(tmp_path, run).values()
    limit = max_file_bytes(PackOptions().max_pixels)
    assert reason == (f"3,221,225,472 bytes, over the limit of {limit:,} bytes, the most an image "
                      "of --max-pixels can take: raise --max-pixels if it is an image, else "
                      "remove it")  # fmt: skip
    assert run.peak_mib < 400


def test_a_fifo_swapped_in_after_the_scan_is_refused_at_read(tmp_path):
    # The worker's read checks what it opened (fstat), not what the scan saw.
    fifo = tmp_path / "late.jpg"
    os.mkfifo(fifo)
    outcome: list[object] = []

    def read() -> None:
        try:
            read_regular(str(fifo), 2**20)
        except RefusedFile as e:
            outcome.append(str(e))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert outcome == ["not a regular file (a FIFO)"]


def test_a_file_that_grows_past_the_limit_is_not_read_past_it(tmp_path):
    path = tmp_path / "growing.jpg"
    path.write_bytes(b"x" * 1000)
    with pytest.raises(RefusedFile, match="over the limit of 999"):
        read_regular(str(path), 999)
    assert read_regular(str(path), 1000) == b"x" * 1000


def test_a_filesystem_that_reads_less_than_asked_gives_the_whole_file(tmp_path, monkeypatch):
    """A network or FUSE filesystem may return less than a read asks: the file is read on
    until all of fstat's bytes are in, and every read is kept (of two, the first alone was)."""
    path = tmp_path / "photo.jpg"
    path.write_bytes(bytes(range(256)) * 40)
    read = os.read
    monkeypatch.setattr(os, "read", lambda fd, size: read(fd, min(size, 6000)))
    assert read_regular(str(path), 2**20) == path.read_bytes()


def test_links_to_regular_images_are_followed(tmp_path):
    # A symlink farm (links into a store of real images) is a common way to lay out a dataset.
    store = helpers.make_tree(tmp_path / "store", {"all": 3})
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for image in sorted((store / "all").iterdir()):
        (src / "a" / image.name).symlink_to(image)
    assert _skipped(tmp_path, _pack(tmp_path, src)) == {}
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["splits"]["train"]["num_records"] == 3


# ---- images whose header lies or hides its size ----------------------------------------------


def test_a_tiff_bomb_is_refused_by_max_pixels_before_decoding(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 1})
    ok, data = cv2.imencode(
        ".tiff",
        np.zeros((5000, 5000), np.uint8),
        [cv2.IMWRITE_TIFF_COMPRESSION, 8],  # deflate
    )
    assert ok and len(data) < 300_000  # 25 million pixels in a small file
    (src / "a" / "bomb.tiff").write_bytes(data.tobytes())
    run = _pack(tmp_path, src, "--max-pixels", "1000000")
    assert _skipped(tmp_path, run) == {
        "a/bomb.tiff": "5000x5000 pixels is over --max-pixels 1000000"
    }
    assert run.peak_mib < 400


def test_opencv_warnings_do_not_reach_stderr(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 1})
    _, data = cv2.imencode(".tiff", helpers.image(0))
    data = bytearray(data.tobytes())
    at = data.find(struct.pack("<HHI", 259, 3, 1))  # Compression: a scheme libtiff lacks
    struct.pack_into("<H", data, at + 8, 9999)
    (src / "a" / "odd.tiff").write_bytes(bytes(data))
    run = _pack(tmp_path, src)
    assert run.rc == 0, run.stderr
    assert "WARN" not in run.stderr and "ERROR" not in run.stderr and "grfmt" not in run.stderr


# ---- class names -----------------------------------------------------------------------------


def test_a_class_folder_named_with_a_newline_is_refused(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 1, "b\nc": 1})
    line = _refused(_pack(tmp_path, src), str(src), "b\\nc", "rename it")
    assert "one per line" in line
    assert not (tmp_path / "out").exists()


# ---- crafted CIFAR pickles -------------------------------------------------------------------


def _unicode(text: str) -> bytes:
    data = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(data)) + data


def _batch(data: bytes, labels: bytes = b"]") -> bytes:
    """A protocol-2 pickle of {"data": <data opcodes>, "labels": <labels opcodes>}."""
    return (
        b"\x80\x02}(" + _unicode("data") + data + _unicode("labels") + labels + b"u."
    )  # EMPTY_DICT MARK key value key value SETITEMS STOP


_RECONSTRUCT = b"cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
_ZERO_LABELS = b"](" + b"K\x00" * 4 + b"e"  # [0, 0, 0, 0]
_HOSTILE_PICKLES = {
    # a dict key nested a million deep: hashing it overflowed the C stack (exit 139)
    "deep-tuple-key": (
        "batches.meta",
        b"\x80\x02}K\x00" + b"\x85" * 1_000_000 + b"K\x00s.",
        "nested more than 16 deep",
    ),
    "deep-marks": (
        "batches.meta",
        b"\x80\x02}" + b"(" * 500_000 + b"K\x00" + b"t" * 500_000 + b"K\x00s.",
        "nested more than 16 deep",
    ),
    # 20 million Python objects from 93 bytes
    "object-dtype": (
        "data_batch_1",
        _batch(
            _RECONSTRUCT + b"J" + struct.pack("<i", 20_000_000) + b"\x85" + _unicode("O") + b"\x87R"
        ),
        "_reconstruct(ndarray, (20000000,), 'O')",
    ),
    # ndarray((65536, 3072), 'u1', 1 byte, 0, (0, 0)): 192 MiB in every worker from a tiny file
    "zero-stride": (
        "data_batch_1",
        _batch(
            b"cnumpy\nndarray\n(J\x00\x00\x01\x00M\x00\x0c\x86"
            + _unicode("u1")
            + b"C\x01\x00K\x00K\x00K\x00\x86tR",
            b"](" + b"K\x00" * 65536 + b"e",
        ),
        "numpy.ndarray",
    ),
    # an array with no data: numpy hands back whatever its allocator held
    "no-data": (
        "data_batch_1",
        _batch(_RECONSTRUCT + b"K\x04M\x00\x0c\x86C\x01B\x87R", _ZERO_LABELS),
        "_reconstruct(ndarray, (4, 3072), 'B')",
    ),
    # a state naming 4 x 3072 bytes with 6 present
    "short-data": (
        "data_batch_1",
        _batch(
            _RECONSTRUCT
            + b"K\x00\x85C\x01b\x87R(K\x01K\x04M\x00\x0c\x86cnumpy\ndtype\n"
            + _unicode("u1")
            + b"\x89\x88\x87R(K\x03"
            + _unicode("|")
            + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89C\x06abcdeftb",
            _ZERO_LABELS,
        ),
        "with 6 bytes of data, not the 12288 it needs",
    ),
    # quadratic in the length of the text: 27 s for 10,000 characters
    "punycode": (
        "batches.meta",
        b"\x80\x02}"
        + _unicode("label_names")
        + b"c_codecs\nencode\n"
        + _unicode("".join(chr(0x4E00 + i % 20000) for i in range(10_000)))
        + _unicode("punycode")
        + b"\x86Rs.",
        "_codecs.encode with 'punycode'",
    ),
    # LONG_BINPUT 4e9: the C unpickler sizes its memo array to the index
    "huge-memo-index": (
        "batches.meta",
        b"\x80\x02}r\x00\x28\x6b\xeeK\x00K\x00s.",
        "memo of more than",
    ),
    "object-opcode": ("test_batch", b"\x80\x02(c_codecs\nencode\no.", "the opcode OBJ"),
}


@pytest.mark.parametrize("case", list(_HOSTILE_PICKLES))
def test_a_crafted_cifar_pickle_is_refused_fast_in_bounded_memory(tmp_path, case):
    victim, content, words = _HOSTILE_PICKLES[case]
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=4, batches=1)
    (src / victim).write_bytes(content)
    run = _pack(tmp_path, src, timeout=20)
    _refused(run, str(src / victim), "refused to load", words)
    assert run.peak_mib < 400


def _long_label_batch(label: int) -> bytes:
    return pickle.dumps({b"labels": [label], b"data": np.zeros((1, 3072), np.uint8)}, protocol=2)


_BAD_CONTENTS = {
    "key-not-utf8": ("data_batch_1", b"\x80\x02}(C\x02\xff\xfeK\x00u.", "not UTF-8"),
    "name-not-utf8": (
        "batches.meta",
        b"\x80\x02}" + _unicode("label_names") + b"](C\x02\xff\xfees.",
        "not UTF-8",
    ),
    "key-of-5000-digits": (
        "batches.meta",
        pickle.dumps({10**5000: 0}, protocol=2),
        "the opcode LONG4",
    ),
    "label-of-5000-digits": ("test_batch", _long_label_batch(10**5000), "the opcode LONG4"),
    "label-of-600-digits": ("test_batch", _long_label_batch(10**600), "wider than 64 bits"),
}


@pytest.mark.parametrize("case", list(_BAD_CONTENTS))
def test_names_and_numbers_no_cifar_file_holds_are_one_line_errors(tmp_path, case):
    victim, content, words = _BAD_CONTENTS[case]
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=4, batches=1)
    (src / victim).write_bytes(content)
    _refused(_pack(tmp_path, src, timeout=30), str(src / victim), words)


def test_a_binary_class_names_file_that_is_not_utf8_is_a_one_line_error(tmp_path):
    src = helpers.make_cifar10_binary(tmp_path / "cifar", per_batch=4, batches=1)
    (src / "batches.meta.txt").write_bytes(b"cat\n\xff\xfe\n")
    _refused(_pack(tmp_path, src), str(src / "batches.meta.txt"), "not UTF-8 text")


# ---- an S3 SRC: keys that the filesystem would read as another object ------------------------


def test_s3_keys_with_an_empty_part_or_a_version_query_are_skipped_not_read_as_another(
    tmp_path, s3
):
    """`cat//a.jpg` was read through `cat/a.jpg`, and s3fs cut `a.jpg?versionId=2.jpg` at `?`:
    three records of the same image. Each key is skipped with the reason instead."""
    png = [cv2.imencode(".png", helpers.image(seed))[1].tobytes() for seed in range(4)]
    keys = ["src/cat/a.jpg", "src/cat//a.jpg", "src/cat/a.jpg?versionId=2.jpg", "src/dog/b.png"]
    for key, data in zip(keys, png, strict=True):  # as written: s3fs's own put would cut them
        s3.fs.call_s3("put_object", Bucket=s3.name, Key=key, Body=data)
    run = _pack(tmp_path, s3.url("src"), timeout=120)
    skipped = _skipped(tmp_path, run)
    assert sorted(skipped) == ["cat//a.jpg", "cat/a.jpg?versionId=2.jpg"], skipped
    assert all("cannot be read as itself" in reason for reason in skipped.values()), skipped
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert sum(s["num_records"] for s in index["splits"]["train"]["shards"]) == 2


def test_s3_objects_over_the_image_limit_are_refused_from_the_listing_never_fetched(tmp_path, s3):
    """A 70 MiB object named like an image, past the 64 MiB (and a little) an image of 1,000
    pixels may take: skipped from its listed size, as a disk's file from its stat; no GET of
    it reaches the store."""
    png = [cv2.imencode(".png", helpers.image(seed))[1].tobytes() for seed in range(3)]
    for key, data in (("src/a/0.png", png[0]), ("src/a/1.png", png[1]), ("src/b/2.png", png[2]),
                      ("src/b/big.jpg", b"\xff\xd8" + bytes(70 << 20))):  # fmt: skip
        s3.write(key, data)
    run = _pack(tmp_path, s3.url("src"), "--max-pixels", "1000", timeout=120)
    skipped = _skipped(tmp_path, run)
    assert list(skipped) == ["b/big.jpg"] and "over the limit" in skipped["b/big.jpg"], skipped
    assert "src/b/big.jpg" not in s3.fetched("src/")


# ---- HTTP(S) images in a manifest: a server that ignores Range, one that never answers -------


class _HostileImages(http.server.BaseHTTPRequestHandler):
    """/imgs/ lists its images (fsspec sizes them from it); ok.png is an image; big.jpg is a
    1 GiB answer that ignores Range; hang.jpg is never answered."""

    png = cv2.imencode(".png", helpers.image(0))[1].tobytes()

    def do_GET(self) -> None:
        if self.path.endswith("hang.jpg"):
            time.sleep(600)
            return
        listing = (
            b'<a href="/imgs/ok.png">o</a><a href="/imgs/big.jpg">b</a> <a href="/imgs/hang.jpg">'
        )
        body = {"/imgs": listing, "/imgs/": listing, "/imgs/ok.png": self.png}.get(self.path)
        self.send_response(200 if body is not None or self.path.endswith("big.jpg") else 404)
        self.send_header("Content-Length", str(1 << 30 if body is None else len(body)))
        self.end_headers()
        with suppress(OSError):
            for _ in range(0 if body is not None else 1024):
                self.wfile.write(bytes(1 << 20))
            self.wfile.write(body or b"")

    do_HEAD = do_GET

    def log_message(self, *args) -> None:
        pass


def test_http_images_are_read_with_a_byte_cap_and_timeouts(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostileImages)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/imgs"
        rows = [
            {"path": f"{url}/{name}", "label": "a"} for name in ("ok.png", "big.jpg", "hang.jpg")
        ]
        manifest = helpers.write_csv(tmp_path / "rows.csv", rows)
        start = time.monotonic()
        options = ("--storage-option", "read_timeout=2", "--max-pixels", "1000",  # 64 MiB
                   "--allow-private-urls", "--retries", "0")  # fmt: skip
        run = _pack(tmp_path, manifest, *options, timeout=120)
    finally:
        server.shutdown()
    skipped = {key.rsplit("/", 1)[-1]: reason for key, reason in _skipped(tmp_path, run).items()}
    assert sorted(skipped) == ["big.jpg", "hang.jpg"], skipped
    assert "over the limit" in skipped["big.jpg"] and "imeout" in skipped["hang.jpg"], skipped
    assert time.monotonic() - start < 60 and run.peak_mib < 600, run.peak_mib


class _NoListings(http.server.SimpleHTTPRequestHandler):
    """A plain web server (or CDN): files answered, folders refused."""

    def list_directory(self, path):
        self.send_error(403)

    def log_message(self, *args) -> None:
        pass


def test_http_images_behind_a_server_that_lists_no_folders_are_packed(tmp_path):
    """The scan sized each image from a listing of its folder URL: 'No such file or directory'
    for every image of a server that lists none. Now the scan asks the server nothing."""
    site = helpers.make_tree(tmp_path / "site", {"cat": 2, "dog": 1})
    handler = functools.partial(_NoListings, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        rows = [{"path": f"{url}/{p.relative_to(site).as_posix()}", "label": p.parent.name}
                for p in sorted(site.rglob("*.*"))]  # fmt: skip
        run = _pack(tmp_path, helpers.write_csv(tmp_path / "rows.csv", rows),
                    "--allow-private-urls", timeout=120)  # fmt: skip
    finally:
        server.shutdown()
    assert _skipped(tmp_path, run) == {}
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert sum(s["num_records"] for s in index["splits"]["train"]["shards"]) == 3
