"""Class names and labels from SRC as hostile input: manifests whose text JSON allows but UTF-8
does not, --classes files that are not regular files or name classes with line breaks, names
that differ invisibly, and labels that would build millions of classes. Each is packed for real
through the CLI: one line and exit 2, or a skip with its reason, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli, make_tree, one_line_error, run_cli


def _pack(src: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli("pack", str(src), str(out), "--workers", "1", "--no-progress", *args)


def _index(out: Path) -> dict:
    return json.loads((out / "index.json").read_text())


# Each a JSONL line as json.dumps writes it (ASCII, with \u escapes): valid JSON, not UTF-8.
SURROGATES = {
    "label": {"path": "cat/img_000.jpg", "label": "a\ud800"},
    "column name": {"path": "cat/img_000.jpg", "label": "cat", "x\udfff": "v"},
    "text value": {"path": "cat/img_000.jpg", "label": "cat", "caption": "v\ud800"},
}


@pytest.mark.parametrize("where", sorted(SURROGATES))
def test_a_lone_surrogate_in_a_jsonl_manifest_is_a_bad_row(tmp_path: Path, where: str):
    src = make_tree(tmp_path / "src", {"cat": 2})
    good = {"path": "cat/img_001.jpg", "label": "cat", "caption": "ok"}
    manifest = src / "labels.jsonl"
    manifest.write_text(json.dumps(SURROGATES[where]) + "\n" + json.dumps(good) + "\n")
    assert "\\ud" in manifest.read_text() or "\\udfff" in manifest.read_text()
    done = _pack(manifest, tmp_path / "fail", "--on-error", "fail")
    one_line_error(done, "labels.jsonl line 1", "lone surrogate")
    done = _pack(manifest, tmp_path / "skip", "--on-error", "skip")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (skipped,) = _index(tmp_path / "skip")["skipped"]
    assert "labels.jsonl line 1" in skipped["key"] + skipped["reason"]
    assert "lone surrogate" in skipped["reason"]


def _labelled_manifest(tmp_path: Path) -> Path:
    """A CSV of integer labels 0 (cat) and 1 (dog) over real images."""
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 1})
    rows = ["path,label", "cat/img_000.jpg,0", "cat/img_001.jpg,0", "dog/img_000.jpg,1"]
    (src / "labels.csv").write_text("\n".join(rows) + "\n")
    return src / "labels.csv"


def _packed_classes(out: Path) -> list[str]:
    raw = _index(out)
    assert raw["splits"]["train"]["num_records"] == 3, raw["skipped"]
    return raw["classes"]


def test_classes_from_process_substitution_are_read(tmp_path: Path):
    manifest = _labelled_manifest(tmp_path)
    out = tmp_path / "out"
    line = (f"{sys.executable} -m shardpack pack {manifest} {out} --workers 1 --no-progress "
            "--classes <(printf 'cat\\ndog\\n')")  # fmt: skip
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _packed_classes(out) == ["cat", "dog"]


def test_classes_from_a_fifo_and_from_stdin_are_read(tmp_path: Path):
    import os
    import threading

    manifest = _labelled_manifest(tmp_path)
    fifo = tmp_path / "classes.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("cat\ndog\n"))
    writer.start()
    done = _pack(manifest, tmp_path / "a", "--classes", str(fifo))
    writer.join(timeout=10)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _packed_classes(tmp_path / "a") == ["cat", "dog"]
    b = tmp_path / "b"
    done = cli("pack", str(manifest), str(b), "--workers", "1", "--no-progress",
               "--classes", "/dev/stdin", input="cat\ndog\n")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert _packed_classes(tmp_path / "b") == ["cat", "dog"]


def test_classes_naming_a_folder_is_refused_by_name(tmp_path: Path):
    manifest = _labelled_manifest(tmp_path)
    (tmp_path / "names").mkdir()
    done = _pack(manifest, tmp_path / "out", "--classes", str(tmp_path / "names"))
    one_line_error(done, str(tmp_path / "names"), "is a folder")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", ["evil\nline,c", "a,b\x1b[2J", "a,b\u2028c"])
def test_classes_with_a_line_break_or_control_character_are_refused(tmp_path, given):
    manifest = _labelled_manifest(tmp_path)
    done = _pack(manifest, tmp_path / "out", "--classes", given)
    one_line_error(done, "--classes", "control character or a line break")
    assert not (tmp_path / "out").exists()


def test_a_classes_file_with_a_control_character_is_refused(tmp_path: Path):
    manifest = _labelled_manifest(tmp_path)
    names = tmp_path / "names.txt"
    names.write_text("cat\ndo\x0bg\n")  # \x0b: a line break to splitlines(), none to \n
    done = _pack(manifest, tmp_path / "out", "--classes", str(names))
    one_line_error(done, str(names), "control character or a line break")


def test_a_coco_category_named_by_a_lone_surrogate_is_one_line(tmp_path: Path):
    # "\ud800" is valid JSON but no text: it ended the plan in a UnicodeEncodeError.
    src = make_tree(tmp_path / "src", {"train": 1})
    (src / "annotations").mkdir()
    coco = {"images": [{"id": 1, "file_name": "img_000.jpg", "width": 32, "height": 24}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4]}],
            "categories": [{"id": 1, "name": "\ud800"}]}  # fmt: skip
    (src / "annotations" / "instances_train.json").write_text(json.dumps(coco))
    done = _pack(src, tmp_path / "out")
    one_line_error(done, "instances_train.json", "'\\ud800'", "lone surrogate")


def test_a_class_folder_named_in_latin1_is_refused_naming_it(tmp_path: Path):
    # its name went as lone surrogates (\udce9) into the card, croissant.json and datasets'
    # ClassLabel, which the Hub's YAML and JSON readers take as no text
    src = make_tree(tmp_path / "src", {"cat": 1})
    os.rename(src / "cat", os.fsdecode(bytes(src) + b"/caf\xe9"))
    done = _pack(src, tmp_path / "out", "--format", "parquet")
    one_line_error(done, str(src), "'caf\\xe9' is not UTF-8", "rename it in UTF-8")
    assert not (tmp_path / "out").exists()


def test_class_folders_cafe_in_nfc_and_nfd_are_one_class(tmp_path: Path):
    import unicodedata

    nfc, nfd = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
    assert nfc != nfd
    src = make_tree(tmp_path / "src", {nfc: 2, nfd: 1, "tea": 1})
    assert len(list(src.iterdir())) == 3  # two folders that look alike, and tea
    done = _pack(src, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-2000:]
    raw = _index(tmp_path / "out")
    assert raw["classes"] == [nfc, "tea"]
    assert raw["splits"]["train"]["class_counts"] == [3, 1]
    labels = (tmp_path / "out" / "label.labels.txt").read_text(encoding="utf-8").splitlines()
    assert labels == [nfc, "tea"]
    done = _pack(src, tmp_path / "pinned", "--classes", f"tea,{nfd}")  # --classes in NFD too
    assert done.returncode == 0, done.stderr[-2000:]
    raw = _index(tmp_path / "pinned")
    assert raw["classes"] == ["tea", nfc] and raw["splits"]["train"]["class_counts"] == [1, 3]


def test_manifest_labels_with_surrounding_spaces_or_nfd_are_one_class(tmp_path: Path):
    import unicodedata

    src = make_tree(tmp_path / "src", {"a": 4})
    nfd = unicodedata.normalize("NFD", "café")
    rows = ["path,label", "a/img_000.jpg,cat", "a/img_001.jpg, cat", "a/img_002.jpg,cat  ",
            f"a/img_003.jpg,{nfd}"]  # fmt: skip
    (src / "labels.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    done = _pack(src / "labels.csv", tmp_path / "out")
    assert done.returncode == 0, done.stderr[-2000:]
    raw = _index(tmp_path / "out")
    assert raw["classes"] == ["café", "cat"] and raw["splits"]["train"]["class_counts"] == [1, 3]


# The child's address space for the class-count test: a traceback's MemoryError, or gigabytes
# of class names, cannot fit; the refusal needs a fraction.
_CLASS_TEST_MEMORY = 2 * 2**30


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_CLASS_TEST_MEMORY, _CLASS_TEST_MEMORY))


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_one_integer_label_of_100_million_is_refused_by_name(tmp_path: Path, suffix: str):
    from shardpack.sources.classlist import MAX_CLASSES

    src = make_tree(tmp_path / "src", {"a": 2})
    manifest = src / f"labels{suffix}"
    rows = [("a/img_000.jpg", 0), ("a/img_001.jpg", 100_000_000)]
    if suffix == ".csv":
        manifest.write_text("path,label\n" + "".join(f"{p},{n}\n" for p, n in rows))
    else:
        manifest.write_text("".join(json.dumps({"path": p, "label": n}) + "\n" for p, n in rows))
    done = cli("pack", str(manifest), str(tmp_path / "out"), "--workers", "1", "--no-progress",
               preexec_fn=_limit_memory)  # fmt: skip
    one_line_error(done, f"labels{suffix}", "100,000,001 classes", f"{MAX_CLASSES:,}")
    assert not (tmp_path / "out").exists()


def test_a_classes_list_past_the_limit_is_refused_by_name(tmp_path: Path):
    from shardpack.sources.classlist import MAX_CLASSES

    names = tmp_path / "names.txt"
    names.write_text("".join(f"c{i}\n" for i in range(MAX_CLASSES + 1)))
    done = _pack(_labelled_manifest(tmp_path), tmp_path / "out", "--classes", str(names))
    one_line_error(done, str(names), f"{MAX_CLASSES + 1:,} classes")


@pytest.mark.parametrize("header", ["# classes of v2", "  #cat"])
def test_a_classes_file_line_beginning_with_a_hash_is_refused_naming_the_line(tmp_path, header):
    """A comment line at the head of a --classes file was packed as class 0, every label after
    it one off (and no class folder of its name warned of): now it is refused naming the line,
    before OUT is made; in a,b,c, where nothing is a comment, such a name is a class."""
    src = make_tree(tmp_path / "src", {"cat": 1, "dog": 1})
    names = tmp_path / "classes.txt"
    names.write_bytes(f"\ufeffcat\r\n\r\n{header}\r\ndog\r\n".encode())
    done = _pack(src, tmp_path / "out", "--classes", str(names))
    one_line_error(done, f"{names} line 3: '{header.strip()}' begins with '#'", "remove the line")
    assert not (tmp_path / "out").exists()
    done = _pack(src, tmp_path / "out", "--classes", "#x,cat,dog")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _index(tmp_path / "out")["classes"] == ["#x", "cat", "dog"]
