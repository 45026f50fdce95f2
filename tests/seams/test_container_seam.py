"""The container seam holds: a fourth container, defined here alone and registered through
the public way in, is packed, verified, inspected and read by the public API; and no module
outside shardpack/containers/ names a container or imports one container's module."""

from __future__ import annotations

import ast
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

import shardpack
from shardpack import containers
from shardpack.containers import CONTAINERS, Container, register_container
from shardpack.containers.example import decode, encode_example
from shardpack.errors import RecordError
from shardpack.read.describe import describe
from tests.helpers import make_tree, walked

PACKAGE = Path(shardpack.__file__).parent
_LENGTH = struct.Struct("<I")  # each record: uint32 length, then the Example's bytes


class _ToyWriter(containers.ShardWriter):
    def _open(self, sink) -> None:
        self._file, self._position = containers.HashingFile(sink), 0

    def _append(self, features) -> int:
        data = encode_example(features)
        self._file.write(_LENGTH.pack(len(data)) + data)
        offset, self._position = self._position, self._position + _LENGTH.size + len(data)
        return offset

    def _close(self, failed: bool) -> tuple[int, str]:
        if failed:
            self._file.discard()
        return self._file.finish()


def _spans(blob) -> Iterator[tuple[int, bytes]]:
    """(offset, Example bytes) of each record, every length bounded by the file."""
    offset = 0
    while offset < blob.size:
        head = blob.pread(_LENGTH.size, offset)
        length = (
            _LENGTH.unpack(head)[0]
            if len(head) == _LENGTH.size
            else containers.MAX_RECORD_BYTES + 1
        )
        if offset + _LENGTH.size + length > blob.size:
            raise RecordError(blob.name, offset, "file ends inside a record (truncated)")
        yield offset, blob.pread(length, offset + _LENGTH.size)
        offset += _LENGTH.size + length


class _ToyReader(containers.ShardReader):
    def __init__(self, blob) -> None:
        self.blob = blob
        self.records = list(_spans(blob))

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        offset, data = self.records[i]
        return containers.checked(decode(data, self.blob.name, offset))

    def position(self, i: int) -> int:
        return self.records[i][0]

    def close(self) -> None:
        self.blob.close()


class Toy(Container):
    """Length-prefixed tf.train.Example records: no checksum, byte offsets."""

    name = "toy"
    framing = "length"
    shard_template = "{name}-{split}.toy-{index:05d}-of-{n:05d}"
    shard_pattern = re.compile(containers.NAME_SPLIT + r"\.toy-\d{5,}-of-\d{5,}")
    writer_class = _ToyWriter

    def iter_records(self, storage, name, compression="none", digest=None, num_bytes=None):
        with containers.open_hashing(storage, name, digest) as blob:
            for offset, data in _spans(blob):
                yield offset, decode(data, blob.name, offset)
            if digest is not None:
                blob.finish()

    def open(self, storage, name, compression="none", offsets=None, num_bytes=None):
        return _ToyReader(containers.open_shard(storage, name))


@pytest.fixture
def toy(monkeypatch):
    """Toy in CONTAINERS for this test only."""
    monkeypatch.setattr(CONTAINERS, "_classes", dict(CONTAINERS._classes))
    monkeypatch.setattr(CONTAINERS, "_loaded", dict(CONTAINERS._loaded))
    register_container(Toy, "this test")
    return CONTAINERS["toy"]


def test_a_toy_container_packs_verifies_inspects_and_reads(tmp_path: Path, toy):
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 2})
    out = tmp_path / "out"
    result = shardpack.pack(src, out, shardpack.PackOptions(format="toy", shards=2, workers=1))
    shards = sorted(p.name for p in out.iterdir() if ".toy-" in p.name)
    assert shards == ["src-train.toy-00000-of-00002", "src-train.toy-00001-of-00002"]
    assert result.to_json()["tfds_metadata"] is False
    assert not (out / "dataset_info.json").exists()

    report = shardpack.verify(out, decode=True)
    assert report.ok and report.records == 5 and report.framing == "length", report.faults
    summary = describe(out)
    assert summary["container"] == "toy" and summary["splits"]["train"]["num_records"] == 5

    records = list(shardpack.iter_examples(out))
    assert sorted(r["label"] for r in records) == [0, 0, 0, 1, 1]
    with shardpack.Records(out) as random:
        assert len(random) == 5
        assert [random[i]["key"] for i in range(5)] == [r["key"] for r in records]

    # tf_dataset and DALI index files are refused by what the container says, in one line.
    with pytest.raises(shardpack.ShardpackError, match="these are toy"):
        shardpack.tf_dataset(out)
    with pytest.raises(shardpack.ShardpackError, match="these are toy, which need none"):
        shardpack.write_index_files(out)
    with pytest.raises(shardpack.ShardpackError, match="compression='gzip' is for format="):
        shardpack.PackOptions(format="toy", compression="gzip")

    # verify names a record the toy's framing finds cut short
    shard = out / shards[0]
    shard.write_bytes(shard.read_bytes()[:-1])
    faults = shardpack.verify(out).faults
    assert any("truncated" in f.reason and f.file.endswith(shards[0]) for f in faults), faults


def test_register_container_refuses_a_taken_name():
    class Fake(Container):
        name = "tfrecord"

    with pytest.raises(ValueError, match="no other container has"):
        register_container(Fake)


# Where a container's name may stand outside containers/: the default --format, what an index
# written before containers were named holds, TFDS's default file format, and the WebDataset
# tar source's name (the peer's format, not our container).
ALLOWED = {("options.py", "DEFAULT_FORMAT"), ("index.py", "LEGACY_CONTAINER"),
           ("tfdsdir.py", "TFDS_DEFAULT_FORMAT"), ("tars.py", "name")}  # fmt: skip


def _names_outside(path: Path) -> Iterator[tuple[int, str]]:
    """(line, what) for each string naming a built-in container and each import of one
    container's module, but docstrings and the assignments ALLOWED lets stand."""
    # "parquet" is also what sources read (manifests, the Hub's layout): only its import counts.
    names = {"tfrecord", "array_record", "webdataset"}
    docstrings = {
        id(node.body[0].value)
        for node in walked(path)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    for node in walked(path):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and names & set(re.findall(r"\w+", node.value)):
                yield node.lineno, repr(node.value)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names]
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or "", *(f"{node.module}.{m}" for m in modules)]
            for module in modules:
                if re.fullmatch(
                    r"shardpack\.containers\.(tfrecord|array_record|webdataset|parquet)\b.*", module
                ):
                    yield node.lineno, f"import {module}"


def test_no_module_outside_containers_names_a_container():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "containers":
            continue
        allowed = {
            node.value.lineno
            for node in walked(path)
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in ([node.target] if isinstance(node, ast.AnnAssign) else node.targets)
            if isinstance(target, ast.Name) and (path.name, target.id) in ALLOWED
        }
        found += [f"{path.relative_to(PACKAGE)}:{line}: {what}"
                  for line, what in _names_outside(path) if line not in allowed]  # fmt: skip
    assert not found, "\n".join(found)
