"""Tiny real inputs made in tmp_path: image trees and CIFAR batches in the real files' layout."""

from __future__ import annotations

import ast
import contextlib
import csv
import ctypes
import functools
import hashlib
import inspect
import io
import json
import mmap
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer",
                   "dog", "frog", "horse", "ship", "truck"]  # fmt: skip


def image(seed: int, height: int = 24, width: int = 32) -> np.ndarray:
    """A BGR image with some structure (a gradient and a block), not just noise."""
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    row = (base * rng.uniform(0.3, 1.0, 3)).astype(np.uint8)  # one row, then copied down
    pixels = np.broadcast_to(row, (height, width, 3)).copy()
    y, x = rng.integers(0, height // 2), rng.integers(0, width // 2)
    pixels[y : y + height // 3, x : x + width // 3] = rng.integers(0, 256, 3)
    return pixels


def write_image(path: Path, pixels: np.ndarray) -> Path:
    """Write pixels with OpenCV; the extension picks the format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(path.suffix, pixels)
    assert ok, path
    path.write_bytes(buf.tobytes())
    return path


def make_tree(root: Path, classes: dict[str, int], ext: str = ".jpg", seed: int = 0) -> Path:
    """SRC/<class>/img_<i><ext> with the given number of images per class."""
    n = seed
    for name, count in classes.items():
        for i in range(count):
            write_image(root / name / f"img_{i:03d}{ext}", image(n))
            n += 1
    return root


def cifar_arrays(n: int, seed: int = 0, num_classes: int = 10) -> tuple[np.ndarray, list[int]]:
    """n CIFAR rows (N x 3072, planar RGB) and labels."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, num_classes, n)]
    return data, labels


def make_cifar10_python(root: Path, per_batch: int = 20, batches: int = 5) -> Path:
    """data_batch_1..N, test_batch and batches.meta pickled as the real CIFAR-10 (bytes keys)."""
    root.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, batches + 1)] + ["test_batch"]
    for k, name in enumerate(names):
        data, labels = cifar_arrays(per_batch, seed=k)
        batch = {
            b"batch_label": f"{name} of 5".encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"img_{k}_{i}.png".encode() for i in range(per_batch)],
        }
        (root / name).write_bytes(pickle.dumps(batch, protocol=2))
    names = [c.encode() for c in CIFAR10_CLASSES]
    meta = {b"num_cases_per_batch": per_batch, b"label_names": names, b"num_vis": 3072}
    (root / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return root


def make_cifar10_binary(root: Path, per_batch: int = 20, batches: int = 5) -> Path:
    """The binary version of make_cifar10_python's data: <label byte><3072 pixel bytes> rows."""
    root.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, batches + 1)] + ["test_batch"]
    for k, name in enumerate(names):
        data, labels = cifar_arrays(per_batch, seed=k)
        rows = np.concatenate([np.array(labels, np.uint8)[:, None], data], axis=1)
        (root / f"{name}.bin").write_bytes(rows.tobytes())
    (root / "batches.meta.txt").write_text("\n".join(CIFAR10_CLASSES) + "\n\n")
    return root


def make_cifar100_python(root: Path, n_train: int = 30, n_test: int = 10) -> Path:
    """train, test and meta pickled as the real CIFAR-100."""
    root.mkdir(parents=True, exist_ok=True)
    fine = [f"fine{i}" for i in range(100)]
    coarse = [f"coarse{i}" for i in range(20)]
    for k, (name, n) in enumerate((("train", n_train), ("test", n_test))):
        data, labels = cifar_arrays(n, seed=10 + k, num_classes=100)
        batch = {
            b"filenames": [f"{name}_{i}.png".encode() for i in range(n)],
            b"batch_label": name.encode(),
            b"fine_labels": labels,
            b"coarse_labels": [label // 5 for label in labels],
            b"data": data,
        }
        (root / name).write_bytes(pickle.dumps(batch, protocol=2))
    meta = {b"fine_label_names": [f.encode() for f in fine],
            b"coarse_label_names": [c.encode() for c in coarse]}  # fmt: skip
    (root / "meta").write_bytes(pickle.dumps(meta, protocol=2))
    return root


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's source parsed, once a process: the seam tests each walk the whole package's
    trees, and none changes one."""
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def walked(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a module's tree in ast.walk's order (a parent before its children), once a
    process: walking the package is most of what a seam test costs."""
    return tuple(ast.walk(parsed(path)))


def shard_files(out: Path) -> dict[str, bytes]:
    """Every shard file in OUT (of any container) by name, with its bytes."""
    from shardpack.containers import is_shard_name

    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if is_shard_name(p.name)}


def same_grown(a: Path, b: Path) -> None:
    """Assert two outputs hold the same dataset: shards, index (but its timings) and
    contents.json, byte for byte."""

    def index(out: Path) -> dict:
        doc = json.loads((out / "index.json").read_text())
        doc.pop("stats")
        for run in doc["history"]:
            run.pop("when")
        return doc

    assert shard_files(a) == shard_files(b)
    assert index(a) == index(b)
    assert (a / "contents.json").read_bytes() == (b / "contents.json").read_bytes()


def tf_records(out: Path, split: str = "train") -> list[dict]:
    """Read a split with real TensorFlow: TFRecordDataset + parse_single_example + decode_image."""
    import json

    import tensorflow as tf

    index = json.loads((out / "index.json").read_text())
    files = [os.fspath(out / s["file"]) for s in index["splits"][split]["shards"]]
    compression = "GZIP" if index["compression"] == "gzip" else ""
    dtypes = {"bytes": tf.string, "int64": tf.int64, "float32": tf.float32}
    features = index["features"]  # version 2: name -> {dtype, shape}
    spec = {
        name: tf.io.VarLenFeature(dtypes[f["dtype"]])
        if f["shape"]
        else tf.io.FixedLenFeature([], dtypes[f["dtype"]])
        for name, f in features.items()
    }
    records = []
    for raw in tf.data.TFRecordDataset(files, compression_type=compression):
        ex = tf.io.parse_single_example(raw, spec)
        record = {
            k: tf.reshape(tf.sparse.to_dense(v), [-1, *features[k]["shape"][1:]]).numpy()
            if isinstance(v, tf.SparseTensor)
            else v.numpy()
            for k, v in ex.items()
        }
        fmt = record["format"].decode()
        if fmt == "raw":
            pixels = np.frombuffer(record["image"], np.uint8).reshape(
                record["height"], record["width"], record["channels"]
            )
        elif fmt == "webp":
            pixels = tf.io.decode_webp(ex["image"], channels=3)[0].numpy()  # frames first
        else:
            pixels = tf.io.decode_image(ex["image"], channels=3, expand_animations=False).numpy()
        record["pixels"] = pixels
        records.append(record)
    return records


def jpeg(seed: int) -> bytes:
    """A JPEG of image(seed) as Pillow writes it."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image(seed, 12, 10)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def write_tars(folder: Path, count: int = 12) -> Path:
    """Tars as webdataset's ShardWriter writes them: jpg, cls, txt, json and a mask."""
    with torch_held_out():
        import webdataset as wds

    folder.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(folder / "shards-%03d.tar"), maxcount=5, verbose=0) as writer:
        for i in range(count):
            writer.write({
                "__key__": f"sample{i:04d}", "jpg": jpeg(i), "cls": i % 4,
                "txt": f"a caption {i}",
                "json": {"score": i / 4, "n": i, "tags": ["a", "b"][: i % 3], "width": 99,
                         "exif": {"nested": True}},
                "seg.png": b"mask" + bytes([i]),
            })  # fmt: skip
    return folder


def packed_tree(root: Path, classes: dict[str, int], **options) -> Path:
    """make_tree under root/src, packed into root/out with the given PackOptions fields."""
    from shardpack.options import PackOptions
    from shardpack.packing.packer import pack

    out = root / "out"
    pack(make_tree(root / "src", classes), out, PackOptions(**options))
    return out


def at(path: str | os.PathLike) -> tuple:
    """(the Storage of a file's folder, its name): how readers take a shard."""
    from shardpack.storage import storage_at

    path = os.fspath(path)
    return storage_at(os.path.dirname(os.path.abspath(path))), os.path.basename(path)


def write_csv(path: Path, rows: list[dict], delimiter: str = ",") -> Path:
    """A manifest written by the csv module: a header from the first row's keys."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """A manifest written by json, one object a line."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict], **kwargs) -> Path:
    """A manifest written by pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path, **kwargs)
    return path


def laion_rows(folder: Path, count: int = 4, url=None) -> list[dict]:
    """LAION's columns, an image each (a file of `folder`, or `url(path)`): HEIGHT and WIDTH
    empty on row 1, LICENSE on every row but 0, as in its parts."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        if url is None:
            where = str(write_image(folder / f"{i}.jpg", image(i)))
        else:
            where = url(f"/img/{i}.png")
        empty = i == 1
        rows.append({"SAMPLE_ID": 1000 + i, "URL": where, "TEXT": f"a photo of {i}",
                     "HEIGHT": None if empty else 24, "WIDTH": None if empty else 32,
                     "LICENSE": "?" if i == 0 else None, "NSFW": "UNLIKELY",
                     "similarity": 0.25 + i / 8})  # fmt: skip
    return rows


def spoil_columns(path: Path, *columns: str) -> Path:
    """Overwrite the pages of these columns of a Parquet file (its footer kept): a reader that
    reads them fails; one that does not, does not."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    names = meta.schema.to_arrow_schema().names
    data = bytearray(path.read_bytes())
    for group in range(meta.num_row_groups):
        for name in columns:
            chunk = meta.row_group(group).column(names.index(name))
            start = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o)
            size = chunk.total_compressed_size
            data[start : start + size] = b"\xfe" * size
    path.write_bytes(bytes(data))
    try:  # the spoiling took: reading every column fails
        pq.read_table(path)
    except OSError:
        return path
    raise AssertionError(f"{path}: its columns {columns} still read")


# The readers of each container's audience, run in a process of their own (TensorFlow, TFDS,
# Grain and wids loaded into the test process would grow it by hundreds of MB, and every
# process forked from it after that starts with that peak RSS). Each prints JSON: per record,
# in order, [sha256 of the image's stored bytes, label].
READ_ARRAY_RECORD = """
import hashlib, json, sys
import grain
import tensorflow as tf
from array_record.python.array_record_module import ArrayRecordReader
paths = sys.argv[1:]
def fields(data):
    f = tf.train.Example.FromString(data).features.feature
    image = f["image"].bytes_list.value[0]
    return [hashlib.sha256(image).hexdigest(), f["label"].int64_list.value[0]]
reader = ArrayRecordReader(paths[0])
first = [fields(d) for d in reader.read_all()]
reader.close()
source = grain.sources.ArrayRecordDataSource(paths)  # random access by index, across files
backwards = [fields(source[i]) for i in reversed(range(len(source)))]
print(json.dumps({"first_file": first, "records": backwards[::-1]}))
"""

READ_WEBDATASET = """
import hashlib, json, sys, warnings
warnings.simplefilter("ignore")
import webdataset as wds
import wids
index, cache, urls = sys.argv[1], sys.argv[2], sys.argv[3:]
decoded = []
for s in wds.WebDataset(urls, shardshuffle=False).decode("rgb8"):
    ext = next(e for e in ("jpg", "png", "npy") if e in s)
    pixels = s[ext]
    decoded.append({"shape": list(pixels.shape), "label": s["cls"], "json": s["json"],
                    "npy": hashlib.sha256(pixels.tobytes()).hexdigest() if ext == "npy" else None})
stored = [hashlib.sha256(s.get("jpg", s.get("png"))).hexdigest()
          for s in wds.WebDataset(urls, shardshuffle=False) if "npy" not in s]
dataset = wids.ShardListDataset(index, cache_dir=cache)
by_index = [[dataset[i][".cls"], dataset[i][".json"]["height"]]
            for i in reversed(range(len(dataset)))]  # random access by index, across shards
print(json.dumps({"decoded": decoded, "stored": stored, "by_index": by_index[::-1]}))
"""


@contextlib.contextmanager
def torch_held_out():
    """torch kept from loading in the block, where it is installed and not loaded yet: the
    torch integration that albumentations, webdataset and the tfrecord package try (ToTensorV2
    and the tfrecord dataset as they are imported; a WebDataset asks torch which DataLoader
    worker it runs in as it is iterated) costs ~4 s of CPU a process, and no test transforms,
    writes or reads through it. Each tries torch and goes on without it (an ImportError)."""
    import sys

    if "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # `import torch` raises ModuleNotFoundError
    try:
        yield
    finally:
        del sys.modules["torch"]


def bytes_read() -> int:
    """The bytes this process has read so far, as the kernel counts them (/proc/self/io's
    rchar: every read call, the page cache's included)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def end_workers() -> None:
    """In a read-back whose DataLoader stopped on an error its workers raised: end the workers
    now. torch joins each such worker for 5 s as the loader ends before it kills it, and the
    reading Python runs one read-back at a time (the others waited 10-20 s)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
        child.join()


def flat(value: object) -> list:
    """A feature's values as one flat JSON list; text and bytes as the hex of their bytes."""
    if isinstance(value, (bytes, str)):
        return [os.fsencode(value).hex()]
    if hasattr(value, "tolist"):  # a numpy array or scalar
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in flat(item)]
    return [value]


# A split as its container's audience reads it, every feature of every record in `flat`'s form:
# TFRecords by tf.data, ArrayRecords by Grain (records parsed by the protobuf classes of the
# `tfrecord` package: no TensorFlow), tars by webdataset (the image, .cls, .<name>.bin and
# .json).
READ_EXAMPLES = f"""
import contextlib, json, os, sys, warnings
warnings.simplefilter("ignore")
container, files = sys.argv[1], sys.argv[2:]
{inspect.getsource(torch_held_out)}
{inspect.getsource(flat)}
def examples(records, example):
    for data in records:
        feature = example.FromString(data).features.feature
        yield {{name: flat(list(getattr(f, f.WhichOneof("kind")).value) if f.WhichOneof("kind")
                           else []) for name, f in feature.items()}}
if container == "tfrecord":
    import tensorflow as tf
    records = (raw.numpy() for raw in tf.data.TFRecordDataset(files))
    read = list(examples(records, tf.train.Example))
elif container == "array_record":
    import grain, importlib.util
    # TensorFlow's Example where `make test` loads TensorFlow: the tfrecord package's copy of
    # its protos cannot share a process with it. The fast tier never loads TensorFlow, even
    # where `make test` installed it (its import is ~10 s of CPU a reading process there), and
    # uses that copy
    if (importlib.util.find_spec("tensorflow")
            and os.environ.get("SHARDPACK_TEST_TIER") != "fast"):
        from tensorflow.core.example.example_pb2 import Example
    else:
        with torch_held_out():
            from tfrecord.example_pb2 import Example
    source = grain.sources.ArrayRecordDataSource(files)
    read = list(examples((source[i] for i in range(len(source))), Example))
else:
    read = []
    with torch_held_out():
        import webdataset as wds
        samples = list(wds.WebDataset(files, shardshuffle=False, empty_check=False))
    import numpy
    for sample in samples:  # a .json's float is a float32 feature's text: read as float32
        record = {{name: [float(numpy.float32(x)) if type(x) is float else x for x in flat(v)]
                   for name, v in json.loads(sample["json"]).items()}}
        record["image"] = flat(next(sample[e] for e in ("jpg", "png", "webp") if e in sample))
        if "cls" in sample:
            record["label"] = [int(sample["cls"])]
        for member in (m for m in sample if m.endswith(".bin")):  # a feature of bytes: its own
            record[member.removesuffix(".bin").replace(".", "/")] = flat(sample[member])
        read.append(record)
print(json.dumps(read))
"""


def peer_examples(out: Path) -> dict[str, dict[str, list]]:
    """READ_EXAMPLES of every split of OUT in a child, by record key (TensorFlow for TFRecords)."""
    index = json.loads((out / "index.json").read_text())
    files = [os.fspath(out / shard["file"]) for split in index["splits"].values()
             for shard in split["shards"]]  # fmt: skip
    read = run_json(READ_EXAMPLES, index["container"], *files)
    return {bytes.fromhex(record["key"][0]).decode(): record for record in read}


def our_examples(out: Path) -> dict[str, dict[str, list]]:
    """Every split of OUT as shardpack reads it, in peer_examples's form."""
    from shardpack.read.stream import iter_examples

    index = json.loads((out / "index.json").read_text())
    return {r["key"]: {name: flat(v) for name, v in r.items()}
            for split in index["splits"] for r in iter_examples(out, split)}  # fmt: skip


# The reading Python's loop: it answers one request a connection on the Unix socket argv[1] +
# ".sock" (a snippet and its argv) with one reply line holding what the snippet printed;
# anything written to fd 1 below Python goes to stderr. It ends within a second of the process
# it watches (argv[2]: the test run's first process), and removes its files.
_SERVE = """
import contextlib, io, json, multiprocessing, os, socket, sys, traceback
os.dup2(2, 1)
home = os.getcwd()
files = sys.argv[1]
listener = socket.socket(socket.AF_UNIX)
listener.bind(files + ".sock")
with open(files + ".pid", "w") as pid:
    pid.write(str(os.getpid()))
listener.listen(16)
listener.settimeout(1)
watched = int(sys.argv[2])
while True:
    try:
        connection, _ = listener.accept()
    except TimeoutError:
        try:
            os.kill(watched, 0)
        except ProcessLookupError:
            break
        continue
    with connection:
        stream = connection.makefile("rw")
        request = json.loads(stream.readline())
        sys.argv = ["-c", *request["args"]]
        os.chdir(request["cwd"] or home)
        os.environ.clear()
        os.environ.update(request["env"])
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(request["code"], "<run_json>", "exec"), {"__name__": "__main__"})
            reply = {"stdout": printed.getvalue()}
        except BaseException:
            reply = {"error": traceback.format_exc()}
        # no child left for the next (a DataLoader's workers: torch joins a worker left waiting
        # for 5 s before it kills it, as the loader is collected, in whichever read-back then)
        for child in multiprocessing.active_children():
            child.kill()
            child.join()
        with contextlib.suppress(OSError):  # a client gone first (a warm-up's, its process ended)
            stream.write(json.dumps(reply) + "\\n")
            stream.close()
for suffix in (".sock", ".pid", ".err", ".lock"):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(files + suffix)
"""


def die_with_parent() -> None:
    """In a child: end with the test process, however it ends (prctl's PR_SET_PDEATHSIG)."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def run_json(code: str, *args: str) -> object:
    """Run `code` (a peer library's read-back) with `args` in the reading Python (run_kept);
    return the JSON it printed last."""
    return json.loads(run_kept(code, *args).strip().splitlines()[-1])


_readers: list[subprocess.Popen] = []  # the reading Pythons this process started


def _reader_files() -> str:
    """The reading Python's files, less their suffix: one reader for the whole test run, its
    pytest-xdist workers included (they share its run id)."""
    import tempfile

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")[:16]  # a socket's path
    return os.path.join(tempfile.gettempdir(), f"shardpack-tests-reader-{run}")  # < 108 bytes


def _connect_reader():
    """A connection to the test run's reading Python, started here if none answers (under a
    lock: the workers of a run start one between them)."""
    import fcntl

    files = _reader_files()
    with open(files + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if connection := _connected(files + ".sock"):
            return connection
        with contextlib.suppress(FileNotFoundError):
            os.unlink(files + ".sock")  # a reader that ended
        watched = os.getppid() if "PYTEST_XDIST_WORKER" in os.environ else os.getpid()
        with open(files + ".err", "ab") as errors:
            reader = subprocess.Popen([sys.executable, "-c", _SERVE, files, str(watched)],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=errors)  # fmt: skip
        _readers.append(reader)
        for _ in range(6000):  # at most 60 s for an interpreter to start and bind
            if reader.poll() is not None:
                raise AssertionError("the reading Python ended: " + _reader_errors())
            if connection := _connected(files + ".sock"):
                return connection
            time.sleep(0.01)
        reader.kill()
        raise AssertionError("the reading Python did not start in 60 s")


def _connected(path: str):
    """A socket connected to the Unix socket at `path`, or None where nothing listens there."""
    import socket

    connection = socket.socket(socket.AF_UNIX)
    try:
        connection.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        connection.close()
        return None
    return connection


def _reader_errors() -> str:
    """The last of what the run's reading Pythons wrote to stderr."""
    with open(_reader_files() + ".err", "rb") as errors:
        errors.seek(0, os.SEEK_END)
        errors.seek(max(0, errors.tell() - 3000))
        return errors.read().decode(errors="replace")


def _ask_reader(code: str, args: tuple[str, ...], cwd: Path | None):
    """A connection to the run's reading Python, and a stream on it, with `code` sent to run."""
    request = {
        "code": code,
        "args": list(args),
        "cwd": os.fspath(cwd) if cwd else None,
        "env": dict(os.environ),
    }
    connection = _connect_reader()
    stream = connection.makefile("rw")
    stream.write(json.dumps(request) + "\n")
    stream.flush()
    return connection, stream


# What the read-backs of the files that load TensorFlow import first in the reading Python
# (tests/containers/test_formats.py's: Grain's with TensorFlow's Example, TFDS's, wids's, which
# loads torch): ~10 s of CPU. Not `datasets`: it reads HF_DATASETS_OFFLINE as it is imported,
# and its read-back sets that first.
READER_IMPORTS = ("tensorflow", "tensorflow_datasets", "grain", "wids", "webdataset")
_WARM = """
import importlib, importlib.util, sys
for name in sys.argv[1:]:
    if importlib.util.find_spec(name):
        importlib.import_module(name)
"""
_warming = []  # the warm-up's request, open until this process ends: nothing reads its reply


def warm_reader(modules: tuple[str, ...] = READER_IMPORTS) -> None:
    """Have the run's reading Python (run_kept) import those of `modules` installed, once a
    process, without waiting for it: it loads them while this process goes on, where the first
    read-back asking for them would wait; a read-back that comes sooner waits its turn."""
    if not _warming:
        _warming.append(_ask_reader(_WARM, modules, None))


def run_kept(code: str, *args: str, cwd: Path | None = None, timeout: float = 300) -> str:
    """Run `code` as `python -c code args` would, in cwd with this process's environment, but
    in the test run's reading Python, kept running (one for all of pytest-xdist's workers, a
    snippet at a time) so that TensorFlow, TFDS and torch load once in a run, not once a
    snippet or a worker; return what it printed. Each runs in globals of its own; none may
    leave state behind that the next could see. A snippet's exception, exit or timeout fails
    the test (a timeout ends the reader; the next snippet starts another)."""
    import signal

    connection, stream = _ask_reader(code, args, cwd)
    with connection, stream:
        connection.settimeout(timeout)  # each wait for the reply: its turn and its run
        try:
            line = stream.readline()
        except TimeoutError:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(Path(_reader_files() + ".pid").read_text()), signal.SIGKILL)
            raise AssertionError(f"a read-back took more than {timeout} s") from None
    if not line:  # it died: say what it said
        raise AssertionError("the reading Python ended: " + _reader_errors())
    reply = json.loads(line)
    assert "error" not in reply, reply.get("error", "")[-3000:]
    return reply["stdout"]


# The tier the Makefile runs: "fast" (`make test-fast`), "long" (`make test-long`), or "".
TIER = os.environ.get("SHARDPACK_TEST_TIER", "")
# What the fast tier (`make test-fast`) leaves to `make test` even where it is installed: the
# packages conftest's `heavy` marker means (a test that asks needs() for one is heavy).
HEAVY_MODULES = frozenset({"tensorflow", "tensorflow_datasets", "torch", "nvidia", "wids"})


def needs(*modules: str) -> None:
    """Skip unless each module is installed, without importing it here (see READ_* above); in
    the fast tier, skip for a heavy one too, as a `heavy` marker would."""
    import importlib.util

    import pytest

    for module in modules:
        top = module.split(".")[0]
        if top in HEAVY_MODULES and TIER == "fast":
            pytest.skip(f"needs {module}: run `make test`", allow_module_level=True)
        if importlib.util.find_spec(top) is None:
            pytest.skip(f"needs {module}", allow_module_level=True)


def heavy_import(module: str):
    """pytest.importorskip for a heavy package (HEAVY_MODULES): skipped in the fast tier too."""
    import importlib

    needs(module)
    return importlib.import_module(module)


class _Lazy:
    """A module that is imported when one of its attributes is first read."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        import importlib

        if attribute.startswith("_"):  # what pytest asks of a test file's globals as it collects
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._name), attribute)


def lazy_import(module: str):
    """pytest.importorskip at a test file's top, as needs() skips, but the module is imported
    when a test first uses it: every pytest-xdist worker collects every file, and only the
    worker that runs the file should pay for a slow import (`datasets` takes ~2 s)."""
    needs(module)
    return _Lazy(module)


def wait_for(condition, timeout: float = 60) -> None:
    """Poll condition() every 10 ms until it holds; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def writing_a_shard(pid: int) -> bool:
    """Whether the process holds a shard's temporary file open: it is mid-shard."""
    try:
        fds = list((Path("/proc") / str(pid) / "fd").iterdir())
        return any(os.readlink(fd).endswith(".partial") for fd in fds)
    except OSError:
        return False


def worker_pids(parent: int) -> list[int]:
    """The run's worker processes: children forked from it, so they share its command line."""
    own = (Path("/proc") / str(parent) / "cmdline").read_bytes()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and cmdline == own:
            pids.append(int(entry.name))
    return pids


def handed_over(folder: Path, pattern: str, workers: list[int]) -> bool:
    """Whether a file in `folder` matching `pattern` is open in none of these workers: a shard
    a worker wrote and handed over for its packing process to commit (Sink.hand_over)."""
    held = set()
    for pid in workers:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    held.add(os.path.realpath(os.readlink(fd)))
    return any(os.path.realpath(p) not in held for p in folder.glob(pattern))


def stopped(pid: int) -> bool:
    """Whether every thread of the process has stopped (SIGSTOP takes each in turn)."""
    try:
        return all((task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
                   for task in Path(f"/proc/{pid}/task").iterdir())  # fmt: skip
    except OSError:  # a thread ended as it was listed: not stopped yet
        return False


def gone(pids: list[int]) -> bool:
    """Whether none of these processes is there any more (a killed run's workers die a moment
    after it, holding OUT's lock until then)."""
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


def object_hashes(url: str) -> dict[str, str]:
    """sha256 of every object under url (shards, index.json, metadata), by its relative name;
    our own hidden state (lock, journal) left out."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    names = {path[len(root) :].lstrip("/"): path for path in fs.find(root)}
    return {
        name: hashlib.sha256(fs.cat_file(path)).hexdigest()
        for name, path in sorted(names.items())
        if not any(part.startswith(".") for part in name.split("/"))
    }


def _index_of(url: str) -> dict:
    """index.json under url, less the run's timings."""
    import fsspec

    with fsspec.open(f"{url}/index.json", "rb") as f:
        document = json.load(f)
    document.pop("stats")
    return document


def same_output(url: str, reference: Path) -> None:
    """Every object under url (a URL of any fsspec filesystem) is the local reference pack's
    file, byte for byte; the index alike but for the timings."""
    written, wanted = object_hashes(url), object_hashes(reference.as_uri())
    assert written.pop("index.json", None) and wanted.pop("index.json")  # timings differ
    assert written == wanted
    assert _index_of(url) == _index_of(reference.as_uri())


def cli(*args: str, timeout: float = 180, **kwargs) -> subprocess.CompletedProcess:
    """`python -m shardpack ARGS` in a child process, its output as text (3 minutes at most):
    forked from tests.forkserver's server (numpy and OpenCV loaded ahead), unless `kwargs`
    (subprocess.run's) ask for more than its env and cwd."""
    from tests import forkserver

    if set(kwargs) <= {"env", "cwd"}:
        return forkserver.run(forkserver.SHARDPACK, *args, timeout=timeout, **kwargs)
    return subprocess.run([sys.executable, "-m", "shardpack", *args], capture_output=True,
                          text=True, timeout=timeout, **kwargs)  # fmt: skip


# A fresh interpreter's start (OpenCV not loaded yet) in which a Ctrl-C is raised as OpenCV's
# loader imports cv2.version, which it does inside `try: ... except: pass`: one that arrives
# as cv2 is imported outside stops.stops_held is swallowed, and the caller goes on.
_CTRL_C_AS_OPENCV_LOADS = """
import runpy, signal, sys
sys.addaudithook(lambda event, args: event == "import" and args[0] == "cv2.version"
                 and signal.raise_signal(signal.SIGINT))
"""


def ctrl_c_as_opencv_loads(code: str = "", *cli: str) -> subprocess.CompletedProcess:
    """`code` run in a fresh interpreter, or (none given) `shardpack CLI...` as `python -m
    shardpack` runs it, with a Ctrl-C raised as OpenCV loads: the caller stops (exit 130) where
    it imports OpenCV with stops held, goes on where it does not."""
    code = code or f"sys.argv = {['shardpack', *cli]!r}\nrunpy.run_module('shardpack', " \
                   "run_name='__main__', alter_sys=True)"  # fmt: skip
    return subprocess.run([sys.executable, "-c", _CTRL_C_AS_OPENCV_LOADS + code],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`shardpack ARGS` as its console entry point runs it, but in this process, as `cli` returns
    it: for what a run does, not for the process (signals, limits, a closed pipe). `env` is laid
    over os.environ for the run."""
    import signal

    from click.testing import CliRunner

    from shardpack import cli as entry

    handler, argv, code = signal.getsignal(signal.SIGTERM), sys.argv, 0
    with CliRunner().isolation(env=env) as (stdout, stderr, _):
        sys.argv = ["shardpack", *args]
        try:
            entry.main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        finally:
            sys.argv = argv
            signal.signal(signal.SIGTERM, handler)
        sys.stdout.flush()
        sys.stderr.flush()
        return subprocess.CompletedProcess(
            ["shardpack", *args], code, stdout.getvalue().decode(), stderr.getvalue().decode()
        )


def one_line_error(done: subprocess.CompletedProcess, *words: str) -> str:
    """The run ended in exit 2 and one line on stderr holding every word; returns the line."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert all(w in line for w in words), line
    return line


# Python source for this process's peak resident memory in KiB, for a child's code to print.
# VmHWM is the peak of this program's own memory; ru_maxrss would also count the RSS of the
# process that forked it (a pytest holding TensorFlow: hundreds of MB), carried over exec.
PEAK_KIB = "int(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))"


# Linux capabilities that let root pass over file permissions (capability.h).
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2
_PR_CAPBSET_DROP = 24
_CAPABILITY_VERSION_3 = 0x20080522


def drop_permission_override() -> None:
    """Make this process (root) meet file permissions as any owner does: drop the capabilities
    that pass over them, here and for every program it runs. Unlike switching to another user,
    it can still reach the checkout and the venv wherever they lie (a 0700 home directory), while
    a file or folder the test made with no permission bits (0o000; 0o555 for no writing) is
    refused as to anyone. Skips the test where this process is not root or may not drop them."""
    import ctypes

    if os.geteuid() != 0:
        import pytest

        pytest.skip("needs root, whose file-permission override it drops")
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # (effective, permitted, inheritable) x 2 words
    kept = ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH)) & 0xFFFFFFFF
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    if libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for word in (0, 1, 2):
        data[word] &= kept
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def write_objects_parquet(
    path: Path, rows: list[dict], classes: list[str], mask: str = "mask"
) -> Path:
    """A Hugging Face Parquet file of an object dataset, as `datasets` writes one: `image`
    ({bytes, path}: a PNG), `objects/bbox` (rows of 4 floats), `objects/label` (a ClassLabel list
    over `classes`), `objects/is_crowd` (ints) and `mask` (an instance-id map PNG, or b"",
    under that name);
    rows hold (name, PNG bytes, boxes, labels, is_crowd, mask)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ("objects/bbox", pa.list_(pa.list_(pa.float32(), 4))),
        ("objects/label", pa.list_(pa.int64())),
        ("objects/is_crowd", pa.list_(pa.int64())),
        (mask, pa.binary()),
    ], metadata={"huggingface": json.dumps({"info": {"features": {"objects/label": {
        "_type": "List", "feature": {"_type": "ClassLabel", "names": classes}}}}})})  # fmt: skip
    table = pa.Table.from_pylist([{
        "image": {"bytes": row["png"], "path": row["name"]}, "objects/bbox": row["boxes"],
        "objects/label": row["labels"], "objects/is_crowd": row.get("is_crowd", [0] * len(
            row["labels"])), mask: row.get("mask", b"")} for row in rows], schema)  # fmt: skip
    pq.write_table(table, path)
    return path


# One small object dataset for the read tests: boxes with class names, a crowd flag, an
# instance-id mask, and an image without objects (a Hugging Face Parquet file carries them all).
OBJECT_CLASSES = ["cat", "dog", "eel"]


def _object_png(pixels: np.ndarray) -> bytes:
    return cv2.imencode(".png", pixels)[1].tobytes()


def object_mask(height: int, width: int, regions: list[tuple[int, int, int, int]]) -> bytes:
    """An instance-id map: region i (pixels [y0, x0, y1, x1)) holds id i + 1, the rest 0."""
    ids = np.zeros((height, width), np.uint8)
    for i, (y0, x0, y1, x1) in enumerate(regions):
        ids[y0:y1, x0:x1] = i + 1
    return _object_png(ids)


# a.png 40x60 (h x w): two small objects with masks inside their boxes; b.png 120x100: a large
# and a medium one (COCO's sizes); c.png: none.
OBJECT_ROWS = [
    {"name": "a.png", "png": _object_png(np.full((40, 60, 3), 128, np.uint8)),
     "boxes": [[0.1, 0.1, 0.6, 0.5], [0.5, 0.5, 0.9, 0.95]], "labels": [0, 1],
     "is_crowd": [0, 1], "mask": object_mask(40, 60, [(8, 10, 20, 26), (22, 34, 34, 54)])},
    {"name": "b.png", "png": _object_png(np.full((120, 100, 3), 200, np.uint8)),
     "boxes": [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.5, 0.5]], "labels": [2, 0]},
    {"name": "c.png", "png": _object_png(np.full((30, 30, 3), 60, np.uint8)), "boxes": [],
     "labels": []},
]  # fmt: skip


def pack_objects(folder: Path, rows: list[dict], unequal_lists: bool = False) -> Path:
    """rows (OBJECT_ROWS's form) written as a Parquet file in folder and packed into folder/out
    (in this process). With `unequal_lists`, a per-object list of another number of rows than
    its boxes is packed as it is, where pack skips its record: a shard no pack writes, for the
    readers' checks of one."""
    from unittest import mock

    from shardpack.options import PackOptions
    from shardpack.packing import boxes
    from shardpack.packing.packer import pack

    folder.mkdir(parents=True, exist_ok=True)
    src = write_objects_parquet(folder / "objects.parquet", rows, OBJECT_CLASSES)
    check = mock.patch.object(boxes, "_check_rows_of", lambda *_: None) if unequal_lists else (
        contextlib.nullcontext())  # fmt: skip
    with check:
        pack(src, folder / "out", PackOptions(workers=1, shuffle=False, shards=1))
    return folder / "out"


def check_indexes_round_trip(root: Path) -> int:
    """Assert that every index.json under `root` that pack wrote (this version's, in its JSON
    form) reads back into an Index whose to_json gives the same bytes; returns how many."""
    from shardpack.errors import ShardpackError
    from shardpack.index import VERSION, load_index
    from shardpack.storage.atomic import json_bytes

    checked = 0
    for path in root.rglob("index.json"):
        if path.is_symlink() or not path.is_file():
            continue
        try:  # bounded as every reader's: a planted flood of lists is refused, not parsed
            index = load_index(path.parent)
        except ShardpackError:
            continue
        data = path.read_bytes()
        if index.version != VERSION or json_bytes(json.loads(data)) != data:
            continue  # a test's own (hand-written, planted or older) document
        assert json_bytes(index.to_json()) == data, f"{path} does not round-trip"
        checked += 1
    return checked


def vouch_size(out: Path, name: str) -> None:
    """Set the num_bytes OUT's index.json gives shard `name` to its file's size: the readers
    refuse a shard of another size at once, so that what lies past the size is reached."""
    doc = json.loads((out / "index.json").read_text())
    for split in doc["splits"].values():
        for shard in split["shards"]:
            if shard["file"] == name:
                shard["num_bytes"] = (out / name).stat().st_size
    (out / "index.json").write_text(json.dumps(doc))


def planned_work(plan, options) -> tuple[float, int]:
    """What plan.choose_workers weighs of a plan: one core's seconds of it, and its shards."""
    from shardpack.packing.plan import plan_seconds

    return plan_seconds(plan, options), len(plan.shards)


def aged(src: Path, seconds: int = 3600) -> None:
    """Date every file of `src` back: a file modified just before a pack gets no stamp
    (stamps.RACY_NS), and whether it falls in that window is a matter of timing."""
    when = time.time_ns() - seconds * 1_000_000_000
    for path in src.rglob("*"):
        os.utime(path, ns=(when, when), follow_symlinks=False)


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]  # fmt: skip
    return libc


def in_page_cache(path: str) -> bool:
    """Whether the page cache holds every page of the file: asked by mincore(2), which reads
    nothing (a read that may not wait would start the very read-ahead looked for)."""
    libc, size = _libc(), os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        try:
            assert libc.mincore(ctypes.c_void_p(address), size, vector) == 0
        finally:
            libc.munmap(ctypes.c_void_p(address), size)
    finally:
        os.close(fd)
    return all(v & 1 for v in vector)


def evict(paths: list[str]) -> None:
    """Drop the files' pages from the page cache (written out first); the test is skipped where
    the filesystem keeps them in memory all the same (tmpfs: nothing to read ahead)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if any(in_page_cache(p) for p in paths):
        import pytest

        pytest.skip("this filesystem keeps the files in memory (tmpfs?): nothing to read ahead")


def until(check, tries: int = 3000) -> bool:
    """Whether `check()` comes true within `tries` looks 10 ms apart (the disk's time, not
    ours: a loaded machine only takes more of the tries)."""
    for _ in range(tries):
        if check():
            return True
        time.sleep(0.01)
    return False
