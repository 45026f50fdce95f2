"""Split trees, --classes and --split: real trees packed, read back with and without TensorFlow."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from shardpack.errors import OptionError, ShardpackError, SourceError
from shardpack.options import MAX_SPLIT_CHARS, PackOptions, as_flags, parse_split
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from shardpack.sources import scan
from shardpack.sources.classlist import parse_classes
from shardpack.sources.splitting import stratified_split
from tests.helpers import make_tree, one_line_error, run_cli, tf_records


def _index(out: Path) -> dict:
    return json.loads((out / "index.json").read_text())


def _split_tree(root: Path) -> Path:
    make_tree(root / "train", {"cat": 3, "dog": 2, "eel": 1})
    make_tree(root / "validation", {"cat": 2, "eel": 1}, seed=10)  # no dog here
    return root


# ---- split trees ----------------------------------------------------------------------------


@pytest.mark.heavy
def test_split_tree_packs_splits_with_one_class_list(tmp_path: Path):
    out = tmp_path / "out"
    pack(_split_tree(tmp_path / "src"), out, PackOptions(workers=1))
    index = _index(out)
    assert index["source"] == "split-tree"
    assert index["classes"] == ["cat", "dog", "eel"]
    assert index["splits"]["train"]["class_counts"] == [3, 2, 1]
    assert index["splits"]["validation"]["class_counts"] == [2, 0, 1]  # dog absent: 0
    # The same label means the same class in both splits, read back through TensorFlow.
    for split in ("train", "validation"):
        for record in tf_records(out, split):
            key = record["key"].decode()
            assert key.startswith(f"{split}/")
            assert index["classes"][record["label"]] == key.split("/")[1]
    keys = sorted(r["key"] for r in iter_examples(out, "validation"))
    assert keys == ["validation/cat/img_000.jpg", "validation/cat/img_001.jpg",
                    "validation/eel/img_000.jpg"]  # fmt: skip


def test_an_image_in_a_split_folder_beside_its_classes_is_skipped_with_why(tmp_path: Path):
    src = _split_tree(tmp_path / "src")
    (src / "train" / "loose.jpg").write_bytes((src / "train" / "eel" / "img_000.jpg").read_bytes())
    dataset = scan(src)
    assert dict(dataset.skipped) == {
        "train/loose.jpg": "in no class folder (SRC/<split>/<class>/<image>): move it into its "
        "class's folder"
    }
    assert dataset.ignored == 0


def test_an_empty_split_folder_is_warned_of_as_no_split(tmp_path: Path):
    src = _split_tree(tmp_path / "src")
    (src / "test" / "cat").mkdir(parents=True)  # its images never copied in
    dataset = scan(src)
    assert sorted(dataset.splits) == ["train", "validation"]
    assert dataset.warnings[0] == (f"split folder 'test' ({src / 'test'}) holds no image in a "
                                   "class folder: the pack has no split 'test'")  # fmt: skip


def test_a_class_folder_empty_in_one_split_says_that_split_lacks_it_not_the_class(
    tmp_path: Path,
):
    """`test/cat/` left empty beside `train/cat/` with images was warned of as "it keeps label 0
    with no records", untrue of a class with records in train; a class empty in every split
    still says so."""
    make_tree(tmp_path / "train", {"cat": 2, "dog": 2, "fox": 0})
    make_tree(tmp_path / "test", {"dog": 1}, seed=10)
    (tmp_path / "test" / "cat").mkdir()
    (tmp_path / "train" / "fox").mkdir()
    dataset = scan(tmp_path)
    assert dataset.schema.classes == ("cat", "dog", "fox")
    assert sorted(w for w in dataset.warnings if "holds no images" in w) == [
        f"class 'cat' ({tmp_path / 'test' / 'cat'}) holds no images: this split has no record "
        "of label 0, which another split has",
        f"class 'fox' ({tmp_path / 'train' / 'fox'}) holds no images: it keeps label 2 with no "
        "records",
    ]


def test_split_folders_of_images_alone_say_where_the_images_lie(tmp_path: Path):
    """Images straight in train/ and valid/ (no class folders) ended in a bare 'no images
    found' about folders full of images; as for images in SRC itself, it now says where they
    lie and what to do."""
    src = tmp_path / "src"
    for split, count in (("train", 2), ("valid", 1)):
        make_tree(src / split, {"x": count}, seed=len(split))
        for image in (src / split / "x").iterdir():
            image.rename(src / split / image.name)
        (src / split / "x").rmdir()
    with pytest.raises(SourceError) as caught:
        scan(src)
    assert str(caught.value) == (
        f"{src}: no images found; its 3 images lie in its split folders (train/, valid/) "
        "themselves, but each class needs its own folder (SRC/<split>/<class>/<image>): move "
        "them into class folders"
    )
    (src / "valid" / "img_000.jpg").unlink()
    (src / "train" / "notes.txt").write_text("no images here")
    for image in (src / "train").glob("*.jpg"):
        image.unlink()
    with pytest.raises(SourceError, match="no images found; expected SRC/<split>/<class>/"):
        scan(src)


def test_split_folders_beside_other_folders_are_refused_not_taken_for_classes(tmp_path: Path):
    """Taken for a class tree (as they once were), every image was labelled by its split."""
    src = _split_tree(tmp_path / "src")
    make_tree(src / "extras", {"x": 1}, seed=20)
    with pytest.raises(SourceError) as caught:
        scan(src)
    assert str(caught.value) == (
        f"{src}: holds split folders ('train', 'validation') and others ('extras'): move the "
        "others out of SRC (a split tree holds split folders only), pass "
        "split_names=('extras', 'train', 'validation') if every one is a split, or pass "
        "source='folder' to take every folder as a class"
    )
    said = as_flags(caught.value)  # as the CLI says it
    assert "pass --splits extras,train,validation if every" in said
    assert "or pass --source folder to take" in said
    dataset = scan(src, PackOptions(source="folder"))  # the ways out it names
    assert dataset.kind == "folder" and dataset.classes == ("extras", "train", "validation")
    named = scan(src, PackOptions(split_names=("extras", "train", "validation")))
    assert named.kind == "split-tree" and set(named.splits) == {"extras", "train", "validation"}
    # a folder --splits cannot name (a split name holds no '-'): that way is not offered
    (src / "extras").rename(src / "extra-stuff")
    with pytest.raises(SourceError) as caught:
        scan(src)
    assert (
        "and others ('extra-stuff'): move the others out of SRC (a split tree holds split "
        "folders only), or pass source='folder'" in str(caught.value)
    )


def test_the_macos_zip_folder_beside_the_splits_is_no_split_nor_class(tmp_path: Path):
    """A zip made on a Mac, unpacked, holds __MACOSX/ (resource forks, `._<name>`) beside the
    split folders: the tree is still a split tree, and __MACOSX/train/ no class of it."""
    src = _split_tree(tmp_path / "src")
    (src / "__MACOSX" / "train" / "cat").mkdir(parents=True)
    (src / "__MACOSX" / "train" / "cat" / "._a.jpg").write_bytes(b"\0\5\22\7")
    dataset = scan(src)
    assert dataset.kind == "split-tree" and set(dataset.splits) == {"train", "validation"}
    assert "__MACOSX" not in dataset.classes and dataset.warnings == scan(_split_tree(
        tmp_path / "plain")).warnings  # fmt: skip


def test_a_class_named_like_a_split_among_more_classes_is_a_class(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 1, "dog": 1, "test": 1})
    assert scan(src).classes == ("cat", "dog", "test")


def test_split_folders_but_for_case_or_a_splits_typo_are_refused(tmp_path: Path):
    src = tmp_path / "src"
    make_tree(src / "Train", {"a": 2})
    make_tree(src / "Val", {"a": 1})
    with pytest.raises(SourceError, match=r"its folders 'Train', 'Val' are split names but for"):
        scan(src)
    assert scan(src, PackOptions(split_names=("Train", "Val"))).kind == "split-tree"
    with pytest.raises(SourceError, match=r"split_names= names none of its folders \(its folder"):
        scan(src, PackOptions(split_names=("trian", "val")))
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.jpg").write_bytes(b"")
    with pytest.raises(SourceError, match=r"\(it holds no folder\)"):
        scan(flat, PackOptions(split_names=("train",)))
    with pytest.raises(SourceError, match="split_names= names split folders, and source='folder"):
        scan(src, PackOptions(split_names=("Train",), source="folder"))


def test_class_folders_alike_but_for_case_in_splits_of_their_own_are_named(tmp_path: Path):
    """train/Cat and val/cat were packed as classes Cat and cat without a word: every val cat
    under a label no train image has. Alike but for case in one split, they are two classes
    (EMNIST's A and a): nothing is said."""
    src = tmp_path / "src"
    make_tree(src / "train", {"Cat": 8, "dog": 8, "A": 2, "a": 2})
    make_tree(src / "val", {"cat": 4, "dog": 4, "A": 1, "a": 1}, seed=10)
    dataset = scan(src)
    assert dataset.classes == ("A", "Cat", "a", "cat", "dog")
    assert dataset.warnings == (
        "classes 'Cat' and 'cat' differ only in case, and no split holds two of them (train: "
        "'Cat'; val: 'cat'): packed as 2 classes, each split's images under a label the other "
        "splits never have; if they are one class, give them one name",
    )
    assert scan(src / "train").warnings == ()  # one split


def test_class_folders_apart_by_spaces_across_splits_are_one_class_named(tmp_path: Path):
    src = tmp_path / "src"
    make_tree(src / "train", {"cat ": 2, "dog": 2})
    make_tree(src / "val", {"cat": 1, "dog": 1}, seed=10)
    dataset = scan(src)
    assert dataset.classes == ("cat", "dog")
    assert [i.label for i in dataset.splits["val"]].count(0) == 1
    assert dataset.warnings == (
        f"{src}: folders 'cat' and 'cat ' are one class 'cat' (a class name is taken without "
        "the spaces around it); rename one if they are two classes",
    )


def test_splits_alike_but_for_case_are_refused_before_their_shards_are_one_file(tmp_path: Path):
    """A split column's Train beside train (or --splits naming both folders) packed two
    splits whose shard files, name-Train.tfrecord-... and name-train.tfrecord-..., are one
    file on a disk that ignores case: one split's records read back under both names."""
    src = tmp_path / "src"
    make_tree(src / "train", {"a": 2, "b": 1})
    make_tree(src / "Train", {"a": 1}, seed=10)
    said = "splits 'Train' and 'train' differ only in case"
    with pytest.raises(SourceError, match=said):
        scan(src, PackOptions(split_names=("train", "Train")))
    rows = "".join(f"{split}/a/img_000.jpg,a,{split}\n" for split in ("train", "Train"))
    (src / "labels.csv").write_text("path,label,split\n" + rows)
    with pytest.raises(SourceError, match=said):
        scan(src / "labels.csv")
    (src / "labels.csv").write_text("path,label,split\n" + rows.replace(",Train", ",test"))
    assert sorted(scan(src / "labels.csv").splits) == ["test", "train"]


def test_split_names_datasets_refuses_are_refused_at_the_scan(tmp_path: Path):
    """datasets.load_dataset(OUT) refused a Parquet pack with a split `all` (its keyword for
    every split together, in any case; TFDS reads split='all' as every split), and one whose
    card names a split `v1.` or `a..b`."""
    src = make_tree(tmp_path / "src", {"a": 2})
    (src / "labels.csv").write_text("path,label,split\na/img_000.jpg,a,All\n")
    said = "split 'All' is the name datasets and TFDS give every split together"
    with pytest.raises(SourceError, match=f"^{src / 'labels.csv'}: {said}"):
        scan(src / "labels.csv")
    with pytest.raises(OptionError, match="split 'all' is the name"):
        PackOptions(split=(("train", 0.5), ("all", 0.5)))
    # nor does datasets read a split name ending in '.' or with '..' (its '\w+(\.\w+)*')
    for name in ("v1.", "a..b"):
        with pytest.raises(OptionError, match=re.escape(f"nor twice in a row), got: '{name}'")):
            PackOptions(split=(("train", 0.5), (name, 0.5)))
    assert PackOptions(split=(("train", 0.5), ("v1.0_b", 0.5))).split[1][0] == "v1.0_b"


def test_a_split_name_too_long_for_its_shard_files_is_refused_at_the_scan(tmp_path: Path):
    """A split column's 300-character name failed at write time, on its first shard's file
    ('File name too long'), after the scan and plan: refused now, naming it and the limit."""
    src = make_tree(tmp_path / "src", {"a": 2})
    long = "s" * 300
    (src / "labels.csv").write_text(f"path,label,split\na/img_000.jpg,a,{long}\n")
    said = f"split 'ssssssssssssssssssssssss'... is 300 characters, over the {MAX_SPLIT_CHARS} "
    with pytest.raises(SourceError, match=f"^{src / 'labels.csv'}: {said}"):
        scan(src / "labels.csv")
    with pytest.raises(OptionError, match=said):
        PackOptions(split=((long, 1.0),))
    longest = "s" * MAX_SPLIT_CHARS
    assert list(scan(src, PackOptions(split=((longest, 1.0),))).splits) == [longest]


def test_splits_option_names_other_split_folders(tmp_path: Path):
    src = tmp_path / "src"
    make_tree(src / "fold1", {"a": 2})
    make_tree(src / "fold2", {"b": 1})
    assert scan(src).kind == "folder"
    dataset = scan(src, PackOptions(split_names=("fold1", "fold2")))
    assert dataset.kind == "split-tree" and dataset.classes == ("a", "b")
    assert {s: len(items) for s, items in dataset.splits.items()} == {"fold1": 2, "fold2": 1}


def test_cli_pack_of_a_split_tree(tmp_path: Path):
    from typer.testing import CliRunner

    from shardpack.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "pack",
            str(_split_tree(tmp_path / "src")),
            str(out),
            "--workers",
            "1",
            "--no-progress",
            "--classes",
            "eel,cat,dog",
        ],
    )
    assert result.exit_code == 0, result.output
    assert _index(out)["classes"] == ["eel", "cat", "dog"]
    assert _index(out)["splits"]["validation"]["class_counts"] == [1, 2, 0]


# ---- --classes ------------------------------------------------------------------------------


@pytest.mark.heavy
def test_classes_pin_the_order_and_labels(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 3})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, classes=("dog", "cat", "yak")))
    index = _index(out)
    assert index["classes"] == ["dog", "cat", "yak"]
    assert index["splits"]["train"]["class_counts"] == [3, 2, 0]
    for record in tf_records(out):
        assert index["classes"][record["label"]] == record["key"].decode().split("/")[0]


def test_an_image_of_a_class_not_in_the_list_is_skipped_or_fails(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 1})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, classes=("cat",)))
    index = _index(out)
    assert index["splits"]["train"]["num_records"] == 2
    assert index["skipped"] == [{"key": "dog/img_000.jpg",
                                 "reason": "class 'dog' is not in --classes"}]  # fmt: skip
    with pytest.raises(SourceError, match=r"dog/img_000\.jpg: class 'dog' is not in --classes"):
        pack(src, tmp_path / "out2", PackOptions(workers=1, classes=("cat",), on_error="fail"))
    assert not (tmp_path / "out2" / "index.json").exists()


def test_parse_classes_from_a_list_or_a_file(tmp_path: Path):
    assert parse_classes("b, a ,c") == ("b", "a", "c")
    listing = tmp_path / "classes.txt"
    listing.write_text("zebra\napple\n\nmango\n")
    assert parse_classes(str(listing)) == ("zebra", "apple", "mango")
    with pytest.raises(ShardpackError, match="listed twice"):
        parse_classes("a,b,a")
    with pytest.raises(ShardpackError, match="names no class"):
        parse_classes(" , ")
    with pytest.raises(ShardpackError, match=r"clases\.txt: no such file; pass the class list"):
        parse_classes(str(tmp_path / "clases.txt"))  # a typo, not a class named so


def test_a_classes_file_saved_by_notepad_names_its_first_class_as_written(tmp_path: Path):
    """A class list saved as "UTF-8 with BOM" and CRLF (Windows Notepad, Excel): the byte-order
    mark was taken into the first name ('\ufeffcat'), whose images were all skipped as 'not in
    --classes' in a run that exited 0."""
    from tests.helpers import run_cli

    listing = tmp_path / "classes.txt"
    listing.write_bytes(b"\xef\xbb\xbfcat\r\ndog\r\n")
    assert parse_classes(str(listing)) == ("cat", "dog")
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 1})
    done = run_cli("pack", str(src), str(tmp_path / "out"), "--classes", str(listing),
                   "--no-progress")  # fmt: skip
    assert done.returncode == 0 and "2 classes: cat, dog" in done.stdout, done.stdout
    assert _index(tmp_path / "out")["skipped"] == []


@pytest.mark.parametrize("layout", ["folder", "split tree"])
def test_a_class_pinned_a_typo_away_from_a_folder_left_out_is_warned_of(tmp_path: Path, layout):
    """--classes cat,dogs beside a folder dog: the dog images were skipped, 'dogs' kept no
    record, and nothing said the two were one class misspelt."""
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 1, "eel": 1})
    if layout == "split tree":
        src = _split_tree(tmp_path / "tree")
    assert scan(src, PackOptions(classes=("cat", "dogs", "yak"))).warnings == (
        "--classes names class 'dogs', which no class folder is, and leaves out folder 'dog' "
        "(its images skipped): if they are one class, name it 'dog'",
    )
    assert scan(src, PackOptions(classes=("cat", "dog", "yak"))).warnings == ()  # yak: no typo


@pytest.mark.parametrize("layout", ["folder", "split tree"])
def test_classes_that_leave_out_every_image_say_which_classes_there_are(tmp_path: Path, layout):
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 1, "eel": 1})
    if layout == "split tree":
        src = _split_tree(tmp_path / "tree")  # 9 images of cat, dog and eel
    images = 4 if layout == "folder" else 9
    words = f"none of its {images} images is in a class of classes=; its class folders are "
    with pytest.raises(SourceError, match=words + "'cat', 'dog', 'eel': name those"):
        pack(src, tmp_path / "out", PackOptions(workers=1, classes=("cats",)))


def test_split_of_cifar_names_its_batches_not_split_folders(tmp_path: Path):
    """--split of CIFAR was refused as a source that 'already has splits test, train (split
    folders, or a manifest's split column)': CIFAR has neither; its batches make the splits."""
    from tests.helpers import make_cifar10_python

    src = make_cifar10_python(tmp_path / "c", per_batch=2, batches=1)
    done = run_cli("pack", str(src), str(tmp_path / "out"), "--split", "train=0.9,val=0.1")
    one_line_error(
        done,
        f"{src}: already has splits test, train (its train and test batches); "
        "--split cuts a one-split source: drop --split to pack them as they are",
    )
    assert not (tmp_path / "out").exists()


def test_classes_are_refused_for_cifar(tmp_path: Path):
    from tests.helpers import make_cifar10_python

    src = make_cifar10_python(tmp_path / "c", per_batch=2, batches=1)
    with pytest.raises(SourceError, match="drop classes="):
        scan(src, PackOptions(classes=("a",)))


# ---- --split --------------------------------------------------------------------------------


def test_stratified_split_is_disjoint_covering_proportional_and_seeded():
    labels = [i % 3 for i in range(300)] + [3] * 7  # three big classes and a small one
    parts = stratified_split(labels, [0.7, 0.2, 0.1], seed=5)
    flat = [i for part in parts for i in part]
    assert sorted(flat) == list(range(len(labels)))  # disjoint and covering
    assert [len(p) for p in parts] == [215, 61, 31]  # within one of 0.7/0.2/0.1 of 307
    for label in range(3):  # each class spread in proportion, to within one
        counts = [sum(labels[i] == label for i in part) for part in parts]
        assert counts == [70, 20, 10]
    assert stratified_split(labels, [0.7, 0.2, 0.1], seed=5) == parts
    assert stratified_split(labels, [0.7, 0.2, 0.1], seed=6) != parts


def test_stratified_split_keeps_totals_right_with_many_tiny_classes():
    parts = stratified_split(list(range(20)), [0.9, 0.1], seed=0)  # one item per class
    assert [len(p) for p in parts] == [18, 2]


@pytest.mark.heavy
def test_split_option_packs_stratified_splits(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 10, "dog": 20})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, split=(("train", 0.8), ("validation", 0.2)), seed=3))
    index = _index(out)
    assert index["splits"]["train"]["class_counts"] == [8, 16]
    assert index["splits"]["validation"]["class_counts"] == [2, 4]
    train = {r["key"].decode() for r in tf_records(out, "train")}
    validation = {r["key"].decode() for r in tf_records(out, "validation")}
    assert not train & validation and len(train | validation) == 30
    again = tmp_path / "again"
    pack(src, again, PackOptions(workers=1, split=(("train", 0.8), ("validation", 0.2)), seed=3))
    assert Counter(r["key"] for r in iter_examples(again, "validation")) == Counter(validation)


def test_split_of_a_source_with_splits_or_too_few_items_is_refused(tmp_path: Path):
    with pytest.raises(SourceError, match=r"already has splits [^(]+ \(its split folders\); "):
        scan(_split_tree(tmp_path / "tree"), PackOptions(split=(("a", 0.5), ("b", 0.5))))
    table = make_tree(tmp_path / "m", {"cat": 2}) / "t.csv"  # named by its file, not folder
    table.write_text("file_name,label,split\ncat/img_000.jpg,cat,train\ncat/img_001.jpg,cat,val\n")
    with pytest.raises(
        SourceError,
        match=re.escape(
            f"{table}: already has splits train, val (its split column, or split folders)"
        ),
    ):
        scan(table, PackOptions(split=(("a", 0.5), ("b", 0.5))))
    src = make_tree(tmp_path / "small", {"cat": 2})
    with pytest.raises(SourceError, match="gives b no item"):
        scan(src, PackOptions(split=(("a", 0.9), ("b", 0.1))))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("train=0.9,val=0.2", "add up to 1, got 1.1; lower one of them"),
        ("train=0.9", "add up to 1, got 0.9; add a split of the rest, such as test=0.1"),
        ("train=0.7,test=0.2", "got 0.9; add a split of the rest, such as validation=0.1"),
        ("train", "must look like"),
        ("train=x", "must look like"),
        ("train=0.5,train=0.5", "each split once"),
        ("train=1.5,val=-0.5", "above 0 and at most 1"),
        ("tr-ain=1", "split names"),
    ],
)
def test_bad_split_option_is_one_clear_error(text, match):
    with pytest.raises(ShardpackError, match=match):
        PackOptions(split=parse_split(text))


def test_split_folder_names_shard_names_cannot_hold_are_refused_by_the_split_tree(tmp_path):
    """--splits' names are the split tree's to check (Source.check_options): a '-' would
    split a shard's file name in the wrong place."""
    src = make_tree(tmp_path / "src" / "tr-ain", {"cat": 1}).parent
    with pytest.raises(OptionError) as caught:
        scan(src, PackOptions(split_names=("tr-ain",)))
    assert caught.value.options == ("split_names",)
    assert str(caught.value).endswith("got: 'tr-ain' in split_names=")
    assert as_flags(caught.value).endswith("got: 'tr-ain' in --splits")


def test_an_option_the_source_takes_no_notice_of_is_refused(tmp_path: Path):
    """--splits on a manifest, --path-column or --root on folders: ignored, once, in silence."""
    src = make_tree(tmp_path / "src", {"a": 2})
    table = tmp_path / "list.csv"
    table.write_text("file_name,label\nsrc/a/img_000.jpg,a\n")
    refused = [
        (table, {"split_names": ("train",)}, f"{table}: --splits is for class folders, and SRC "
                                             "is a manifest table; drop --splits"),
        (src, {"path_column": "file"}, f"{src}: --path-column is for a manifest table, and "
                                       "SRC is class folders; drop --path-column"),
        (src, {"root": str(tmp_path)}, "--root is for a manifest"),
    ]  # fmt: skip
    for given, options, said in refused:  # the names as data: the CLI says its flags
        with pytest.raises(SourceError) as caught:
            scan(given, PackOptions(**options))
        assert said in as_flags(caught.value)
        assert caught.value.options == (*options, *options)
