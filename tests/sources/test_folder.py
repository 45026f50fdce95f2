"""sources/: class-folder scans and CIFAR-10/100 batches (python and binary), on real files."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardpack.errors import ShardpackError, SourceError, UnsafePickleError
from shardpack.options import PackOptions
from shardpack.sources import Item, scan
from shardpack.sources.cifar import CIFAR_PIXELS, load_cifar_pickle, read_cifar_pixels
from shardpack.sources.folder import MAX_NAMED_IGNORED
from shardpack.storage.local import LocalStorage
from tests import helpers


def _touch_image(path: Path, seed: int = 0) -> Path:
    return helpers.write_image(path, helpers.image(seed, 8, 8))


def _keys(dataset) -> list[str]:
    return [item.key for item in dataset.splits["train"]]


# ---- class folders -------------------------------------------------------------------------


def test_folder_classes_sorted_and_labels_by_position(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"zebra": 1, "ant": 2, "Moth": 1, "bee": 1})
    dataset = scan(src)
    assert dataset.kind == "folder"
    assert dataset.root.path() == str(src)
    assert dataset.classes == ("Moth", "ant", "bee", "zebra")  # code-point order
    assert list(dataset.splits) == ["train"]
    items = dataset.splits["train"]
    assert [(i.key, i.label) for i in items] == [
        ("Moth/img_000.jpg", 0),
        ("ant/img_000.jpg", 1),
        ("ant/img_001.jpg", 1),
        ("bee/img_000.jpg", 2),
        ("zebra/img_000.jpg", 3),
    ]
    assert dataset.num_items == 5
    assert dataset.ignored == 0
    for item in items:
        assert item.path == item.key
        assert item.size == (src / item.path).stat().st_size
        assert item.position is None and item.fields == {}


def test_folder_extensions_are_case_insensitive(tmp_path):
    src = tmp_path / "src"
    for name in ("a.JPG", "b.Jpeg", "c.PNG", "d.webp", "e.BMP", "f.Tif", "g.tiff", "h.gif"):
        (src / "cls").mkdir(parents=True, exist_ok=True)
        (src / "cls" / name).write_bytes(b"bytes")
    dataset = scan(src)
    assert len(_keys(dataset)) == 8
    assert dataset.ignored == 0


def test_folder_skips_hidden_and_counts_non_images(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cats": 2, "dogs": 1})
    _touch_image(src / ".hidden_class" / "x.jpg")  # hidden class folder: not a class
    _touch_image(src / "cats" / ".thumbs" / "y.jpg")  # hidden subfolder
    _touch_image(src / "cats" / "._img_000.jpg")  # macOS resource fork, hidden
    (src / "cats" / ".DS_Store").write_bytes(b"x")
    (src / ".DS_Store").write_bytes(b"x")
    (src / "cats" / "notes.txt").write_text("not an image")
    (src / "dogs" / "img.jpg.bak").write_bytes(b"x")
    (src / "dogs" / "noext").write_bytes(b"x")
    dataset = scan(src)
    assert dataset.classes == ("cats", "dogs")
    assert _keys(dataset) == ["cats/img_000.jpg", "cats/img_001.jpg", "dogs/img_000.jpg"]
    assert dataset.ignored == 3  # notes.txt, img.jpg.bak, noext; hidden files are not counted
    assert dataset.ignored_files == ("cats/notes.txt", "dogs/img.jpg.bak", "dogs/noext")


def test_ignored_files_are_counted_exactly_and_the_first_ones_named(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cats": 1})
    for i in range(MAX_NAMED_IGNORED + 5):
        (src / "cats" / f"note_{i:05d}.txt").write_bytes(b"")
    dataset = scan(src)
    assert dataset.ignored == MAX_NAMED_IGNORED + 5
    assert dataset.ignored_files == tuple(
        f"cats/note_{i:05d}.txt" for i in range(MAX_NAMED_IGNORED)
    )


def test_files_directly_in_src_are_ignored_and_images_there_skipped_with_why(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cats": 1})
    _touch_image(src / "loose.jpg")
    (src / "README.md").write_text("hi")
    dataset = scan(src)
    assert _keys(dataset) == ["cats/img_000.jpg"]
    assert dataset.classes == ("cats",)
    assert dataset.ignored == 1  # an image is not counted as a file that is not one
    assert dataset.ignored_files == ("README.md",)
    [(key, why)] = dataset.skipped
    assert key == "loose.jpg" and why.startswith("in no class folder") and "move it" in why


def test_unicode_and_spaces_in_names(tmp_path):
    src = tmp_path / "src"
    _touch_image(src / "chats é" / " photo 1.jpg")
    _touch_image(src / "猫" / "图 片.png")
    _touch_image(src / "a b" / "c d" / "e f.jpeg")
    dataset = scan(src)
    assert dataset.classes == ("a b", "chats é", "猫")
    assert [(i.key, i.label) for i in dataset.splits["train"]] == [
        ("a b/c d/e f.jpeg", 0),
        ("chats é/ photo 1.jpg", 1),
        ("猫/图 片.png", 2),
    ]
    for item in dataset.splits["train"]:
        assert (src / item.path).is_file()


def test_nested_subfolders_belong_to_their_top_class(tmp_path):
    src = tmp_path / "src"
    _touch_image(src / "cats" / "2020" / "jan" / "a.jpg")
    _touch_image(src / "cats" / "2021" / "b.jpg")
    _touch_image(src / "cats" / "c.jpg")
    _touch_image(src / "dogs" / "deep" / "er" / "still" / "d.png")
    dataset = scan(src)
    assert dataset.classes == ("cats", "dogs")
    assert [(i.key, i.label) for i in dataset.splits["train"]] == [
        ("cats/2020/jan/a.jpg", 0),
        ("cats/2021/b.jpg", 0),
        ("cats/c.jpg", 0),
        ("dogs/deep/er/still/d.png", 1),
    ]


def test_class_folders_apart_by_spaces_are_one_class_named_in_a_warning(tmp_path):
    # 'cat ' beside 'cat' were one class without a word (a class name is taken stripped)
    src = helpers.make_tree(tmp_path / "src", {"cat ": 1, "cat": 1, "dog": 1})
    dataset = scan(src)
    assert dataset.classes == ("cat", "dog")
    assert sorted(i.label for i in dataset.splits["train"]) == [0, 0, 1]
    assert dataset.warnings == (
        f"{src}: folders 'cat' and 'cat ' are one class 'cat' (a class name is taken without "
        "the spaces around it); rename one if they are two classes",
    )
    assert scan(src, PackOptions(classes=("cat", "dog"))).warnings == ()  # the user's list


def test_empty_class_folder_is_still_a_class_and_named_in_a_warning(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"b": 1})
    (src / "a").mkdir()
    (src / "a" / "notes.txt").write_text("no images here")
    dataset = scan(src)
    assert dataset.classes == ("a", "b")
    assert [i.label for i in dataset.splits["train"]] == [1]
    assert dataset.warnings == (
        f"class 'a' ({src / 'a'}) holds no images: it keeps label 0 with no records",
    )
    assert scan(helpers.make_tree(tmp_path / "full", {"a": 1})).warnings == ()


def test_the_macos_zip_folder_is_no_class(tmp_path):
    """A zip made on a Mac, unpacked, holds __MACOSX/ (each file's resource fork, `._<name>`)
    beside the class folders: taken for a class it took label 0 (every label one up) with a
    warning that it held no images. It is passed over as hidden folders are, at every level."""
    src = helpers.make_tree(tmp_path / "src", {"cat": 2, "dog": 1})
    for folder in (src / "__MACOSX" / "cat", src / "dog" / "__MACOSX"):
        folder.mkdir(parents=True)
        (folder / "._img_000.jpg").write_bytes(b"\0\5\22\7 AppleDouble")
    dataset = scan(src)
    assert dataset.classes == ("cat", "dog") and dataset.warnings == ()
    assert [i.key for i in dataset.splits["train"]] == [
        "cat/img_000.jpg", "cat/img_001.jpg", "dog/img_000.jpg"]  # fmt: skip
    assert dataset.ignored == 0


def test_special_files_named_like_images_are_skipped_with_their_reason(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 1})
    os.mkfifo(src / "a" / "pipe.jpg")
    (src / "a" / "zero.png").symlink_to("/dev/zero")
    os.mkfifo(src / "a" / "pipe.txt")  # not an image name: ignored, like any other
    dataset = scan(src)
    assert _keys(dataset) == ["a/img_000.jpg"]
    assert dataset.skipped == (
        ("a/pipe.jpg", "not a regular file (a FIFO)"),
        ("a/zero.png", "not a regular file (a character device)"),
    )
    assert dataset.ignored_files == ("a/pipe.txt",)


def _without_permission(script: str) -> subprocess.CompletedProcess:
    """Run python code as root without its file-permission override (helpers), where a file
    or folder with no permission bits is refused as to any user."""
    if os.geteuid() != 0:
        pytest.skip("needs root, whose file-permission override the run drops")
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        preexec_fn=helpers.drop_permission_override,
        timeout=60,
    )


def test_unreadable_folders_and_files_are_skipped_with_a_reason(tmp_path):
    base = tmp_path
    try:
        src = helpers.make_tree(base / "src", {"a": 1, "b": 1, "c": 1})
        _touch_image(src / "a" / "locked" / "x.jpg")
        (src / "a" / "locked").chmod(0o000)
        (src / "b").chmod(0o000)  # a whole class unreadable: skipped, and warned about
        (src / "c" / "img_000.jpg").chmod(0o000)  # listed; the worker's read says why
        probe = (
            "from shardpack.sources import scan; d = scan(%r); "
            "print(repr((d.skipped, [i.key for i in d.splits['train']], d.warnings)))"
        )
        run = _without_permission(probe % str(src))
        assert run.returncode == 0, run.stderr
        skipped, keys, warnings = eval(run.stdout)  # our own repr, just printed
        assert skipped == (
            ("a/locked/", "cannot list (permission denied)"),
            ("b/", "cannot list (permission denied)"),
        )
        assert keys == ["a/img_000.jpg", "c/img_000.jpg"]
        assert warnings == ()  # b is skipped with why, not said to hold no images
        (base / "out").mkdir()
        run = _without_permission(
            "from shardpack import PackOptions, pack; from shardpack.errors import ImageError\n"
            f"try: pack({str(src)!r}, {str(base / 'out')!r}, PackOptions(on_error='fail'))\n"
            "except ImageError as e: print(e)"
        )
        assert run.stdout.startswith("a/locked/: cannot list (permission denied); fix it"), run
    finally:
        for root, dirs, _ in os.walk(base):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)


@pytest.mark.parametrize("name", ["b\nc", "tab\there", "cr\r", "sep\u2028x", "bell\x07"])
def test_a_class_name_that_is_not_one_printable_line_is_refused(tmp_path, name):
    src = helpers.make_tree(tmp_path / "src", {"a": 1, name: 1})
    with pytest.raises(SourceError, match="rename it") as caught:
        scan(src)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message and "\u2028" not in message
    assert str(src) in message


def test_cifar_class_names_that_are_not_one_line_are_refused(tmp_path):
    src = helpers.make_cifar10_binary(tmp_path / "bin", per_batch=4, batches=1)
    names = list(helpers.CIFAR10_CLASSES)
    names[3] = "cat\x0bdog"  # a vertical tab: one line to TFDS, two to str.splitlines
    (src / "batches.meta.txt").write_text("\n".join(names) + "\n")
    with pytest.raises(SourceError, match="cat\\\\x0bdog") as caught:
        scan(src)
    assert str(src / "batches.meta.txt") in str(caught.value)


def test_cifar_class_names_naming_a_class_twice_are_refused(tmp_path):
    """Packed as classes airplane, ..., airplane: two labels under one name (datasets'
    ClassLabel refuses them), in the binary meta file and in the python one."""
    src = helpers.make_cifar10_binary(tmp_path / "bin", per_batch=4, batches=1)
    names = list(helpers.CIFAR10_CLASSES)
    names[9] = names[0]
    (src / "batches.meta.txt").write_text("\n".join(names) + "\n")
    with pytest.raises(SourceError, match=f"two classes are named '{names[0]}'") as caught:
        scan(src)
    assert str(src / "batches.meta.txt") in str(caught.value)
    src = helpers.make_cifar10_python(tmp_path / "py", per_batch=4, batches=1)
    meta = {b"label_names": [name.encode() for name in names], b"num_vis": 3072}
    (src / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    with pytest.raises(SourceError, match=f"batches.meta: two classes are named '{names[0]}'"):
        scan(src)


def test_symlink_loop_terminates_and_lists_each_image_once(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cats": 2, "dogs": 1})
    (src / "cats" / "sub").symlink_to(src / "cats", target_is_directory=True)
    (src / "dogs" / "up").symlink_to("..", target_is_directory=True)  # back to SRC itself
    dataset = scan(src)
    assert _keys(dataset) == ["cats/img_000.jpg", "cats/img_001.jpg", "dogs/img_000.jpg"]


class _CountedListing:
    """os.scandir's iterator, counting the stats its entries are asked for."""

    def __init__(self, listing, stats: list[str]) -> None:
        self._listing, self._stats = listing, stats

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._listing.close()

    def __iter__(self):
        for entry in self._listing:
            yield _CountedEntry(entry, self._stats)


class _CountedEntry:
    def __init__(self, entry: os.DirEntry, stats: list[str]) -> None:
        self._entry, self._stats = entry, stats

    def __getattr__(self, name: str):
        return getattr(self._entry, name)

    def stat(self, **kwargs):
        self._stats.append(self._entry.path)
        return self._entry.stat(**kwargs)


def test_a_class_folder_scan_lists_each_folder_twice_at_most_and_stats_no_image_twice(
    tmp_path, monkeypatch
):
    """Telling SRC apart from a Hugging Face dataset laid out in config folders lists each class
    folder once by names (no stat a file) before the scan lists it: that check listed each
    twice with a stat of every image, 0.1 s of a 6,000-photo pack's 0.3 s start."""
    src = helpers.make_tree(tmp_path / "src", {"cats": 5, "dogs": 4, "owls": 3})
    listed, stats, real = [], [], os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": (
        listed.append(os.fspath(path)), _CountedListing(real(path), stats))[1])  # fmt: skip
    dataset = scan(src)
    assert len(dataset.splits["train"]) == 12
    for cls in ("cats", "dogs", "owls"):
        assert listed.count(str(src / cls)) <= 2, listed
    assert [path for path in stats if path.endswith(".jpg")] == []


def test_a_pack_lists_each_of_src_s_folders_once(tmp_path, monkeypatch):
    """The sources telling SRC apart and the scan's walk share one listing of each folder of
    SRC (Storage.listing_once): a pack listed SRC 11 times, each class folder twice (the Hub
    layout's look for a Parquet file or a folder in it, then the walk) and one holding a
    folder four times: 6-7 ms of a 6,000-photo pack's start."""
    from shardpack.packing.packer import pack

    src = helpers.make_tree(tmp_path / "src", {"cats": 2, "dogs": 2})
    helpers.make_tree(src / "cats", {"kittens": 2})
    listed, real = [], os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": (
        listed.append(os.fspath(path)), real(path))[1])  # fmt: skip
    assert pack(src, tmp_path / "out", PackOptions(shards=1, workers=1)).num_records == 6
    monkeypatch.undo()
    folders = [str(src / name) for name in ("", "cats", "cats/kittens", "dogs")]
    assert sorted(p for p in listed if p.startswith(str(src))) == sorted(folders)


def test_recognising_class_folders_sorts_no_listing_of_one(tmp_path, monkeypatch):
    """Telling class folders apart from a Hub dataset's config folders asks each for its
    entries' names in the disk's order (any Parquet file or folder decides): no sorted
    listing of Entries, half the cost of a 750-photo folder. The scan's walk lists it after."""
    src = helpers.make_tree(tmp_path / "src", {"cats": 5, "dogs": 4})
    listed, real = [], LocalStorage.listdir
    monkeypatch.setattr(LocalStorage, "listdir", lambda self, name="": (
        listed.append(self.path(name)), real(self, name))[1])  # fmt: skip
    assert len(scan(src).splits["train"]) == 9
    assert [path for path in listed if path.endswith(("cats", "dogs"))] == []


@pytest.mark.parametrize("target", ["..", "../dogs"], ids=["link-to-src", "link-to-sibling"])
def test_symlink_into_another_class_does_not_steal_its_images(tmp_path, target):
    # Regression: the walk of "cats" followed the link before "dogs" was walked, so the dog
    # image was listed under cats/link/... with label cats and the dogs class came out empty.
    src = helpers.make_tree(tmp_path / "src", {"cats": 1, "dogs": 1})
    (src / "cats" / "link").symlink_to(target, target_is_directory=True)
    dataset = scan(src)
    assert [(i.key, i.label) for i in dataset.splits["train"]] == [
        ("cats/img_000.jpg", 0),
        ("dogs/img_000.jpg", 1),
    ]


def test_symlink_to_a_folder_outside_is_followed_once(tmp_path):
    outside = tmp_path / "outside"
    _touch_image(outside / "x.jpg")
    _touch_image(outside / "inner" / "y.png")
    (outside / "inner" / "loop").symlink_to(outside, target_is_directory=True)
    src = helpers.make_tree(tmp_path / "src", {"cats": 1})
    (src / "cats" / "ext").symlink_to(outside, target_is_directory=True)
    (src / "birds").symlink_to(tmp_path / "birds_elsewhere", target_is_directory=True)
    _touch_image(tmp_path / "birds_elsewhere" / "b.jpg")
    dataset = scan(src)
    assert dataset.classes == ("birds", "cats")
    assert [(i.key, i.label) for i in dataset.splits["train"]] == [
        ("birds/b.jpg", 0),
        ("cats/ext/inner/y.png", 1),
        ("cats/ext/x.jpg", 1),
        ("cats/img_000.jpg", 1),
    ]
    sizes = {i.key: i.size for i in dataset.splits["train"]}
    assert sizes["cats/ext/x.jpg"] == (outside / "x.jpg").stat().st_size


def test_dangling_image_link_is_listed_with_size_zero(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cats": 1})
    (src / "cats" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    dataset = scan(src)
    assert {i.key: i.size for i in dataset.splits["train"]}["cats/gone.jpg"] == 0


def test_a_large_tree_stats_a_sample_and_gives_the_rest_its_mean(tmp_path, monkeypatch):
    from shardpack.sources import folder

    monkeypatch.setattr(folder, "SIZED_FILES", 3)  # as a tree of millions, in 12 files
    monkeypatch.setattr(folder, "SIZE_STRIDE", 4)
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for i in range(11):
        (src / "a" / f"{i:02d}.jpg").write_bytes(b"x" * (100 + i))
    (src / "a" / "99.jpg").symlink_to(tmp_path / "nowhere.jpg")  # dangling: its own size
    sizes = [item.size for item in scan(src).splits["train"]]
    # files 0-2 sized, then every 4th (3, 7, 11); the others get the mean of those
    sampled = {0: 100, 1: 101, 2: 102, 3: 103, 7: 107, 11: 0}
    mean = round(sum(sampled.values()) / len(sampled))
    assert sizes == [sampled.get(i, mean) for i in range(12)]
    assert scan(src) == scan(src)


def test_scan_accepts_a_path_relative_to_the_working_folder(tmp_path, monkeypatch):
    helpers.make_tree(tmp_path / "src", {"cats": 1})
    monkeypatch.chdir(tmp_path)
    dataset = scan("src")
    assert dataset.root.path() == str(tmp_path / "src")
    assert _keys(dataset) == ["cats/img_000.jpg"]


def test_two_scans_are_equal(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"b": 3, "a": 4, "c": 2})
    assert scan(src) == scan(src)


@pytest.mark.parametrize("layout", ["empty", "empty_classes", "only_non_images", "only_hidden"])
def test_src_without_images_is_source_error(tmp_path, layout):
    src = tmp_path / "src"
    src.mkdir()
    if layout == "empty_classes":
        (src / "cats").mkdir()
        (src / "dogs").mkdir()
    elif layout == "only_non_images":
        (src / "cats").mkdir()
        (src / "cats" / "a.txt").write_text("x")
    elif layout == "only_hidden":
        _touch_image(src / ".cache" / "a.jpg")
    with pytest.raises(SourceError, match="no images found") as caught:
        scan(src)
    assert str(src) in str(caught.value)


def test_missing_src_is_source_error_naming_it(tmp_path):
    src = tmp_path / "does not exist"
    with pytest.raises(SourceError, match="no such folder") as caught:
        scan(src)
    assert str(src) in str(caught.value)


def test_src_that_is_a_file_is_source_error(tmp_path):
    src = _touch_image(tmp_path / "one.jpg")
    with pytest.raises(SourceError, match="is a file") as caught:
        scan(src)
    assert str(src) in str(caught.value)


def test_an_image_as_src_points_at_the_folder_above_its_class(tmp_path):
    image = _touch_image(tmp_path / "data" / "cats" / "one.jpg")
    with pytest.raises(SourceError) as caught:
        scan(image)
    message = str(caught.value)
    assert f"pass the folder above its class folder, {tmp_path / 'data'}" in message
    assert "with cats as the class" in message
    assert scan(tmp_path / "data").classes == ("cats",)  # the advice works


def test_a_cifar_file_as_src_points_at_its_folder(tmp_path):
    src = helpers.make_cifar10_python(tmp_path / "cifar-10-batches-py", per_batch=2, batches=1)
    with pytest.raises(SourceError, match=f"CIFAR file: pass the folder that holds it, {src}$"):
        scan(src / "data_batch_1")


def test_an_archive_as_src_says_to_extract_it(tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(b"\x1f\x8b")
    with pytest.raises(SourceError, match="it is an archive: extract it"):
        scan(archive)
    with pytest.raises(SourceError, match=r"holds cifar-10-python\.tar\.gz: extract it"):
        scan(tmp_path)


def test_a_txt_list_of_urls_as_src_says_how_to_make_it_a_manifest(tmp_path):
    """img2dataset's default input, one URL a line, was told to pass a folder of class folders."""
    urls = ["http://127.0.0.1:9/a.jpg?w=1,2", "https://example.org/b c.png"]
    (tmp_path / "urls.txt").write_text("".join(f"{url}\n" for url in urls))
    with pytest.raises(SourceError) as caught:
        scan(tmp_path / "urls.txt")
    advice = "(echo path; cat urls.txt) > urls.tsv"
    assert advice in str(caught.value)
    subprocess.run(["sh", "-c", advice], cwd=tmp_path, check=True)  # the advice works
    items = scan(tmp_path / "urls.tsv").splits["train"]
    assert sorted(item.path for item in items) == sorted(urls)


def test_a_txt_list_of_paths_and_labels_says_how_to_make_it_a_manifest(tmp_path):
    """Caffe's `train.txt`, `a/1.jpg 0` a line: the one advice, `(echo path; cat ...)`, made one
    column of `a/1.jpg 0` cells, every row a missing file."""
    photos = helpers.make_tree(tmp_path, {"a": 2, "b": 1})
    lines = [f"{p.relative_to(photos).as_posix()} {p.parent.name}" for p in
             sorted(photos.rglob("*.jpg"))]  # fmt: skip
    (tmp_path / "train.txt").write_text("".join(f"{line}\n" for line in lines))
    with pytest.raises(SourceError) as caught:
        scan(tmp_path / "train.txt")
    advice = "(printf 'path\\tlabel\\n'; tr ' ' '\\t' < train.txt) > train.tsv"
    assert f"(Caffe's lists): {advice};" in str(caught.value)
    subprocess.run(["sh", "-c", advice], cwd=tmp_path, check=True)  # the advice works
    dataset = scan(tmp_path / "train.tsv")
    assert dataset.classes == ("a", "b") and len(dataset.splits["train"]) == 3


def test_a_json_list_as_src_says_how_to_make_it_jsonl(tmp_path):
    """img2dataset's --input_format json (one array of rows) was told to pass class folders."""
    rows = [{"url": "http://127.0.0.1:9/a.jpg", "caption": "a cat"}]
    (tmp_path / "urls.json").write_text(json.dumps(rows))
    with pytest.raises(SourceError) as caught:
        scan(tmp_path / "urls.json", PackOptions(path_column="url"))
    advice = "jq -c '.[]' urls.json > urls.jsonl"
    assert (
        f"(a JSON array of objects), make it JSONL, an object a line: {advice}, then pack "
        "urls.jsonl; a COCO annotation file's dataset is" in str(caught.value)
    )
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed: the advice is not run")
    subprocess.run(["sh", "-c", advice], cwd=tmp_path, check=True)
    assert len(scan(tmp_path / "urls.jsonl", PackOptions(path_column="url")).splits["train"]) == 1


def test_a_compressed_list_as_src_says_to_decompress_it(tmp_path):
    """img2dataset reads csv.gz, tsv.gz, jsonl.gz: such a file was told to pass a folder of
    class folders, and a folder of them (with --path-column) that --path-column is for a
    manifest table. Each says to decompress, and the advice works."""
    rows = "url,caption\nhttp://127.0.0.1:9/a.jpg,a cat\n"
    lists = tmp_path / "lists"
    lists.mkdir()
    for where in (tmp_path / "urls.csv.gz", lists / "part-0.csv.gz", lists / "part-1.csv.gz"):
        where.write_bytes(gzip.compress(rows.encode()))
    with pytest.raises(SourceError) as caught:
        scan(tmp_path / "urls.csv.gz", PackOptions(path_column="url"))
    advice = "gunzip -k urls.csv.gz"
    assert (
        f"it is a compressed list: shardpack reads .csv, .tsv and .jsonl lists as they are; "
        f"decompress it ({advice}), then pack what it makes" in str(caught.value)
    )
    subprocess.run(["sh", "-c", advice], cwd=tmp_path, check=True)
    assert len(scan(tmp_path / "urls.csv", PackOptions(path_column="url")).splits["train"]) == 1
    done = helpers.run_cli("pack", str(lists), str(tmp_path / "out"), "--path-column", "url")
    line = helpers.one_line_error(done, "holds compressed lists (part-0.csv.gz, ...)")
    advice = line.split("decompress them in place (")[1].split(")")[0]
    assert advice == f"gunzip {lists}/*.gz"
    subprocess.run(["sh", "-c", advice], check=True)
    assert len(scan(lists, PackOptions(path_column="url")).splits["train"]) == 1  # one URL


def test_a_folder_of_tars_as_class_folders_names_the_webdataset_source(tmp_path):
    """--source folder on WebDataset shards said to extract them, not to read them as shards."""
    helpers.write_tars(tmp_path / "shards", count=4)
    with pytest.raises(SourceError) as caught:
        scan(tmp_path / "shards", PackOptions(source="folder"))
    assert ": for WebDataset shards pass source='webdataset'; for an archive of images, " \
        "extract it, then pass the folder it makes" in str(caught.value)  # fmt: skip


def test_a_flat_folder_of_images_says_what_to_do(tmp_path):
    src = tmp_path / "photos"
    for i in range(3):
        _touch_image(src / f"p{i}.jpg", i)
    with pytest.raises(SourceError) as caught:
        scan(src)
    message = str(caught.value)
    assert "no images found; its 3 images lie in SRC itself" in message
    assert f"or pass {tmp_path} to pack photos as one class" in message
    assert scan(tmp_path).classes == ("photos",)  # the advice works
    (tmp_path / "notes").mkdir()  # a folder of no image beside it: no class
    (tmp_path / "notes" / "n.txt").write_text("x")
    with pytest.raises(SourceError) as caught:
        scan(src)
    unlabeled = (f"; or, to pack them unlabeled, list them in a manifest, (echo path; ls {src}) "
                 f"> images.csv, and pack images.csv with root={str(src)!r}")  # fmt: skip
    assert str(caught.value).endswith(
        f"(SRC/<class>/<image>): move them into class folders{unlabeled}"
    )
    _touch_image(tmp_path / "other" / "o.jpg", 9)  # a class beside it: SRC is one class of many
    with pytest.raises(SourceError) as caught:
        scan(src)
    assert str(caught.value) == (f"{src}: no images found; its 3 images lie in SRC itself, a "
                                 f"class folder beside 'other': pass {tmp_path} to pack them "
                                 f"all, each folder a class{unlabeled}")  # fmt: skip
    assert scan(tmp_path, PackOptions(source="folder")).classes == ("notes", "other", "photos")
    listed = subprocess.run(["ls", str(src)], capture_output=True, text=True, check=True).stdout
    (tmp_path / "images.csv").write_text(f"path\n{listed}")  # as the message says
    dataset = scan(tmp_path / "images.csv", PackOptions(root=str(src)))
    assert dataset.classes == () and dataset.num_items == 3  # that advice works too


def test_one_class_folder_with_folders_of_its_own_says_to_pass_the_dataset(tmp_path):
    """flowers/daisy passed, its photos beside its 2019/: the scan took 2019 for the one class
    and skipped daisy's own photos, saying to move them into their class's folder."""
    daisy = tmp_path / "flowers" / "daisy"
    for i in range(3):
        _touch_image(daisy / f"d{i}.jpg", i)
    _touch_image(daisy / "2019" / "old.jpg", 5)
    _touch_image(tmp_path / "flowers" / "rose" / "r.jpg", 6)
    with pytest.raises(SourceError) as caught:
        scan(daisy)
    assert str(caught.value) == (
        f"{daisy}: its 3 images lie in SRC itself and more in its folder '2019': it is a class "
        f"folder beside 'rose': pass {tmp_path / 'flowers'} to pack them all, each folder a "
        "class; or pass source='folder' to take '2019' as the classes, its own images skipped"
    )
    assert scan(tmp_path / "flowers").classes == ("daisy", "rose")  # the advice works
    assert scan(daisy, PackOptions(source="folder")).classes == ("2019",)
    for i in range(3):  # a dataset's few stray images beside its classes: packed, they skipped
        _touch_image(daisy / f"c{i}" / "c.jpg", 7 + i)
    assert scan(daisy).classes == ("2019", "c0", "c1", "c2")


def test_the_parent_of_a_cifar_folder_points_at_it(tmp_path):
    cifar = helpers.make_cifar10_python(tmp_path / "cifar-10-batches-py", per_batch=2, batches=1)
    with pytest.raises(SourceError, match=f"{cifar} holds CIFAR batches: pass that folder as SRC"):
        scan(tmp_path)


def test_unknown_source_kind_is_refused(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cats": 1})
    with pytest.raises(ShardpackError, match="'imagenet'"):
        scan(src, PackOptions(source="imagenet"))


def test_source_cifar_on_a_folder_tree_is_source_error(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cats": 1})
    with pytest.raises(SourceError, match="no CIFAR batches found") as caught:
        scan(src, PackOptions(source="cifar"))
    assert str(src) in str(caught.value)


def test_source_folder_on_a_cifar_folder_is_a_clean_error(tmp_path):
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=2, batches=1)
    with pytest.raises(SourceError, match="no images found; it holds CIFAR batches: pass source="):
        scan(src, PackOptions(source="folder"))
    (src / "batches.meta").unlink()  # half an archive: auto finds no CIFAR, and says why
    with pytest.raises(SourceError, match=r"holds data_batch_1 but not batches\.meta, which names"):
        scan(src)


def test_source_folder_on_a_cifar_folder_with_class_folders_scans_the_folders(tmp_path):
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=2, batches=1)
    _touch_image(src / "extra" / "a.png")
    dataset = scan(src, PackOptions(source="folder"))
    assert dataset.kind == "folder"
    assert _keys(dataset) == ["extra/a.png"]
    assert dataset.ignored == 3  # data_batch_1, test_batch, batches.meta


# ---- CIFAR ---------------------------------------------------------------------------------


def _listing(dataset) -> dict[str, list[tuple]]:
    return {
        split: [(i.key, i.label, i.position, i.size, i.fields) for i in items]
        for split, items in dataset.splits.items()
    }


def test_cifar10_python_items(tmp_path):
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=4, batches=2)
    dataset = scan(src)
    assert dataset.kind == "cifar10-python"
    assert dataset.classes == tuple(helpers.CIFAR10_CLASSES)
    assert list(dataset.schema.class_features) == ["label"]
    assert list(dataset.splits) == ["train", "test"]
    train = dataset.splits["train"]
    assert [i.key for i in train] == [f"data_batch_{b}:{r}" for b in (1, 2) for r in range(4)]
    _, labels_1 = helpers.cifar_arrays(4, seed=0)
    _, labels_2 = helpers.cifar_arrays(4, seed=1)
    assert [i.label for i in train] == labels_1 + labels_2
    assert train[0] == Item("data_batch_1:0", labels_1[0], "data_batch_1", CIFAR_PIXELS, 0)
    _, test_labels = helpers.cifar_arrays(4, seed=2)
    assert [(i.key, i.label) for i in dataset.splits["test"]] == [
        (f"test_batch:{r}", test_labels[r]) for r in range(4)
    ]
    # batches 3-5 are not there (an archive extracted in part): packed around, and said
    assert dataset.warnings == tuple(
        f"{src}: no data_batch_{b}: packed without it; extract the whole archive to pack every "
        "record"
        for b in (3, 4, 5)
    )


def test_cifar10_python_and_binary_give_identical_items(tmp_path):
    py = scan(helpers.make_cifar10_python(tmp_path / "py", per_batch=5, batches=5))
    binary = scan(helpers.make_cifar10_binary(tmp_path / "bin", per_batch=5, batches=5))
    assert binary.kind == "cifar10-binary"
    assert binary.classes == py.classes == tuple(helpers.CIFAR10_CLASSES)
    assert list(binary.splits) == list(py.splits) == ["train", "test"]
    assert _listing(binary) == _listing(py)
    assert len(py.splits["train"]) == 25 and len(py.splits["test"]) == 5
    assert {i.path for i in binary.splits["train"]} == {f"data_batch_{b}.bin" for b in range(1, 6)}


def test_cifar_pixels_agree_between_python_and_binary(tmp_path):
    py = helpers.make_cifar10_python(tmp_path / "py", per_batch=3, batches=1)
    binary = helpers.make_cifar10_binary(tmp_path / "bin", per_batch=3, batches=1)
    a = read_cifar_pixels(str(py), "data_batch_1")
    b = read_cifar_pixels(str(binary), "data_batch_1.bin")
    data, _ = helpers.cifar_arrays(3, seed=0)
    assert a.shape == (3, 32, 32, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    # planar rows: 1024 red, then 1024 green, then 1024 blue
    assert a[1, 0, 0].tolist() == [data[1, 0], data[1, 1024], data[1, 2048]]
    assert a[2, 31, 31].tolist() == [data[2, 1023], data[2, 2047], data[2, 3071]]


def test_cifar100_python_has_fine_and_coarse_labels(tmp_path):
    src = helpers.make_cifar100_python(tmp_path / "c100", n_train=30, n_test=10)
    dataset = scan(src)
    assert dataset.kind == "cifar100-python"
    assert len(dataset.classes) == 100 and dataset.classes[7] == "fine7"
    coarse = dataset.schema["coarse_label"]
    assert coarse.classes == tuple(f"coarse{i}" for i in range(20))
    assert list(dataset.splits) == ["train", "test"]
    _, fine = helpers.cifar_arrays(30, seed=10, num_classes=100)
    train = dataset.splits["train"]
    assert [i.key for i in train] == [f"train:{r}" for r in range(30)]
    assert [i.label for i in train] == fine
    assert [i.fields for i in train] == [{"coarse_label": label // 5} for label in fine]
    assert len(dataset.splits["test"]) == 10
    assert all("coarse_label" in i.fields for i in dataset.splits["test"])


def test_cifar100_binary_matches_python(tmp_path):
    py = helpers.make_cifar100_python(tmp_path / "py", n_train=6, n_test=3)
    binary = tmp_path / "bin"
    binary.mkdir()
    for name in ("train", "test"):
        batch = load_cifar_pickle(str(py / name))
        rows = np.concatenate(
            [
                np.array(batch["coarse_labels"], np.uint8)[:, None],
                np.array(batch["fine_labels"], np.uint8)[:, None],
                batch["data"],
            ],
            axis=1,
        )
        (binary / f"{name}.bin").write_bytes(rows.tobytes())
    (binary / "fine_label_names.txt").write_text("\n".join(f"fine{i}" for i in range(100)))
    (binary / "coarse_label_names.txt").write_text("\n".join(f"coarse{i}" for i in range(20)))
    a, b = scan(py), scan(binary)
    assert b.kind == "cifar100-binary"
    assert b.schema == a.schema
    assert _listing(b) == _listing(a)
    assert np.array_equal(
        read_cifar_pixels(str(binary), "train.bin"), read_cifar_pixels(str(py), "train")
    )


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar_pickle_protocols_load(tmp_path, protocol):
    data, labels = helpers.cifar_arrays(3)
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"labels": labels, b"data": data}, protocol=protocol))
    loaded = load_cifar_pickle(str(path))
    assert set(loaded) == {"labels", "data"}
    assert loaded["labels"] == labels
    assert np.array_equal(loaded["data"], data)


def _underlying(array: np.ndarray) -> object:
    """The object an array's memory belongs to, past numpy's views and memoryviews."""
    owner = array
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner.obj if isinstance(owner, memoryview) else owner


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_cifar_pixels_are_a_view_of_the_file_not_a_copy(tmp_path, protocol):
    data, labels = helpers.cifar_arrays(40)  # 120 KB of pixels: over safepickle.LIFT_BYTES
    label = b"L" * 100_000  # a long byte string that is not an array's data comes back as bytes
    path = tmp_path / "data_batch_1"
    blob = pickle.dumps({b"labels": labels, b"data": data, b"batch_label": label}, protocol)
    if protocol == 2:  # as Python 2 wrote the real files: the pixels a BINSTRING, not text
        from benchmarks.workloads import python2_pickle

        blob = python2_pickle({b"labels": labels, b"data": data, b"batch_label": label})
    path.write_bytes(blob)
    loaded = load_cifar_pickle(str(path))
    assert np.array_equal(loaded["data"], data) and loaded["labels"] == labels
    assert loaded["batch_label"] == label and type(loaded["batch_label"]) is bytes
    assert not loaded["data"].flags.writeable
    owner = _underlying(loaded["data"])
    assert isinstance(owner, bytes) and len(owner) == len(blob)  # the file's bytes themselves


def test_a_long_byte_string_inside_a_frame_is_loaded_as_it_is(tmp_path, monkeypatch):
    # pickle.dumps writes long byte strings outside frames; one inside (a frame's length counts
    # its bytes) cannot be cut out of the stream, so it is copied as the unpickler reads it
    data, labels = helpers.cifar_arrays(40)
    monkeypatch.setattr(pickle._Framer, "_FRAME_SIZE_TARGET", 2**30)
    blob = pickle._dumps({b"labels": labels, b"data": data}, protocol=4)
    assert blob[2:3] == b"\x95"  # FRAME, holding everything after it
    (tmp_path / "data_batch_1").write_bytes(blob)
    loaded = load_cifar_pickle(str(tmp_path / "data_batch_1"))
    assert np.array_equal(loaded["data"], data) and loaded["labels"] == labels


def test_a_pickle_cannot_name_the_loads_own_view_global(tmp_path):
    from shardpack.sources import safepickle

    blob = b"\x80\x02" + safepickle._VIEW_GLOBAL + b"K\x00\x85R."
    (tmp_path / "data_batch_1").write_bytes(blob)
    with pytest.raises(UnsafePickleError, match=r"asks for shardpack\.view"):
        load_cifar_pickle(str(tmp_path / "data_batch_1"))


class _System:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


class _Eval:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (eval, (f"open({str(self.marker)!r}, 'w').close()",))


class _Rmtree:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (shutil.rmtree, (str(self.target),))


@pytest.mark.parametrize("payload", [_System, _Eval], ids=["os.system", "builtins.eval"])
@pytest.mark.parametrize("victim", ["data_batch_1", "batches.meta"])
def test_hostile_pickle_is_refused_and_never_runs(tmp_path, payload, victim):
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=2, batches=1)
    marker = tmp_path / "pwned"
    # the payload hides inside an ordinary-looking batch dict
    hostile = {b"labels": [0, 1], b"data": payload(marker), b"batch_label": b"x"}
    (src / victim).write_bytes(pickle.dumps(hostile, protocol=2))
    with pytest.raises(UnsafePickleError, match="refused to load") as caught:
        scan(src)
    assert not marker.exists()
    message = str(caught.value)
    assert str(src / victim) in message
    assert ("system" if payload is _System else "eval") in message  # names what it asked for


def test_hostile_pickle_cannot_delete_files(tmp_path):
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=2, batches=1)
    target = tmp_path / "precious"
    target.mkdir()
    (src / "test_batch").write_bytes(pickle.dumps(_Rmtree(target), protocol=4))
    with pytest.raises(UnsafePickleError, match=r"shutil\.rmtree"):
        scan(src)
    assert target.is_dir()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "not a readable CIFAR pickle"),
        (b"garbage, not a pickle", "not a readable CIFAR pickle"),
        (b"hello world", r"not a readable CIFAR pickle \(malformed\); is it a batch of the"),
        (pickle.dumps([1, 2, 3], protocol=2), "holds a list"),
        (pickle.dumps({b"labels": [0, 1]}, protocol=2), "no 'data' entry"),
        (pickle.dumps({b"labels": [0], b"data": np.zeros((1, 5), np.uint8)}), "N x 3072"),
        (pickle.dumps({b"labels": [0, 1, 2], b"data": np.zeros((2, 3072), np.uint8)}), "3 labels"),
        (pickle.dumps({b"labels": [10], b"data": np.zeros((1, 3072), np.uint8)}), "label 10"),
    ],
    ids=[
        "empty",
        "garbage",
        "text",
        "list",
        "no-data",
        "bad-shape",
        "count-mismatch",
        "label-range",
    ],
)
def test_bad_cifar_pickle_is_source_error(tmp_path, content, match):
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=2, batches=1)
    (src / "data_batch_1").write_bytes(content)
    with pytest.raises(SourceError, match=match) as caught:
        scan(src)
    assert not isinstance(caught.value, UnsafePickleError)
    assert str(src / "data_batch_1") in str(caught.value)


@pytest.mark.parametrize("cut", [1, 3072, 3072 * 2])  # never a whole record
def test_truncated_cifar_binary_is_source_error(tmp_path, cut):
    src = helpers.make_cifar10_binary(tmp_path / "bin", per_batch=4, batches=1)
    path = src / "data_batch_1.bin"
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(SourceError, match="truncated") as caught:
        scan(src)
    assert str(path) in str(caught.value)


def test_empty_cifar_binary_is_source_error(tmp_path):
    src = helpers.make_cifar10_binary(tmp_path / "bin", per_batch=4, batches=1)
    (src / "test_batch.bin").write_bytes(b"")
    with pytest.raises(SourceError, match="0 bytes"):
        scan(src)


def test_cifar_binary_label_out_of_range_is_source_error(tmp_path):
    src = helpers.make_cifar10_binary(tmp_path / "bin", per_batch=4, batches=1)
    path = src / "data_batch_1.bin"
    data = bytearray(path.read_bytes())
    data[3073] = 10  # second record's label byte
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match="record 1 has label 10"):
        scan(src)


def test_batches_without_meta_file_are_not_cifar(tmp_path):
    src = helpers.make_cifar10_python(tmp_path / "cifar", per_batch=2, batches=1)
    (src / "batches.meta").unlink()
    with pytest.raises(SourceError, match="no CIFAR batches found"):
        scan(src, PackOptions(source="cifar"))


def _rewrite_pickle(path, change) -> None:
    import pickle

    batch = pickle.loads(path.read_bytes(), encoding="bytes")
    change(batch)
    path.write_bytes(pickle.dumps(batch, protocol=2))


@pytest.mark.parametrize(
    "file, change, message",
    [
        ("test_batch", lambda b: b.__setitem__(b"labels", ["cat"] * 20), "not a list of integers"),
        ("test_batch", lambda b: b.__setitem__(b"data", b[b"data"].astype(np.int64)), "uint8"),
        ("test_batch", lambda b: b.__setitem__(b"labels", [3] * 19), "19 labels for 20 images"),
        ("test_batch", lambda b: b.__setitem__(b"labels", [10] * 20), "has label 10"),
        ("batches.meta", lambda b: b.__setitem__(b"label_names", 5), "not a list of names"),
    ],
)
def test_cifar10_pickles_with_wrong_contents_are_refused(tmp_path, file, change, message):
    src = helpers.make_cifar10_python(tmp_path / "c", per_batch=20, batches=1)
    _rewrite_pickle(src / file, change)
    with pytest.raises(SourceError, match=message):
        scan(src)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda b: b.__setitem__(b"coarse_labels", b[b"coarse_labels"][:-1]), "coarse labels for"),
        (lambda b: b.__setitem__(b"coarse_labels", [25] * len(b[b"coarse_labels"])), "label 25"),
    ],
)
def test_cifar100_coarse_labels_are_checked(tmp_path, change, message):
    src = helpers.make_cifar100_python(tmp_path / "c")
    _rewrite_pickle(src / "train", change)
    with pytest.raises(SourceError, match=message):
        scan(src)


def test_a_pickle_larger_than_any_cifar_batch_is_refused_unread(tmp_path):
    src = helpers.make_cifar10_python(tmp_path / "c", per_batch=2, batches=1)
    with open(src / "test_batch", "r+b") as f:
        f.truncate(600 * 2**20)  # sparse: costs no disk
    with pytest.raises(SourceError, match=r"over the limit .*; is it a CIFAR batch"):
        scan(src)


def test_a_class_folder_that_links_to_another_class_is_refused(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 1})
    (src / "b").symlink_to(src / "a")
    with pytest.raises(SourceError, match="one folder cannot be two classes"):
        scan(src)


def test_the_class_folder_refused_as_a_second_name_is_the_link(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"b": 1})
    (src / "a").symlink_to(src / "b")  # sorts first, yet the folder is b's
    with pytest.raises(SourceError) as caught:
        scan(src)
    assert str(caught.value).startswith(f"{src / 'a'}: is the same folder as {src / 'b'} (a link)")
    (src / "a").unlink()
    (src / "a").symlink_to(".")
    with pytest.raises(SourceError, match=f"^{src / 'a'}: is a link to {src}, the folder holding"):
        scan(src)


# ---- CIFAR batches kept for the run --------------------------------------------------------


def _count_loads(monkeypatch, log: Path) -> None:
    """Log each safe load's file to `log`, from this process and workers forked from it."""
    from shardpack.sources import safepickle

    load = safepickle.load

    def counted(data: bytes, path: str) -> object:
        with open(log, "a") as f:
            f.write(os.path.basename(path) + "\n")
        return load(data, path)

    monkeypatch.setattr(safepickle, "load", counted)


@pytest.mark.parametrize("workers", [1, 2])
def test_pack_loads_each_cifar_batch_once(tmp_path, monkeypatch, workers):
    from shardpack.options import PackOptions
    from shardpack.packing.packer import pack

    src = helpers.make_cifar10_python(tmp_path / "src", per_batch=20, batches=5)
    log = tmp_path / "loads.txt"
    _count_loads(monkeypatch, log)
    # 4 train shards: each draws records from all five batches
    options = PackOptions(encode="raw", shards=4, workers=workers)
    result = pack(src, tmp_path / "out", options)
    assert result.num_records == 120
    loads = log.read_text().split()
    assert sorted(loads) == sorted(
        ["batches.meta", "test_batch"] + [f"data_batch_{i}" for i in range(1, 6)]
    )


def test_kept_batch_rewritten_is_loaded_again(tmp_path):
    from shardpack.sources.cifar import keep_batches

    src = helpers.make_cifar10_python(tmp_path / "src", per_batch=4, batches=1)
    path = src / "data_batch_1"
    with keep_batches():
        first = load_cifar_pickle(str(path))
        assert load_cifar_pickle(str(path))["data"] is first["data"]  # kept, not loaded again
        data, labels = helpers.cifar_arrays(4, seed=99)
        path.write_bytes(pickle.dumps({b"labels": labels, b"data": data}, protocol=2))
        os.utime(path, ns=(1, 1))  # a rewrite within the clock's tick still differs in mtime
        assert np.array_equal(load_cifar_pickle(str(path))["data"], data)
    assert load_cifar_pickle(str(path))["data"] is not load_cifar_pickle(str(path))["data"]


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_safepickle_reads_opcodes_as_pickletools_does(protocol):
    from pickletools import genops

    from shardpack.sources import safepickle

    data, labels = helpers.cifar_arrays(3)
    value = {
        b"labels": [*labels, -1, 255, 65535, 65536, 2**31 - 1, -(2**31), 2**40, 2**70, True, None],
        b"data": data,
        "names": ["x" * 300, "é" * 3, "", ("t", b"b", b"B" * 300)],
    }
    blob = pickle.dumps(value, protocol=protocol)

    # what the walk reads: integers and short unicode text (Python 2 strings load as bytes)
    python2 = {"SHORT_BINSTRING", "BINSTRING"}

    def text(name: str, arg: object) -> object:
        short = isinstance(arg, str) and len(arg) <= 256 and name not in python2
        return arg if isinstance(arg, int) or short else None

    expected = [(op.name, text(op.name, arg), pos) for op, arg, pos in genops(blob)]
    ops = list(safepickle._ops(blob))
    assert [(name, text(name, arg), pos) for name, arg, pos in ops] == expected
    # bytes, and strings the walk does not read, come as the slice of the pickle they occupy
    for (name, arg, _), (_, value, _) in zip(ops, genops(blob), strict=True):
        if isinstance(arg, slice):
            encoding = "latin-1" if name in python2 else "utf-8"
            raw = value.encode(encoding, "surrogatepass") if isinstance(value, str) else value
            assert blob[arg] == raw


def test_a_class_of_a_few_images_named_a_typo_away_from_another_is_named(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cat": 8, "dgo": 2, "dog": 8, "owl": 2})
    assert scan(src).warnings == (
        "class 'dgo' (2 images) is named a typo away from class 'dog' (8 images): if it is a "
        "typo, give its images the class 'dog'",
    )  # owl is as far from cat and dog as names go


def test_class_folders_named_by_numbers_sorted_as_text_are_named(tmp_path):
    """Folders 1, 2, 3, 10 (ages, counts, digits) were numbered 1, 10, 2, 3 without a word, as
    torchvision's ImageFolder numbers them: the images of folder 10 under label 1."""
    src = helpers.make_tree(tmp_path / "src", {"1": 1, "2": 1, "3": 1, "10": 1})
    dataset = scan(src)
    assert dataset.classes == ("1", "10", "2", "3")
    assert dataset.warnings == (
        "class names are numbers, sorted as text as torchvision's ImageFolder sorts them: class "
        "'10' is label 1; to number them in numeric order, pass --classes 1,2,3,10",
    )
    assert scan(src, PackOptions(classes=("1", "2", "3", "10"))).warnings == ()
    # sorted alike as text and as numbers (one digit, or zero-padded): nothing to say
    assert scan(helpers.make_tree(tmp_path / "pad", {"08": 1, "09": 1, "10": 1})).warnings == ()


def test_folders_holding_the_same_class_folders_are_refused_as_a_split_tree(tmp_path):
    src = helpers.make_tree(tmp_path / "src" / "tr", {"cat": 2, "dog": 2}).parent
    helpers.make_tree(src / "te", {"cat": 1, "dog": 1})
    with pytest.raises(SourceError, match=r"its folders 'te', 'tr' each hold the same folders "
                       r"\('cat', 'dog'\), as a split tree's .* pass split_names=\('te', 'tr'\) to "
                       "take them as splits, or source='folder'"):  # fmt: skip
        scan(src)
    assert set(scan(src, PackOptions(split_names=("te", "tr"))).splits) == {"te", "tr"}
    assert scan(src, PackOptions(source="folder")).classes == ("te", "tr")
    # classes holding split folders (cat/train/): not to be taken as splits named cat and dog
    inverted = helpers.make_tree(tmp_path / "inv" / "cat", {"train": 1, "test": 1}).parent
    helpers.make_tree(inverted / "dog", {"train": 1, "test": 1})
    with pytest.raises(SourceError) as caught:
        scan(inverted)
    assert str(caught.value) == (
        f"{inverted}: its folders 'cat', 'dog' each hold split folders ('test', 'train'), but a "
        "split tree holds its classes in its splits (SRC/<split>/<class>/<image>): move "
        "cat/test/ to test/cat/ and so on, or pass source='folder' to take every folder as a "
        "class, its splits' images together"
    )
    # one shared folder (Tiny ImageNet's <class>/images/) is a class tree
    helpers.make_tree(tmp_path / "tiny" / "n01", {"images": 1})
    helpers.make_tree(tmp_path / "tiny" / "n02", {"images": 1})
    assert scan(tmp_path / "tiny").classes == ("n01", "n02")


def test_the_folder_above_a_dataset_is_refused_not_packed_as_one_class(tmp_path):
    """~/data holding only flowers/daisy, flowers/rose packed every photo as class 'flowers'."""
    flowers = helpers.make_tree(tmp_path / "data" / "flowers", {"daisy": 2, "rose": 1})
    with pytest.raises(SourceError) as caught:
        scan(tmp_path / "data")
    assert str(caught.value) == (
        f"{tmp_path / 'data'}: its one folder 'flowers' holds no image of its own, only folders "
        f"('daisy', 'rose'), as a dataset's folder holds its classes; pass {flowers} as SRC to "
        "take those as the classes, or source='folder' to pack every image as the one class "
        "'flowers'"
    )
    assert scan(tmp_path / "data", PackOptions(source="folder")).classes == ("flowers",)
    assert scan(flowers).classes == ("daisy", "rose")
    # one class folder holding an image of its own beside its folders: one class, as laid out
    helpers.make_tree(tmp_path / "one" / "cat", {"indoor": 1, "outdoor": 1})
    helpers.write_image(tmp_path / "one" / "cat" / "own.jpg", helpers.image(0))
    assert scan(tmp_path / "one").classes == ("cat",)


def test_the_folder_above_a_dataset_beside_a_pack_is_refused_not_packed_as_two_classes(tmp_path):
    """`shardpack demo demo-out` then `pack demo-out ...`: its sample/ (class folders) and
    shards/ (a pack, no image) were packed as classes 'sample' (every image) and 'shards'."""
    from shardpack.packing.packer import pack

    demo = tmp_path / "demo-out"
    sample = helpers.make_tree(demo / "sample", {"circle": 2, "cross": 1})
    pack(sample, demo / "shards", PackOptions())
    with pytest.raises(SourceError) as caught:
        scan(demo)
    assert str(caught.value).startswith(
        f"{demo}: its one folder 'sample' with images ('shards' holds none) holds no image of its "
        f"own, only folders ('circle', 'cross'), as a dataset's folder holds its classes; pass "
        f"{sample} as SRC"
    )
    (demo / "empty").mkdir()
    with pytest.raises(SourceError, match=r"'sample' with images \('empty', 'shards' hold none\)"):
        scan(demo)
    assert scan(demo, PackOptions(source="folder")).classes == ("empty", "sample", "shards")
    # two folders with images, one of them nested: two classes, as laid out
    helpers.make_tree(demo / "empty" / "inner", {"x": 1})
    assert scan(demo).classes == ("empty", "sample", "shards")


def test_a_folder_of_shards_names_them_as_shards_and_the_source_that_packs_them(tmp_path):
    """Shards copied out of a pack's folder, `x.tfrecord-00000-of-00002`, were counted as files
    of the extension `.tfrecord-00000-of-00002`, and the line said to convert the images."""
    from shardpack.packing.packer import pack

    out = tmp_path / "out"
    pack(helpers.make_tree(tmp_path / "src", {"a": 2, "b": 2}), out, PackOptions(shards=2))
    copied = tmp_path / "copy" / "part"
    copied.mkdir(parents=True)
    shards = sorted(out.glob("*.tfrecord-*"))
    for shard in shards:
        shutil.copy(shard, copied)
    done = helpers.run_cli("pack", str(tmp_path / "copy"), str(tmp_path / "again"))
    line = helpers.one_line_error(
        done, "its 2 files have none of those (2 tfrecord shards): ",
        f"part/{shards[0].name} is a tfrecord shard, not an image; to pack shards again, pass the "
        f"folder of the pack that wrote them ({copied}, with its index.json) as SRC with "
        "--source shardpack")  # fmt: skip
    assert "-of-00002 1" not in line and "convert the images" not in line
    again = helpers.run_cli("pack", str(out), str(tmp_path / "again"), "--source", "shardpack")
    assert again.returncode == 0, again.stderr


def test_a_tree_of_other_files_names_their_kinds(tmp_path):
    """A folder of iPhone photos (.HEIC) said only which extensions it expected."""
    for name in ("a/IMG_1.HEIC", "a/IMG_2.heic", "b/IMG_3.HEIC", "b/notes.txt"):
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_bytes(b"x")
    with pytest.raises(SourceError) as caught:
        scan(tmp_path / "src")
    assert str(caught.value).endswith(
        ".tiff, .webp; its 4 files have none of those (.heic 3, .txt 1): convert the images to "
        "one of those formats"
    )
    (tmp_path / "tree" / "train" / "cat").mkdir(parents=True)  # a split tree's: said alike
    (tmp_path / "tree" / "test").mkdir()
    (tmp_path / "tree" / "train" / "cat" / "IMG_4.HEIC").write_bytes(b"x")
    with pytest.raises(SourceError) as caught:
        scan(tmp_path / "tree")
    assert str(caught.value).endswith(
        "expected SRC/<split>/<class>/<image> with extensions .bmp, .gif, .jpeg, .jpg, .png, "
        ".tif, .tiff, .webp; its 1 file has none of those (.heic 1): convert the images to one "
        "of those formats"
    )
