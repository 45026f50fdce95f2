"""TFDS prepared directories and WebDataset tars as sources, each packed into every container.

The sources are written by their own libraries (a tfds GeneratorBasedBuilder, webdataset's
ShardWriter), and what shardpack packs is compared with what those libraries read back
(`tfds.builder_from_directory(SRC).as_dataset()`, `webdataset.WebDataset`); each container's
own readers (TensorFlow, Grain, webdataset) read what was packed. TensorFlow runs in child
processes only: the test process forks pack workers, which must stay TF-free.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from shardpack.errors import SourceError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.describe import describe
from shardpack.read.stream import iter_examples
from shardpack.read.verify import verify
from shardpack.schema import Feature
from shardpack.sources import scan
from shardpack.sources import tars as tars_source
from tests import helpers
from tests.s3server import Bucket

FORMATS = ("tfrecord", "array_record", "webdataset")
OPTIONS = PackOptions(workers=1, shards=2, overwrite=True)

# A tiny TFDS dataset with every feature kind the TFDS source carries, prepared by tfds itself.
BUILD_TFDS = r"""
import sys, numpy as np, tensorflow_datasets as tfds

class Tiny(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3)),
            "label": tfds.features.ClassLabel(names=["cat", "dog", "eel"]),
            "caption": tfds.features.Text(),
            "score": tfds.features.Tensor(shape=(), dtype=np.float32),
            "vec": tfds.features.Tensor(shape=(3,), dtype=np.int64),
            "tags": tfds.features.Sequence(tfds.features.Text()),
            "objects": tfds.features.Sequence({
                "bbox": tfds.features.BBoxFeature(),
                "kind": tfds.features.ClassLabel(names=["a", "b"]),
            }),
        }))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(9), "test": self._generate_examples(4)}

    def _generate_examples(self, n):
        rng = np.random.default_rng(n)
        for i in range(n):
            boxes = i % 3
            yield i, {
                "image": rng.integers(0, 255, (7 + i, 5 + i, 3), dtype=np.uint8),
                "label": i % 3, "caption": f"picture {i}", "score": i / 2,
                "vec": [i, i + 1, i + 2], "tags": ["x"] * (i % 3),
                "objects": {"bbox": [tfds.features.BBox(0.1, 0.2, 0.3, 0.4)] * boxes,
                            "kind": [1] * boxes},
            }

for fmt in ("tfrecord", "array_record"):
    Tiny(data_dir=f"{sys.argv[1]}/{fmt}", file_format=fmt).download_and_prepare()
print("[]")
"""

# What tfds reads from a prepared directory: per split, each record's pixels (sha256), label,
# caption, tags and boxes, keyed by caption.
READ_TFDS = r"""
import hashlib, json, sys, tensorflow_datasets as tfds
builder = tfds.builder_from_directory(sys.argv[1])
read = {}
for split in builder.info.splits:
    rows = {}
    for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
        caption = ex["caption"].decode()
        rows[caption] = {
            "pixels": hashlib.sha256(ex["image"].tobytes()).hexdigest(),
            "shape": list(ex["image"].shape), "label": int(ex["label"]),
            "tags": [t.decode() for t in ex["tags"]],
            "bbox": (ex["objects"]["bbox"] if "objects" in ex else ex["objects/bbox"])
            .reshape(-1).round(5).tolist(),
        }
    read[split] = rows
print(json.dumps(read))
"""


@pytest.fixture(scope="module")
def tfds_dirs(tmp_path_factory) -> dict[str, Path]:
    """fmt -> the directory tfds prepared, with TFRecord and with ArrayRecord shards."""
    helpers.needs("tensorflow_datasets", "tensorflow", "array_record")
    root = tmp_path_factory.mktemp("tfds")
    helpers.run_json(BUILD_TFDS, str(root))
    return {fmt: root / fmt / "tiny" / "1.0.0" for fmt in ("tfrecord", "array_record")}


@pytest.fixture(scope="module")
def tfds_read(tfds_dirs) -> dict:
    """What tfds itself reads from the TFRecord directory (the ArrayRecord one holds alike)."""
    return helpers.run_json(READ_TFDS, str(tfds_dirs["tfrecord"]))


def _ours(out: Path, split: str) -> dict:
    """Our records of a split in READ_TFDS's form."""
    rows = {}
    for ex in iter_examples(out, split, decode=True):
        rows[ex["caption"]] = {
            "pixels": hashlib.sha256(np.ascontiguousarray(ex["image"]).tobytes()).hexdigest(),
            "shape": list(ex["image"].shape), "label": ex["label"], "tags": ex["tags"],
            "bbox": ex["objects/bbox"].reshape(-1).round(5).tolist(),
        }  # fmt: skip
    return rows


def test_tfds_schema_and_classes_come_from_features_json(tfds_dirs):
    dataset = scan(tfds_dirs["tfrecord"])
    assert dataset.kind == "tfds" and dataset.classes == ("cat", "dog", "eel")
    assert {split: len(items) for split, items in dataset.splits.items()} == {"train": 9, "test": 4}
    extras = dataset.schema.extras
    assert extras["caption"] == Feature("bytes", text=True)
    assert extras["score"] == Feature("float32")
    assert extras["vec"] == Feature("int64", (-1,))
    assert extras["tags"] == Feature("bytes", (-1,), text=True)
    assert extras["objects/bbox"] == Feature("float32", (-1, 4))
    assert extras["objects/kind"] == Feature("int64", (-1,), classes=("a", "b"))


@pytest.mark.parametrize("src_fmt", ["tfrecord", "array_record"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_tfds_packs_into_each_container_as_tfds_reads_it(tfds_dirs, tfds_read, src_fmt, fmt,
                                                         tmp_path):  # fmt: skip
    out = tmp_path / "out"
    result = pack(tfds_dirs[src_fmt], out, replace(OPTIONS, format=fmt))
    assert result.num_records == 13 and result.num_skipped == 0
    assert result.index.name == "tiny"
    for split in ("train", "test"):
        assert _ours(out, split) == tfds_read[split]
    if (src_fmt, fmt) != ("array_record", "tfrecord"):  # TFDS reads that one back below
        assert helpers.peer_examples(out) == helpers.our_examples(out)  # TF, Grain, webdataset
    assert verify(out, decode=True).ok


def test_tfds_repacked_reads_back_through_tfds(tfds_dirs, tfds_read, tmp_path):
    out = tmp_path / "out"
    pack(tfds_dirs["array_record"], out, replace(OPTIONS, format="tfrecord"))
    assert helpers.run_json(READ_TFDS, str(out)) == tfds_read


def test_tfds_missing_shard_is_one_line(tfds_dirs, tmp_path):
    src = Path(shutil.copytree(tfds_dirs["tfrecord"], tmp_path / "src"))
    (src / "tiny-test.tfrecord-00000-of-00001").unlink()
    done = helpers.cli("pack", str(src), str(tmp_path / "out"), "--source", "tfds")
    helpers.one_line_error(done, "tiny-test.tfrecord-00000-of-00001", "missing", "copy every")


def test_a_tfds_folder_passed_above_its_version_names_the_version_folder(tfds_dirs):
    """~/tensorflow_datasets/tiny (the docs' `cifar10/3.0.2` without its version) said to pass
    1.0.0 with --source shardpack and its index.json, which TFDS never writes: a dead end."""
    version = tfds_dirs["tfrecord"]
    for above in (version.parent, version.parent.parent):  # <name>/, and TFDS's data_dir
        with pytest.raises(SourceError) as caught:
            scan(above)
        said = str(caught.value)
        assert said.endswith(
            f"is a shard of the TFDS prepared directory {version} "
            "(dataset_info.json beside it): pass that folder as SRC"
        ), said
        assert "shardpack" not in said.split(": no images found")[1]
    assert scan(version).kind == "tfds"  # the advice works


def test_tfds_unsupported_feature_is_refused_by_name(tfds_dirs, tmp_path):
    src = Path(shutil.copytree(tfds_dirs["tfrecord"], tmp_path / "src"))
    features = src / "features.json"
    text = features.read_text().replace("text_feature.Text", "video_feature.Video", 1)
    features.write_text(text)
    with pytest.raises(SourceError, match=r"feature 'caption' is a TFDS Video"):
        scan(src)


# ---- WebDataset tars -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wds_dir(tmp_path_factory) -> Path:
    helpers.needs("webdataset")
    return helpers.write_tars(tmp_path_factory.mktemp("wds") / "tars")


def _wds_read(urls: str) -> dict[str, dict]:
    """What webdataset itself yields, by key."""
    with helpers.torch_held_out():  # tried as it loads, and for a DataLoader worker as it reads
        import webdataset as wds

        samples = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        return {s["__key__"]: s for s in samples}


def _check_as_webdataset_reads(out: Path, urls: str) -> int:
    """Every packed record equals the sample webdataset yields; returns how many."""
    samples = _wds_read(urls)
    records = list(iter_examples(out, "train"))
    for record in records:
        sample = samples[record["key"].split(":", 1)[1]]
        meta = json.loads(sample["json"])
        assert record["image"] == sample["jpg"]
        assert record["label"] == int(sample["cls"])
        assert record["txt"] == sample["txt"].decode()
        assert record["seg.png"] == sample["seg.png"]
        assert record["n"] == meta["n"] and record["score"] == pytest.approx(meta["score"])
        assert record["tags"] == meta["tags"] and record["json/width"] == meta["width"]
        assert "exif" not in record
    return len(records)


# TensorFlow reads the TFRecords (Grain the ArrayRecords, webdataset the tars).
@pytest.mark.parametrize("fmt", [pytest.param("tfrecord", marks=pytest.mark.heavy), *FORMATS[1:]])
def test_tars_pack_into_each_container_as_webdataset_reads_them(wds_dir, fmt, tmp_path):
    out = tmp_path / "out"
    result = pack(wds_dir, out, replace(OPTIONS, format=fmt))
    assert result.num_records == 12 and result.num_skipped == 0
    assert _check_as_webdataset_reads(out, str(wds_dir / "shards-{000..002}.tar")) == 12
    assert helpers.peer_examples(out) == helpers.our_examples(out)
    assert result.index.schema.classes == ("0", "1", "2", "3")
    assert verify(out, decode=True).ok
    assert describe(out)["splits"]["train"]["num_records"] == 12


def test_tars_scan_warns_of_json_fields_left_out(wds_dir):
    dataset = scan(wds_dir)
    assert dataset.kind == "webdataset"
    assert any("'exif' left out" in warning for warning in dataset.warnings)
    assert dataset.schema["txt"] == Feature("bytes", text=True)
    assert dataset.schema["tags"] == Feature("bytes", (-1,), text=True)
    assert dataset.schema["seg.png"] == Feature("bytes")


def test_tars_brace_pattern_and_one_file(wds_dir, tmp_path):
    pattern = str(wds_dir / "shards-{000..001}.tar")
    result = pack(pattern, tmp_path / "two", OPTIONS)
    assert result.num_records == 10
    assert _check_as_webdataset_reads(tmp_path / "two", pattern) == 10
    one = wds_dir / "shards-002.tar"
    result = pack(one, tmp_path / "one", replace(OPTIONS, source="webdataset", shards=1))
    assert result.num_records == 2
    assert _check_as_webdataset_reads(tmp_path / "one", str(one)) == 2


def test_tars_class_names_from_classes(wds_dir, tmp_path):
    options = replace(OPTIONS, classes=("w", "x", "y", "z"))
    assert pack(wds_dir, tmp_path / "out", options).index.schema.classes == ("w", "x", "y", "z")
    dataset = scan(wds_dir, replace(options, classes=("w",)))
    assert len(dataset.splits["train"]) == 3  # labels 0 of 0..3
    assert all("not one of the 1 classes" in why for _, why in dataset.skipped)


def test_tars_keys_starting_with_two_underscores_are_samples_as_webdataset_reads_them(tmp_path):
    """webdataset skips only metadata members (`__x__`, `__x__/...`): `__0001.jpg` and
    `__key__.jpg` are samples. Both were left out without a word (no skip, no count)."""
    helpers.needs("webdataset")
    src = tmp_path / "a.tar"
    with tarfile.open(src, "w") as tar:
        for name, data in [("__0001.jpg", helpers.jpeg(1)), ("__0001.cls", b"1"),
                           ("__key__.jpg", helpers.jpeg(2)), ("__key__.cls", b"0"),
                           ("__meta__", b"{}"), ("__meta__/x.jpg", helpers.jpeg(3)),
                           ("0002.jpg", helpers.jpeg(4)), ("0002.cls", b"1")]:  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dataset = scan(src)
    assert [item.key for item in dataset.splits["train"]] == [
        "a.tar:__0001", "a.tar:__key__", "a.tar:0002",
    ]  # fmt: skip
    assert dataset.skipped == ()
    out = tmp_path / "out"
    assert pack(src, out, OPTIONS).num_records == 3
    samples = _wds_read(str(src))
    assert sorted(samples) == ["0002", "__0001", "__key__"]
    for record in iter_examples(out, "train"):
        sample = samples[record["key"].split(":", 1)[1]]
        assert (record["image"], record["label"]) == (sample["jpg"], int(sample["cls"]))


def _tar_of(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_images_with_a_dot_in_their_key_are_skipped_saying_how_webdataset_reads_them(tmp_path):
    """`s.0001.JPG` is key `s`, extension `0001.JPG` to webdataset (the key ends at the first
    dot): such samples were skipped as 'no image member' without a word of why."""
    helpers.needs("webdataset")
    members = [(f"s.{i:04d}.{ext}", data) for i in range(3)  # one sample, `s`
               for ext, data in (("JPG", helpers.jpeg(i)), ("cls", b"0"))]  # fmt: skip
    members += [("photos/img7.v2.jpg", helpers.jpeg(7)), ("photos/img7.v2.cls", b"1")]
    members += [("good.jpg", helpers.jpeg(9)), ("good.cls", b"0"), ("text.txt", b"no image")]
    src = _tar_of(tmp_path / "a.tar", members)
    read = _wds_read(str(src))  # as webdataset itself reads them
    assert {"0000.jpg", "0001.jpg", "0002.jpg"} <= set(read["s"])
    assert {"v2.jpg", "v2.cls"} <= set(read["photos/img7"])
    dataset = scan(src)
    assert [item.key for item in dataset.splits["train"]] == ["a.tar:good"]
    assert dict(dataset.skipped) == {
        "a.tar:s": "no image member as WebDataset reads it: member 's.0000.JPG' is key 's' with "
        "extension '0000.jpg' (WebDataset ends a key at the first dot of the member's name), as "
        "are 2 more of its images; rename the members <key>.<extension> with no dot in the "
        "key, such as 's_0000.JPG'",
        "a.tar:photos/img7": "no image member as WebDataset reads it: member "
        "'photos/img7.v2.jpg' is key 'photos/img7' with extension 'v2.jpg' (WebDataset ends a "
        "key at the first dot of the member's name); rename the members <key>.<extension> with "
        "no dot in the key, such as 'photos/img7_v2.jpg'",
        "a.tar:text": "no image member (.jpg, .jpeg, .png, .webp, ...)",  # no image at all
    }
    renamed = [(name.replace("s.", "s_").replace("7.v2", "7_v2"), data) for name, data in members]
    (tmp_path / "renamed").mkdir()
    dataset = scan(_tar_of(tmp_path / "renamed" / "a.tar", renamed))
    assert len(dataset.splits["train"]) == 5  # named as the reason says, each packs
    assert [key for key, _ in dataset.skipped] == ["a.tar:text"]


def test_a_folder_of_tars_skips_hidden_files_as_every_folder_source_does(wds_dir, tmp_path):
    """macOS copies leave an AppleDouble `._shards-000.tar` beside each tar on a disk of
    another kind: the whole folder was refused ('._shards-000.tar: is not a tar file')."""
    src = Path(shutil.copytree(wds_dir, tmp_path / "tars"))
    (src / "._shards-000.tar").write_bytes(
        b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X" + bytes(4000)
    )
    dataset = scan(src)
    assert dataset.kind == "webdataset" and len(dataset.splits["train"]) == 12
    assert not any("._" in item.key for item in dataset.splits["train"])


def test_a_tar_or_a_tfds_shard_that_is_a_link_says_it_is_not_followed(wds_dir, tmp_path):
    """Both said only 'cannot open (Too many levels of symbolic links)' of a single link; a
    tar, given or in SRC's folder, says where it leads and what to pass instead, as a
    manifest does (a Hugging Face cache's tars are links into its blobs)."""
    target = wds_dir / "shards-000.tar"
    (tmp_path / "link.tar").symlink_to(target)
    folder = tmp_path / "linked"
    folder.mkdir()  # its tar a relative link, as a Hugging Face cache's are
    (folder / "shards-000.tar").symlink_to(os.path.relpath(target, folder))
    for src, link in ((tmp_path / "link.tar",) * 2, (folder, folder / "shards-000.tar")):
        with pytest.raises(SourceError) as caught:
            scan(src)
        said = str(caught.value)
        assert said.startswith(f"{link}: is a symbolic link to {target}; "), said
        fix = "pass the file it points to, or a copy of its folder with the links resolved (cp -rL"
        assert fix in said and "Too many levels" not in said
    src = tmp_path / "tfds"  # a TFRecord pack is a TFDS prepared directory
    pack(helpers.make_tree(tmp_path / "src", {"a": 2}), src, OPTIONS)
    shard = next(src.glob("*.tfrecord-*"))
    shard.rename(tmp_path / shard.name)
    shard.symlink_to(tmp_path / shard.name)
    # a TFDS shard said ELOOP's 'Too many levels', 'pass the real path' (of one shard of many)
    # and, from the CLI, to run verify on a folder with no index.json
    with pytest.raises(SourceError) as caught:
        scan(src, PackOptions(source="tfds"))
    assert str(caught.value) == (
        f"{shard}: is a symbolic link to {tmp_path / shard.name}; shardpack does not follow links "
        "it did not make: pass a copy of its folder with the links resolved (cp -rL: a Hugging "
        "Face cache's snapshots are links into its blobs)"
    )


def _hostile_tar(path: Path) -> Path:
    """A tar with a good sample, one holding a link, one a device, one an over-long caption,
    one a label that would make a trillion classes."""
    with tarfile.open(path, "w") as tar:

        def add(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.type = len(data), kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
            tar.addfile(info, io.BytesIO(data))

        add("good.jpg", helpers.jpeg(1))
        add("good.cls", b"0")
        add("link.jpg", helpers.jpeg(2))
        add("link.txt", kind=tarfile.SYMTYPE)
        add("dev.jpg", kind=tarfile.CHRTYPE)
        add("long.jpg", helpers.jpeg(3))
        add("long.txt", b"x" * 2000)
        add("huge.jpg", helpers.jpeg(4))
        add("huge.cls", b"99999999999")
    return path


def test_tars_links_devices_and_over_long_members_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tars_source, "MAX_MEMBER_BYTES", 1000)
    src = _hostile_tar(tmp_path / "hostile.tar")
    dataset = scan(src)
    assert [item.key for item in dataset.splits["train"]] == ["hostile.tar:good"]
    reasons = dict(dataset.skipped)
    assert "a symbolic link" in reasons["hostile.tar:link"]
    assert "a device" in reasons["hostile.tar:dev"]
    assert "over-long" in reasons["hostile.tar:long"]
    assert "over the 1,000,000 classes" in reasons["hostile.tar:huge"]
    assert dataset.classes == ("0",)


def test_a_tar_that_is_not_a_tar_is_one_line(tmp_path):
    src = tmp_path / "data.tar"
    src.write_bytes(b"this is no tar file\n" * 100)
    done = helpers.cli("pack", str(src), str(tmp_path / "out"))
    helpers.one_line_error(done, str(src), "is not a tar file", "pass WebDataset .tar files")


# ---- what every source promises --------------------------------------------------------------


@pytest.fixture(params=["tfds", "webdataset"])
def src(request) -> Path:
    if request.param == "tfds":
        return request.getfixturevalue("tfds_dirs")["tfrecord"]
    return request.getfixturevalue("wds_dir")


@pytest.mark.parametrize("fmt", ["tfrecord", "webdataset"])
def test_one_or_two_workers_same_bytes_and_resume(src, fmt, tmp_path):
    options = replace(OPTIONS, format=fmt, shards=3)
    pack(src, tmp_path / "one", options)
    pack(src, tmp_path / "two", replace(options, workers=2))
    wanted = helpers.shard_files(tmp_path / "one")
    assert helpers.shard_files(tmp_path / "two") == wanted
    out = tmp_path / "two"
    sorted(p for p in out.iterdir() if p.name in wanted)[1].unlink()  # an interrupted run
    (out / "index.json").unlink()
    result = pack(src, out, replace(options, resume=True))
    assert result.num_reused == len(wanted) - 1
    assert helpers.shard_files(out) == wanted


def test_preview_draws_what_each_source_packed(src, tmp_path):
    out, sheet = tmp_path / "out", tmp_path / "sheet.png"
    pack(src, out, replace(OPTIONS, format="webdataset"))
    done = helpers.cli("preview", str(out), "--out", str(sheet), "--n", "6")
    assert done.returncode == 0 and done.stdout.strip() == f"wrote {sheet}", done.stderr
    import cv2

    pixels = cv2.imread(str(sheet))
    assert pixels.shape == (2 * (128 + 22), 3 * 128, 3)  # 6 cells of 128 pixels, 2 rows of 3
    green = (pixels[:, :, 1] > 200) & (pixels[:, :, 0] < 60) & (pixels[:, :, 2] < 60)
    assert (green.sum() > 50) == (src.name != "tars")  # TFDS's objects/bbox drawn


def test_tars_on_s3_pack_as_from_disk(wds_dir, s3: Bucket, tmp_path):
    local, options = tmp_path / "local", replace(OPTIONS, name="tars")
    pack(wds_dir, local, options)
    url = s3.put_tree(wds_dir, "raw/tars")
    pack(url, tmp_path / "folder", options)
    assert helpers.shard_files(tmp_path / "folder") == helpers.shard_files(local)
    pack(f"{url}/shards-{{000..002}}.tar", tmp_path / "pattern", options)
    assert helpers.shard_files(tmp_path / "pattern") == helpers.shard_files(local)


def test_a_tar_of_class_folders_is_warned_of_as_unlabeled(tmp_path):
    """`tar cf flowers.tar flowers` packed as unlabeled WebDataset samples without a word."""
    helpers.make_tree(tmp_path / "flowers", {"daisy": 2, "rose": 1})
    with tarfile.open(tmp_path / "flowers.tar", "w") as tar:
        tar.add(tmp_path / "flowers", arcname="flowers")
    dataset = scan(tmp_path / "flowers.tar")
    assert not dataset.classes  # unlabeled, as webdataset reads it
    assert dataset.warnings == (
        "no sample has a label (.cls); its images lie in 2 folders (flowers/daisy/, "
        "flowers/rose/): if the folders are classes, extract the tar (tar xf) and pack the "
        "folder they are in, whose class folders give the labels",
    )
    with tarfile.open(tmp_path / "one.tar", "w") as tar:  # one folder: nothing to warn of
        tar.add(tmp_path / "flowers" / "daisy", arcname="daisy")
    assert scan(tmp_path / "one.tar").warnings == ()
