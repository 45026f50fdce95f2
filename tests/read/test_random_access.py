"""Random access and the contact sheet: DALI index files, read_record, Records at exit, the
tfrecord package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import pytest
from typer.testing import CliRunner

from shardpack.cli import app
from shardpack.containers.example import decode_example
from shardpack.containers.tfrecord import iter_records, record_spans
from shardpack.errors import IndexFormatError, OutputError, ShardpackError
from shardpack.options import PackOptions
from shardpack.packing.daliindex import write_index_files
from shardpack.packing.packer import pack
from shardpack.read.random_access import Records, read_record
from shardpack.read.stream import iter_examples
from tests import helpers
from tests.helpers import at, make_tree


@pytest.fixture(scope="module")
def packed(shared_pack) -> Path:
    return shared_pack({"a": 6, "b": 5}, shards=3, workers=1, index_files=True)


def test_index_files_match_the_framing(packed: Path):
    for shard in sorted(packed.glob("*.tfrecord-*")):
        lines = (packed / "idx" / f"{shard.name}.idx").read_text().splitlines()
        spans = [(int(o), int(n)) for o, n in (line.split() for line in lines)]
        assert spans == list(record_spans(*at(shard)))
        assert spans[0][0] == 0 and sum(n for _, n in spans) == shard.stat().st_size


def test_tfrecord_package_reads_with_our_index(packed: Path):
    import json
    import subprocess
    import sys

    shard = sorted(packed.glob("*.tfrecord-00001-*"))[0]
    index = str(packed / "idx" / f"{shard.name}.idx")
    # A process of its own: the package's protos clash with TensorFlow's if both are loaded.
    # shard=(i, 2) makes it split the file at the offsets our index file gives. Its __init__
    # tries its torch wrapper, not what is read here: torch stays out (~4 s of CPU).
    code = (
        "import json, sys; sys.modules['torch'] = None; "
        "from tfrecord.reader import tfrecord_loader; "
        "rows = [r for i in (0, 1) for r in tfrecord_loader(sys.argv[1], sys.argv[2], "
        "{'label': 'int', 'key': 'byte'}, shard=(i, 2))]; "
        "print(json.dumps([[int(r['label'][0]), bytes(r['key']).decode()] for r in rows]))"
    )
    run = subprocess.run([sys.executable, "-c", code, str(shard), index], capture_output=True,
                         text=True, check=True)  # fmt: skip
    ours = [[ex["label"][0], ex["key"][0].decode()]
            for ex in (decode_example(data) for _, data in iter_records(*at(shard)))]  # fmt: skip
    assert len(ours) == 3 and json.loads(run.stdout) == ours


def test_read_record_is_the_ith_record(packed: Path, tmp_path: Path):
    every = list(iter_examples(packed))
    assert [read_record(packed, "train", i) for i in range(len(every))] == every
    import shutil

    bare = Path(shutil.copytree(packed, tmp_path / "bare"))
    shutil.rmtree(bare / "idx")  # without index files it hops over headers instead
    assert read_record(bare, "train", 7) == every[7]
    with Records(packed, "train") as records:  # a slice as a list's, negative steps too
        assert records[2:5] == every[2:5] and records[::-3] == every[::-3]
        assert records[len(every) :] == []
    with pytest.raises(IndexError):
        read_record(packed, "train", len(every))
    with pytest.raises(IndexError, match=f"record {-len(every) - 1} is outside split 'train' of "
                       f"{len(every)} records"):  # fmt: skip
        read_record(packed, "train", -len(every) - 1)


def test_gzip_refuses_random_access(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"a": 2})
    with pytest.raises(ShardpackError, match="index_files=True needs uncompressed"):
        PackOptions(compression="gzip", index_files=True)
    pack(src, tmp_path / "out", PackOptions(compression="gzip", workers=1))
    with pytest.raises(IndexFormatError, match="GZIP"):
        write_index_files(tmp_path / "out")


def test_cli_index_files_and_preview(packed: Path, tmp_path: Path):
    runner = CliRunner()
    result = runner.invoke(app, ["index-files", str(packed)])
    assert result.exit_code == 0 and "wrote 3 index files" in result.output
    png = tmp_path / "grid.png"
    result = runner.invoke(app, ["preview", str(packed), "--n", "9", "--out", str(png)])
    assert result.exit_code == 0, result.output
    sheet = cv2.imread(str(png))
    assert sheet.shape == (3 * (128 + 22), 3 * 128, 3)
    assert sheet[:128, :128].std() > 5  # a real thumbnail, not a blank cell


@pytest.mark.heavy
def test_dali_reads_the_shards_through_our_index_files(packed: Path):
    """NVIDIA DALI's fn.readers.tfrecord on the CPU, in a process of its own."""
    import json
    import subprocess
    import sys

    helpers.heavy_import("nvidia.dali")
    code = """
import glob, json, os, sys
import numpy as np
from nvidia.dali import fn, pipeline_def
import nvidia.dali.tfrecord as tfrec
out = sys.argv[1]
shards = sorted(glob.glob(os.path.join(out, "*.tfrecord-*")))
index = [os.path.join(out, "idx", os.path.basename(s) + ".idx") for s in shards]
@pipeline_def(batch_size=11, num_threads=1, device_id=None)
def pipe():
    r = fn.readers.tfrecord(path=shards, index_path=index, random_shuffle=False, name="r",
        features={"label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                  "image": tfrec.FixedLenFeature((), tfrec.string, "")})
    return r["label"], fn.decoders.image(r["image"], device="cpu")
p = pipe()
p.build()
labels, images = p.run()
labels = np.array(labels.as_array()).ravel().tolist()
print(json.dumps({"epoch": p.epoch_size("r"), "labels": labels, "shape": list(images.at(0).shape)}))
"""
    run = subprocess.run([sys.executable, "-c", code, str(packed)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    ours = list(iter_examples(packed))
    assert result["epoch"] == len(ours) == 11
    assert result["labels"] == [r["label"] for r in ours]
    assert result["shape"] == [24, 32, 3]


def test_repacking_drops_stale_index_files(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"a": 4, "b": 3})
    out = tmp_path / "out"
    pack(src, out, PackOptions(shards=2, workers=1, index_files=True))
    pack(src, out, PackOptions(shards=2, workers=1, encode="png", overwrite=True))
    assert not list((out / "idx").glob("*.idx"))  # they described the old bytes
    every = list(iter_examples(out))
    assert read_record(out, "train", 5) == every[5]


def test_an_index_file_of_yours_under_a_name_pack_writes_is_kept(tmp_path: Path):
    """In a folder shardpack did not write, idx/<shard>.idx is the user's like any file under
    a name pack writes: refused, unless --overwrite (it was replaced without a word)."""
    src = make_tree(tmp_path / "src", {"a": 4})
    out = tmp_path / "out"
    (out / "idx").mkdir(parents=True)
    mine = out / "idx" / "src-train.tfrecord-00000-of-00001.idx"
    mine.write_text("mine\n")
    with pytest.raises(OutputError, match=r"idx/src-train.tfrecord-00000-of-00001.idx: exists"):
        pack(src, out, PackOptions(shards=1, workers=1, index_files=True))
    assert mine.read_text() == "mine\n" and not (out / "index.json").exists()
    pack(src, out, PackOptions(shards=1, workers=1, index_files=True, overwrite=True))
    assert mine.read_text() != "mine\n"


def test_a_stale_index_file_is_caught_not_trusted(packed: Path, tmp_path: Path):
    import shutil

    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    idx = sorted((out / "idx").glob("*.idx"))[0]
    lines = idx.read_text().splitlines()
    offset, size = lines[1].split()
    # offsets that point between records: refused when the file is read, before any record
    idx.write_text(f"0 1\n{int(offset) + 3} {size}\n")
    with pytest.raises(IndexFormatError, match=r"line 1: .* rewrite it with write_index_files"):
        read_record(out, "train", 1)
    # a record of the right size that starts elsewhere: caught by its header's CRC
    second = [int(v) for v in lines[1].split()]
    first = int(lines[0].split()[1])
    swapped = [f"0 {second[1]}", f"{second[1]} {first}", *lines[2:]]
    idx.write_text("".join(f"{line}\n" for line in swapped))
    with pytest.raises(ShardpackError, match="damaged or its index file is stale"):
        read_record(out, "train", 1)


def test_an_index_file_cut_short_is_named_not_the_shard_it_indexes(packed: Path, tmp_path: Path):
    import shutil

    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    idx = sorted((out / "idx").glob("*.idx"))[0]
    lines = idx.read_text().splitlines(keepends=True)
    assert len(lines) == 4 and len(list(iter_examples(out))) == 11  # the shards are whole
    idx.write_text("".join(lines[:2]))
    said = rf"{idx.name}: line 3: missing: 2 lines for the shard's 4 records; rewrite it"
    with pytest.raises(IndexFormatError, match=said):
        read_record(out, "train", 0)
    idx.write_text("")
    with pytest.raises(IndexFormatError, match=rf"{idx.name}: line 1: missing: 0 lines"):
        read_record(out, "train", 0)


@pytest.mark.heavy
def test_records_left_open_end_quietly_at_exit_with_tensorflow(shared_pack):
    """Before: 'Exception ignored in: <function Records.__del__>' at exit over WebDataset shards:
    the Records outlived the os module's teardown, and closing its files needed os.close."""
    out = shared_pack({"a": 3, "b": 3}, workers=1, format="webdataset")
    code = "import sys, tensorflow, shardpack; records = shardpack.Records(sys.argv[1]); records[0]"
    run = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Exception ignored" not in run.stderr and "Traceback" not in run.stderr, run.stderr


_FEW_FILES = """
import errno, json, os, resource, sys
import shardpack
from shardpack.read.random_access import Records
with_index_files, plain = sys.argv[1:]
for out in (with_index_files, plain):  # each path's imports done while files can be opened
    with Records(out) as warm:
        warm[0]
readers = [Records(with_index_files), Records(plain)]  # index.json loaded, no shard open yet
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError as e:
    assert e.errno == errno.EMFILE, e
got = []
for call in (lambda: shardpack.load_index(plain), lambda: readers[0][0], lambda: readers[1][0]):
    try:
        call()
        got.append("read")
    except shardpack.ShardpackError as e:
        got.append([type(e).__name__, str(e)])
print(json.dumps(got))
"""


def test_too_many_open_files_is_said_as_the_process_limit_not_a_damaged_file(
    packed: Path, shared_pack
):
    """A reader out of file descriptors (many DataLoader workers, a low ulimit -n) blamed the
    file it could not open: index.json 'unreadable ...; rerun pack to rewrite it', an index
    file 'cannot open', a shard 'cannot open ...; check the path and its permissions'."""
    resource = pytest.importorskip("resource")  # POSIX
    del resource
    import json

    plain = shared_pack({"a": 6, "b": 5}, shards=3, workers=1, format="webdataset")  # no .idx
    done = subprocess.run([sys.executable, "-c", _FEW_FILES, str(packed), str(plain)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    first = sorted(p.name for p in packed.glob("*.tfrecord-*"))[0]
    tar = sorted(p.name for p in plain.glob("*.tar"))[0]
    limit = "Too many open files; this process has too many files open: raise its limit (ulimit -n)"
    assert json.loads(done.stdout.splitlines()[-1]) == [
        ["FileAccessError", f"{plain / 'index.json'}: {limit}"],
        ["FileAccessError", f"{packed / 'idx' / first}.idx: {limit}"],
        ["FileAccessError", f"{plain / tar}: {limit}"],
    ]
