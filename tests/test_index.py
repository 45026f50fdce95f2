"""index.py: write index.json atomically, build it from results, load it and refuse the unknown."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path

import pytest

from shardpack.errors import IndexFormatError
from shardpack.index import Index, PackStats, ShardInfo, Skipped, load_index
from shardpack.layout import INDEX_NAME
from shardpack.options import PackOptions
from shardpack.packing.merge import build_index
from shardpack.packing.packer import pack
from shardpack.packing.plan import ShardResult, make_plan
from shardpack.schema import Feature, Schema
from shardpack.sources import scan
from shardpack.storage import storage_at
from shardpack.storage.atomic import json_bytes, write_atomic
from tests import helpers

SHA = "ab" * 32
# A version-1 index's features: name -> dtype.
V1_FEATURES = {"image": "bytes", "label": "int64", "height": "int64", "width": "int64",
               "channels": "int64", "format": "bytes", "key": "bytes"}  # fmt: skip


def _shard(file: str, num_records: int) -> dict:
    return {"file": file, "num_records": num_records, "num_bytes": 100 * num_records, "sha256": SHA}


def _document() -> dict:
    """A valid version-1 index with two splits, written by hand from DESIGN.md."""
    return {
        "format": "shardpack-index",
        "version": 1,
        "name": "pets",
        "source": "folder",
        "classes": ["cats", "dogs"],
        "features": dict(V1_FEATURES),
        "encoding": "keep",
        "compression": "none",
        "seed": 0,
        "plan_digest": "cd" * 32,
        "splits": {
            "train": {
                "num_records": 5,
                "class_counts": [3, 2],
                "shards": [
                    _shard("pets-train.tfrecord-00000-of-00002", 3),
                    _shard("pets-train.tfrecord-00001-of-00002", 2),
                ],
            },
            "test": {"num_records": 1, "shards": [_shard("pets-test.tfrecord-00000-of-00001", 1)]},
        },
        "skipped": [{"key": "cats/bad.jpg", "reason": "truncated JPEG"}],
        "ignored": 1,
        "stats": {"seconds": 1.0},
    }


def _save(out: Path, document: object) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / INDEX_NAME).write_text(json.dumps(document), encoding="utf-8")
    return out


def _refused(out: Path, match: str) -> IndexFormatError:
    with pytest.raises(IndexFormatError, match=match) as caught:
        load_index(out)
    assert str(out / INDEX_NAME) in str(caught.value)  # names the file
    return caught.value


# ---- accepting -----------------------------------------------------------------------------


def test_load_index_accepts_a_valid_document(tmp_path):
    out = _save(tmp_path / "out", _document())
    index = load_index(out)
    assert isinstance(index, Index)
    assert index.out == str(out)
    assert (index.name, index.classes) == ("pets", ("cats", "dogs"))
    assert index.schema == Schema.build(("cats", "dogs"))  # what version 1 meant
    assert (index.encoding, index.compression) == ("keep", "none")
    assert list(index.splits) == ["train", "test"]
    train = index.split("train")
    assert train.num_records == 5
    assert train.class_counts == (3, 2)
    assert train.shards[1] == ShardInfo("pets-train.tfrecord-00001-of-00002", 2, 200, SHA)
    assert index.split("test").class_counts == ()  # optional
    assert index.shard_path(train.shards[0]) == str(out / "pets-train.tfrecord-00000-of-00002")
    assert (index.source, index.plan_digest, index.ignored) == ("folder", "cd" * 32, 1)
    assert index.skipped == (Skipped("cats/bad.jpg", "truncated JPEG"),)
    assert index.num_skipped == 1  # an index without num_skipped: the ones it names
    assert (index.stats.seconds, index.generation, index.history) == (1.0, 0, ())
    assert not index.image_size_told  # an index from before image_size cannot tell
    assert index.shuffle is None  # nor one from before shuffle which shuffle ran


def test_a_version_1_index_is_written_back_as_version_2_and_reads_alike(tmp_path):
    index = load_index(_save(tmp_path / "out", _document()))
    document = index.to_json()
    assert document["version"] == 2 and "image_size" not in document
    again = Index.from_json(index.storage, document)
    assert dataclasses.replace(again, version=1) == index
    assert json_bytes(again.to_json()) == json_bytes(document)


def test_load_index_accepts_a_relative_out(tmp_path, monkeypatch):
    _save(tmp_path / "out", _document())
    monkeypatch.chdir(tmp_path)
    assert load_index("out").out == str(tmp_path / "out")


def test_unknown_split_names_the_splits_there_are(tmp_path):
    """...and says to name one: `preview` reads 'train' unless told, which a pack of other
    splits lacks."""
    index = load_index(_save(tmp_path / "out", _document()))
    with pytest.raises(IndexFormatError, match=r"no split 'validation'; it has test, train: name "
                       r"one of those$"):  # fmt: skip
        index.split("validation")


def test_gzip_compression_is_accepted(tmp_path):
    document = _document()
    document["compression"] = "gzip"
    assert load_index(_save(tmp_path / "out", document)).compression == "gzip"


# ---- refusing ------------------------------------------------------------------------------


def test_missing_index_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _refused(out, "not found")


def test_a_folder_above_a_pack_names_the_pack_to_pass(tmp_path):
    """The demo's OUT (sample/ and shards/) passed for OUT/shards: the error says which to pass,
    not to rerun a stopped pack with --resume."""
    demo = tmp_path / "demo"
    (demo / "sample" / "circle").mkdir(parents=True)
    _save(demo / "shards", _document())
    error = str(_refused(demo, "no shardpack output"))
    assert error.endswith(f"but its folder shards is one: pass {demo / 'shards'}")
    assert "resume" not in error
    for name in ("b", "a", "c", "d"):
        _save(tmp_path / "outs" / name, _document())
    error = str(_refused(tmp_path / "outs", "no shardpack output"))
    assert error.endswith(f"its folders a, b, c, ... are: pass one of them, such as "
                          f"{tmp_path / 'outs' / 'a'}")  # fmt: skip


def test_a_folder_no_run_began_in_says_so_and_one_with_a_journal_says_to_resume(tmp_path):
    """`inspect ~/data/flowers` (the dataset, not its pack) was asked whether it was a pack
    stopped before its index and told to rerun it with --resume; a run stopped before its
    plan leaves OUT as it found it, so only a folder with a run's lock or journal can be one."""
    (tmp_path / "images" / "cat").mkdir(parents=True)
    (tmp_path / "images" / "cat" / "index.json").mkdir()  # a folder by that name: no pack
    error = str(_refused(tmp_path / "images", "not found"))
    assert error.endswith(f"{tmp_path / 'images'} is no shardpack output (no pack run has "
                          "written into it): pass the OUT of a pack run")  # fmt: skip
    for name in (".shardpack.journal", ".shardpack.lock"):  # a run stopped, or one going
        (tmp_path / "images" / name).write_text("")
        assert "rerun it with resume=True" in str(_refused(tmp_path / "images", "not found"))
        (tmp_path / "images" / name).unlink()


def test_missing_out_is_refused_naming_the_folder(tmp_path):
    with pytest.raises(IndexFormatError, match=f"{tmp_path / 'nowhere'}: no such folder"):
        load_index(tmp_path / "nowhere")


@pytest.mark.parametrize("text", ["", "{", "not json", '{"format": "shardpack-index",}'])
def test_non_json_is_refused(tmp_path, text):
    out = tmp_path / "out"
    out.mkdir()
    (out / INDEX_NAME).write_text(text)
    _refused(out, "unreadable")


def test_non_utf8_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / INDEX_NAME).write_bytes(b'{"name": "\xff\xfe"}')
    _refused(out, "unreadable")


def test_index_that_is_a_folder_is_refused(tmp_path):
    out = tmp_path / "out"
    (out / INDEX_NAME).mkdir(parents=True)
    _refused(out, "unreadable")


@pytest.mark.parametrize("document", [[], "shardpack-index", 1, None, {}, {"format": "tfds"}])
def test_wrong_format_is_refused(tmp_path, document):
    _refused(_save(tmp_path / "out", document), "'format' is not 'shardpack-index'")


@pytest.mark.parametrize("version", [3, 0, "1", None, True, 1.0])
def test_unknown_version_is_refused(tmp_path, version):
    document = _document()
    document["version"] = version
    error = _refused(_save(tmp_path / "out", document), "upgrade shardpack")
    assert repr(version) in str(error)


def _mutated(path: str, value: object) -> dict:
    """The valid document with the value at a dotted path replaced (or removed for ...)."""
    document = copy.deepcopy(_document())
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return document


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        ("name", ..., "'name' must be a str, got NoneType"),
        ("name", 5, "'name' must be a str, got int"),
        ("classes", "cats,dogs", "'classes' must be a list"),
        ("classes", ["cats", 2], "'classes' must be a list of strings"),
        ("features", ["image"], "'features' must be a dict"),
        ("encoding", None, "'encoding' must be a str"),
        ("compression", "zstd", "unknown compression 'zstd'"),
        ("compression", 1, "'compression' must be a str"),
        ("splits", [], "'splits' must be a dict"),
        ("splits.train", [], "split 'train' is not an object"),
        ("splits.train.num_records", "5", "'num_records' must be an integer >= 0, got '5'"),
        ("splits.train.num_records", True, "'num_records' must be an integer >= 0, got True"),
        ("splits.train.num_records", 5.0, "'num_records' must be an integer >= 0, got 5.0"),
        ("splits.train.shards", {}, "'shards' must be a list"),
        ("splits.train.shards.0", "file", "a shard of split 'train' is not an object"),
        ("splits.train.shards.0.file", ..., "'file' must be a str"),
        ("splits.train.shards.1.num_bytes", None, "'num_bytes' must be an integer >= 0, got None"),
        ("splits.train.shards.1.num_records", False, "'num_records' must be an integer >= 0"),
        ("splits.test.shards.0.sha256", 123, "'sha256' must be a str"),
        ("splits.train.name_count", 0, "'name_count' of split 'train' must be at least 1"),
        ("splits.train.next_shard", -1, "'next_shard' must be an integer >= 0, got -1"),
        ("splits.train.shards.0.generation", "1", "'generation' must be an integer >= 0"),
        ("history", [{"generation": 1}], "'history' must be a list of runs"),
        ("retired", ["a", 3], "'retired' must be a list of strings"),
        ("stats", {"workers": "2"}, "'stats' must hold numbers"),
        ("stats", {"url_failures": {"404": -1}}, "'stats' must hold numbers"),
        ("shuffle", "sorted", "'shuffle' must be one of global, window, none, got 'sorted'"),
        ("shuffle", None, "'shuffle' must be one of global, window, none, got None"),
    ],
)
def test_wrong_types_are_refused(tmp_path, path, value, match):
    _refused(_save(tmp_path / "out", _mutated(path, value)), match)


@pytest.mark.parametrize("counts", [5, "abc"])
def test_wrong_class_counts_type_is_refused(tmp_path, counts):
    # Regression: `tuple(counts)` raised TypeError for 5 (a traceback) and turned "abc" into
    # ('a', 'b', 'c').
    _refused(_save(tmp_path / "out", _mutated("splits.train.class_counts", counts)), "class_counts")


@pytest.mark.parametrize(
    "name",
    [
        "/etc/passwd",
        "../x",
        "..",
        ".",
        "../../etc/passwd",
        "sub/shard-00000",
        "sub\\shard",
        ".hidden",
        ".pets-train.tfrecord-00000-of-00002.partial",
        "",
        "-rf",
        "~/x",
        "C:x",
        "a b",
        "x\x00y",
    ],
)
def test_unsafe_shard_names_are_refused(tmp_path, name):
    document = _mutated("splits.test.shards.0.file", name)
    error = _refused(_save(tmp_path / "out", document), "refused shard name")
    assert repr(name) in str(error)


def test_shard_name_with_trailing_newline_is_refused(tmp_path):
    # Regression: the pattern ended in `$`, which also matches before a final newline.
    document = _mutated("splits.test.shards.0.file", "pets-test.tfrecord\n")
    _refused(_save(tmp_path / "out", document), "refused shard name")


@pytest.mark.parametrize("name", ["pets-train.tfrecord-00000-of-00001", "a", "9.x_y-z", "a..b"])
def test_plain_shard_names_are_accepted(tmp_path, name):
    document = _mutated("splits.test.shards.0.file", name)
    index = load_index(_save(tmp_path / "out", document))
    shard = index.split("test").shards[0]
    assert index.shard_path(shard) == os.path.join(str(tmp_path / "out"), name)


def test_refusal_does_not_touch_the_shard_path(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("keep out")
    document = _mutated("splits.test.shards.0.file", "../secret")
    _refused(_save(tmp_path / "out", document), "refused shard name")
    assert secret.read_text() == "keep out"


# ---- writing -------------------------------------------------------------------------------


def test_written_index_loads_back(tmp_path):
    index = load_index(_save(tmp_path / "first", _v2_document()))
    out = tmp_path / "out"
    out.mkdir()
    write_atomic(str(out / INDEX_NAME), json_bytes(index.to_json()))
    again = load_index(out)
    assert dataclasses.replace(again, out=index.out, storage=index.storage) == index


# ---- building ------------------------------------------------------------------------------


def _results(plan, dataset) -> list[ShardResult]:
    results = []
    for spec in plan.shards:
        counts = [0] * len(dataset.classes)
        for item in spec.items:
            counts[item.label] += 1
        results.append(
            ShardResult(
                split=spec.split,
                index=spec.index,
                file=spec.file,
                num_records=len(spec.items),
                num_bytes=100 * len(spec.items),
                sha256=SHA,
                label_counts=tuple(counts),
                skipped=(),
                seconds=0.1,
            )
        )
    return results


def test_build_index_merges_results_in_plan_order_and_loads_back(tmp_path):
    dataset = scan(helpers.make_tree(tmp_path / "src", {"cats": 4, "dogs": 3}))
    options = PackOptions(shards=3, seed=7)
    plan = make_plan(dataset, "pets", options, workers=1)
    results = _results(plan, dataset)
    bad = plan.shards[1].items[0]  # the worker skipped this one
    counts = list(results[1].label_counts)
    counts[bad.label] -= 1
    results[1] = dataclasses.replace(
        results[1],
        num_records=results[1].num_records - 1,
        label_counts=tuple(counts),
        skipped=((bad.key, "truncated JPEG"),),
    )
    out = tmp_path / "out"
    out.mkdir()
    document = build_index(
        out=storage_at(out),
        name="pets",
        dataset=dataset,
        options=options,
        plan=plan,
        results=list(reversed(results)),  # workers finish in any order
        stats=PackStats(seconds=1.5),
    ).to_json()
    assert document["plan_digest"] == plan.digest
    assert document["seed"] == 7
    assert document["shuffle"] == "global"  # which shuffle ran (an index before it has none)
    assert document["classes"] == ["cats", "dogs"]
    assert document["skipped"] == [{"key": bad.key, "reason": "truncated JPEG"}]
    train = document["splits"]["train"]
    assert [s["file"] for s in train["shards"]] == [s.file for s in plan.shards]
    assert train["num_records"] == 6
    assert train["class_counts"] == [4 - (bad.label == 0), 3 - (bad.label == 1)]
    write_atomic(str(out / INDEX_NAME), json_bytes(document))
    index = load_index(out)
    assert [s.file for s in index.split("train").shards] == [s.file for s in plan.shards]
    assert index.schema == dataset.schema
    assert document["version"] == 2
    assert document["features"]["label"] == {
        "dtype": "int64",
        "shape": [],
        "classes": ["cats", "dogs"],
    }


def test_build_index_for_cifar100_names_coarse_classes(tmp_path):
    dataset = scan(helpers.make_cifar100_python(tmp_path / "c100", n_train=6, n_test=2))
    options = PackOptions(shards=2, shuffle=False)
    plan = make_plan(dataset, "c100", options, workers=1)
    document = build_index(
        out=storage_at(tmp_path / "out"),
        name="c100",
        dataset=dataset,
        options=options,
        plan=plan,
        results=_results(plan, dataset),
        stats=PackStats(),
    ).to_json()
    coarse = [f"coarse{i}" for i in range(20)]
    assert document["features"]["coarse_label"] == {"dtype": "int64", "shape": [],
                                                     "classes": coarse}  # fmt: skip
    assert "coarse_classes" not in document  # one definition: the feature's classes
    assert document["seed"] is None  # no shuffle: the seed decides nothing
    assert list(document["splits"]) == ["test", "train"]


def test_version_1_cifar100_index_gets_its_coarse_label_classes(tmp_path):
    document = _document()
    document["features"]["coarse_label"] = "int64"
    document["coarse_classes"] = ["animal", "plant"]
    index = load_index(_save(tmp_path / "out", document))
    assert index.schema["coarse_label"] == Feature("int64", classes=("animal", "plant"))


def _v2_document() -> dict:
    document = _document()
    schema = Schema.build(("cats", "dogs"), {"boxes": Feature("float32", (-1, 4))})
    return {**document, "version": 2, "features": schema.to_json()}


def test_version_2_index_carries_a_typed_schema(tmp_path):
    index = load_index(_save(tmp_path / "out", _v2_document()))
    assert index.schema["boxes"] == Feature("float32", (-1, 4))
    assert index.classes == ("cats", "dogs")


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d["features"].update(boxes={"dtype": "float64", "shape": [-1, 4]}), "boxes"),
        (lambda d: d["features"].update(boxes={"dtype": "float32", "shape": [4]}), "boxes"),
        (lambda d: d["features"].pop("key"), "'key'"),
        (lambda d: d.update(classes=["dogs", "cats"]), "'classes' differs"),
        (lambda d: d["features"].update(label="int64"), "'label'"),
    ],
)
def test_version_2_index_with_a_bad_schema_is_refused(tmp_path, mutate, match):
    document = _v2_document()
    mutate(document)
    _refused(_save(tmp_path / "out", document), match)


# ---- the typed document round-trips ------------------------------------------------------


def _read_back(out: Path, index: Index) -> Index:
    """OUT's index.json as load_index reads it, bound to the storage `index` has."""
    return dataclasses.replace(load_index(out), storage=index.storage)


def test_the_indexes_a_pack_an_append_and_an_update_write_read_back_to_their_bytes(tmp_path):
    """Issue 32 item 3: the Index each run builds by keyword is the one load_index reads, and
    to_json writes index.json's bytes again: generations, history, name counts, retired
    shards, copies and statistics included."""
    src = helpers.make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    helpers.write_image(src / "cat" / "copy.jpg", helpers.image(0))  # cat/img_000.jpg's pixels
    out = tmp_path / "out"
    packed = pack(src, out, PackOptions(workers=1, shards=2, dedup="exact")).index
    assert _read_back(out, packed) == packed and packed.duplicates["removed"] == 1
    assert helpers.check_indexes_round_trip(tmp_path) == 1
    helpers.make_tree(src, {"eel": 2}, seed=600)
    grown = pack(src, out, PackOptions(grow="append", workers=1)).index
    assert _read_back(out, grown) == grown and helpers.check_indexes_round_trip(tmp_path) == 1
    assert (grown.generation, [r.mode for r in grown.history]) == (1, ["append"])
    train = grown.split("train")
    assert (train.names_count, train.next_number, len(train.shards)) == (2, 3, 3)
    assert [s.generation for s in train.shards] == [0, 0, 1]
    helpers.write_image(src / "cat" / "img_001.jpg", helpers.image(99))
    (src / "dog" / "img_000.jpg").unlink()
    updated = pack(src, out, PackOptions(grow="update", workers=1)).index
    assert _read_back(out, updated) == updated and helpers.check_indexes_round_trip(tmp_path) == 1
    assert [r.mode for r in updated.history] == ["append", "update"]
    assert updated.retired and not set(updated.retired) & {s.file for s in updated.shards}
    train = updated.split("train")
    assert [s.file for s in train.shards] == [
        f"src-train.tfrecord-{i:05d}-of-00002" for i in range(len(train.shards))
    ]  # the gaps the update left closed, the names keeping the count first packed


def test_the_round_trip_check_finds_a_field_the_index_would_drop(tmp_path):
    out = _save(tmp_path / "out", _v2_document())
    document = {**load_index(out).to_json(), "planted": 1}  # read, and left out when written
    (out / INDEX_NAME).write_bytes(json_bytes(document))
    with pytest.raises(AssertionError, match="does not round-trip"):
        helpers.check_indexes_round_trip(tmp_path)
    (out / INDEX_NAME).write_bytes(json_bytes(load_index(out).to_json()))
    assert helpers.check_indexes_round_trip(tmp_path) == 1
