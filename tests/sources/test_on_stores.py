"""Every SRC kind read from an fsspec URL scans and loads as the same files on a local disk.

Each dataset is made on disk, copied object by object into fsspec's in-process `memory://`
filesystem, and scanned (and its items loaded) from both places.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import fsspec
import numpy as np
import pytest

from shardpack.errors import ImageError, ShardpackError, SourceError, StorageError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.sources import Dataset, scan, source_root
from tests import helpers


@pytest.fixture
def bucket():
    """A fresh memory:// prefix, removed afterwards."""
    url = f"memory://bucket-{uuid.uuid4().hex[:12]}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def _upload(local: Path, url: str) -> str:
    """Copy every file under `local` to the same names under `url`, one object each."""
    fs = fsspec.filesystem("memory")
    for path in sorted(local.rglob("*")):
        if path.is_file() and not path.is_symlink():
            fs.pipe_file(f"{url}/{path.relative_to(local).as_posix()}", path.read_bytes())
    return url


def _summary(dataset: Dataset, *roots: str) -> tuple:
    """What a scan found, with each root path or URL (SRC, the images' folder) written ROOT."""

    def plain(text: str) -> str:
        for root in roots:
            text = text.replace(root, "ROOT")
        return text.replace("/meta/../", "/")  # a disk's message names the path as joined

    splits = {
        split: [
            (plain(i.key), i.label, plain(i.path), i.size, i.position, sorted(i.fields.items()))
            for i in items
        ]
        for split, items in dataset.splits.items()
    }
    return (
        dataset.kind,
        plain(dataset.root.path()),
        dataset.schema,
        splits,
        dataset.ignored,
        dataset.ignored_files,
        [(plain(key), plain(why)) for key, why in dataset.skipped],
        [plain(w) for w in dataset.warnings],
    )


def _loaded(dataset: Dataset) -> list:
    """Every item as its loader gives it (image bytes, or pixels as bytes), or why not."""
    load, cache = dataset.source.load, {}
    out = []
    for items in dataset.splits.values():
        for item in items:
            try:
                data = load(item, dataset.root, PackOptions(), cache)
            except ImageError as e:
                out.append(e.reason)
                continue
            out.append(data if isinstance(data, bytes) else np.asarray(data).tobytes())
    return out


def _same(local: Path, url: str, src_local=None, src_url=None, options=None) -> Dataset:
    """Scan and load both copies; assert they agree; return the remote scan."""
    options = options or PackOptions()
    here = scan(src_local or local, options)
    there = scan(src_url or url, options)
    assert _summary(there, url) == _summary(here, str(local))
    assert _loaded(there) == _loaded(here)
    return there


def _class_tree(root: Path) -> Path:
    helpers.make_tree(root, {"cat": 3, "dog": 2})
    helpers.write_image(root / "cat" / "deep" / "er" / "x.png", helpers.image(9))
    helpers.write_image(root / "cat" / ".cache" / "hidden.jpg", helpers.image(8))
    for name in ("README.txt", ".DS_Store", "cat/notes.txt", "cat/deep/z.txt", "cat/a.txt",
                 "bird/readme.md"):  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("not an image")
    (root / "dog" / "empty.jpg").write_bytes(b"")
    return root


def test_class_folders_scan_and_load_alike_from_a_url(tmp_path, bucket):
    local = _class_tree(tmp_path / "src")
    there = _same(local, _upload(local, bucket))
    assert there.classes == ("bird", "cat", "dog")
    assert there.ignored_files == ("README.txt", "bird/readme.md", "cat/a.txt", "cat/notes.txt",
                                   "cat/deep/z.txt")  # fmt: skip
    assert "cat/deep/er/x.png" in [i.key for i in there.splits["train"]]
    assert there.warnings and "memory://" in there.warnings[0]  # bird: no images, named by URL
    assert "empty file" in _loaded(there)


def test_a_class_folder_of_hidden_files_only_is_a_class_from_a_url_too(tmp_path, bucket):
    local = tmp_path / "src"
    helpers.make_tree(local, {"cat": 1})
    helpers.write_image(local / "fish" / ".hidden.jpg", helpers.image(3))
    there = _same(local, _upload(local, bucket))  # a store's folder is what a disk's is
    assert there.classes == ("cat", "fish") and "class 'fish'" in there.warnings[0]


def test_a_split_tree_scans_alike_from_a_url(tmp_path, bucket):
    local = tmp_path / "src"
    helpers.make_tree(local / "train", {"cat": 2, "dog": 2})
    helpers.make_tree(local / "test", {"cat": 1}, seed=7)
    (local / "LICENSE").write_text("x")
    (local / "train" / "list.txt").write_text("x")
    there = _same(local, _upload(local, bucket))
    assert there.kind == "split-tree" and sorted(there.splits) == ["test", "train"]


def _images(folder: Path, n: int = 4) -> list[str]:
    return [helpers.write_image(folder / f"{i}.png", helpers.image(i)).name for i in range(n)]


def _rows(prefix: str, names: list[str]) -> list[dict]:
    rows = [{"path": f"{prefix}{name}", "label": ["cat", "dog"][i % 2],
             "split": ["train", "test"][i % 3 == 2], "caption": f"image {i}"}
            for i, name in enumerate(names)]  # fmt: skip
    rows.append({"path": f"{prefix}missing.png", "label": "cat", "split": "train", "caption": ""})
    return rows


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_manifest_of_relative_paths_scans_alike_from_a_url(tmp_path, bucket, fmt):
    local = tmp_path / "src"
    names = _images(local / "imgs")
    write = helpers.write_csv if fmt == "csv" else helpers.write_jsonl
    # The table one folder down, its paths climbing out of it: "../" within the URL too.
    (local / "meta").mkdir()
    write(local / "meta" / f"train.{fmt}", _rows("../imgs/", names))
    url = _upload(local, bucket)
    there = _same(local, url, local / "meta" / f"train.{fmt}", f"{url}/meta/train.{fmt}")
    assert there.root.path() == f"{url}/meta"
    assert sorted(there.splits) == ["test", "train"]
    (key, why), *_ = there.skipped  # the missing image, named by its URL
    assert key == "../imgs/missing.png"
    assert f"image {url}/imgs/missing.png: No such file or directory" in why


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_manifest_of_absolute_urls_scans_alike_with_absolute_paths(tmp_path, bucket, fmt):
    local = tmp_path / "src"
    names = _images(local / "imgs")
    url = _upload(local, bucket)
    write = helpers.write_csv if fmt == "csv" else helpers.write_jsonl
    write(local / f"t.{fmt}", _rows(f"{local}/imgs/", names))
    remote_table = tmp_path / "urls" / f"t.{fmt}"
    remote_table.parent.mkdir()
    write(remote_table, _rows(f"{url}/imgs/", names))
    fsspec.filesystem("memory").pipe_file(f"{url}/t/t.{fmt}", remote_table.read_bytes())
    here = scan(local / f"t.{fmt}")
    for src in (f"{url}/t/t.{fmt}", remote_table):  # a table on the store, and on a disk
        there = scan(src)
        strip = (str(local), url, str(tmp_path))
        assert _summary(there, *strip)[2:] == _summary(here, *strip)[2:]
        assert _loaded(there) == _loaded(here)
        assert there.splits["train"][0].path == f"{url}/imgs/0.png"


def test_a_manifest_root_may_be_a_url(tmp_path, bucket):
    local = tmp_path / "src"
    names = _images(local / "imgs")
    url = _upload(local, bucket)
    table = helpers.write_csv(tmp_path / "t.csv", _rows("", names))
    there = scan(table, PackOptions(root=f"{url}/imgs"))
    here = scan(table, PackOptions(root=str(local / "imgs")))
    assert _summary(there, f"{url}/imgs") == _summary(here, str(local / "imgs"))
    assert _loaded(there) == _loaded(here)


@pytest.mark.parametrize("make", [helpers.make_cifar10_python, helpers.make_cifar10_binary])
def test_cifar_batches_scan_and_load_alike_from_a_url(tmp_path, bucket, make):
    local = make(tmp_path / "cifar", per_batch=4, batches=2)
    there = _same(local, _upload(local, bucket))
    assert there.kind.startswith("cifar10") and there.num_items == 12


def test_a_bad_cifar_batch_on_a_url_is_named_by_its_url(tmp_path, bucket):
    local = helpers.make_cifar10_binary(tmp_path / "cifar", per_batch=4, batches=1)
    (local / "data_batch_1.bin").write_bytes(b"\0" * 100)
    url = _upload(local, bucket)
    with pytest.raises(SourceError, match=rf"^{url}/data_batch_1.bin: 100 bytes is not a whole"):
        scan(url)


def test_a_missing_url_or_a_url_of_another_file_is_one_line(bucket):
    with pytest.raises(SourceError, match=rf"^{bucket}/nope: no such folder"):
        source_root(f"{bucket}/nope")
    fsspec.filesystem("memory").pipe_file(f"{bucket}/x/a.jpg", b"jpeg")
    with pytest.raises(SourceError, match=rf"^{bucket}/x/a.jpg: is a file, not a folder; it is an"):
        source_root(f"{bucket}/x/a.jpg")


def test_a_url_whose_filesystem_is_not_installed_names_the_extra(tmp_path):
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401

        pytest.skip("gcsfs is installed here")
    except ImportError:
        pass
    with pytest.raises(StorageError, match=r"pip install 'shardpack\[gcs\]'") as caught:
        scan("gs://bucket/flowers")
    assert "\n" not in str(caught.value)
    with pytest.raises(ShardpackError, match=r"pip install 'shardpack\[gcs\]'"):
        pack("gs://bucket/flowers", tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before OUT was made


def test_packing_from_a_url_writes_the_same_shards(tmp_path, bucket):
    local = _class_tree(tmp_path / "src")
    url = _upload(local, f"{bucket}/src")  # named "src" by its last segment, as the folder
    options = PackOptions(shards=2, workers=2, on_error="skip")
    pack(local, tmp_path / "a", options)
    pack(url, tmp_path / "b", options)  # workers read the objects themselves
    assert helpers.shard_files(tmp_path / "b") == helpers.shard_files(tmp_path / "a")
    assert list(helpers.shard_files(tmp_path / "a")) == [
        "src-train.tfrecord-00000-of-00002",
        "src-train.tfrecord-00001-of-00002",
    ]
    fsspec.filesystem("memory").pipe_file(f"{bucket}/tables/flowers.csv",
                                          b"path\n../src/cat/img_000.jpg\n")  # fmt: skip
    pack(f"{bucket}/tables/flowers.csv", tmp_path / "c")  # a table's stem names it
    assert list(helpers.shard_files(tmp_path / "c")) == ["flowers-train.tfrecord-00000-of-00001"]
