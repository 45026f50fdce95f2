"""Hugging Face datasets that lie: a card naming files outside SRC, globs `datasets` reads
otherwise, YAML aliases that expand to millions of patterns, folders nested past any walk, a
NUL in a row's image path, a file rewritten after the scan, rows naming image files it does not
hold. Each is built for real (pyarrow writes the Parquet, `datasets` where its own reading is
the reference) and ends in one line or a skip with its reason."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import shardpack
from shardpack.errors import SourceError
from shardpack.options import PackOptions
from shardpack.sources import scan
from shardpack.sources.hflayout import data_files
from shardpack.storage import storage_at
from tests.helpers import jpeg, one_line_error, run_cli

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CLASSES = ["cat", "dog"]


def write_hf(path: Path, labels: list[int], paths: list[str | None] | None = None,
             images: list[bytes | None] | None = None,
             names: list[str] = CLASSES) -> Path:  # fmt: skip
    """A Parquet file as `datasets` writes one: an Image column (struct<bytes, path>) and a
    ClassLabel `label`, its features in the schema's huggingface metadata."""
    images = images if images is not None else [jpeg(i) for i in range(len(labels))]
    paths = paths if paths is not None else [f"img{i}.jpg" for i in range(len(labels))]
    image = pa.StructArray.from_arrays(
        [pa.array(images, pa.binary()), pa.array(paths, pa.string())], ["bytes", "path"]
    )
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": names}}
    table = pa.table({"image": image, "label": pa.array(labels, pa.int64())})
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features":
                                                                       features}})})  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def card(src: Path, data_files_yaml: str) -> Path:
    """SRC/README.md with a default config whose data_files are the YAML given."""
    src.mkdir(parents=True, exist_ok=True)
    (src / "README.md").write_text(
        f"---\nconfigs:\n- config_name: default\n  data_files: {data_files_yaml}\n---\n# Card\n"
    )
    return src


def refused(src: Path, *words: str, source: str = "hf") -> str:
    """Scanning SRC as `source` is refused in one line holding every word; returns it."""
    with pytest.raises(SourceError) as error:
        scan(src, PackOptions(source=source))
    message = str(error.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


# ---- 1: data files outside SRC ---------------------------------------------------------------


def test_a_card_naming_parquet_outside_src_is_refused_by_name(tmp_path):
    elsewhere = write_hf(tmp_path / "elsewhere/x.parquet", [0, 1, 0])
    src = card(tmp_path / "src", f"'{elsewhere.parent}/*.parquet'")
    write_hf(src / "data/train-00000-of-00001.parquet", [1])
    refused(src, "README.md: data_files pattern", f"'{elsewhere.parent}/*.parquet'",
            "outside the dataset's folder")  # fmt: skip
    for pattern in (f"file://{elsewhere}", "../elsewhere/x.parquet"):
        card(src, f"'{pattern}'")
        refused(src, "README.md: data_files pattern", "outside" if ":" in pattern else "climbs")


# ---- 14: datasets' glob semantics -------------------------------------------------------------


def test_card_patterns_match_the_files_datasets_resolves(tmp_path):
    """Each pattern resolves to the files `datasets` itself resolves (its resolve_pattern): a
    `*` stays within a folder, `**` spans folders, hidden and `__` folders are left out unless
    the pattern names them."""
    resolve_pattern = pytest.importorskip("datasets.data_files").resolve_pattern
    src = tmp_path / "src"
    for name in ("data/a.parquet", "data/b-1.parquet", "data/other/c.parquet",
                 "data/other/deep/d.parquet", "data/.hidden/e.parquet", "data/__x__/f.parquet",
                 "top.parquet", "data/[x].parquet"):  # fmt: skip
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(b"")  # layout only: nothing here opens them
    patterns = ["data/*.parquet", "data/*", "data/**/*.parquet", "data/**", "**/*.parquet",
                "*.parquet", "data/?-1.parquet", "data/[ab]*.parquet", "data/[!a]*.parquet",
                "data/*/*.parquet", "data/.hidden/*.parquet", "data/__x__/*.parquet",
                "data/a.parquet", "data/**/deep/*.parquet"]  # fmt: skip
    for pattern in patterns:
        card(src, json.dumps(pattern))
        ours = (data_files(storage_at(src), required=True) or {}).get("train", [])
        theirs = [Path(p).relative_to(src).as_posix() for p in resolve_pattern(pattern, str(src))]
        assert sorted(ours) == sorted(theirs), pattern


def test_without_a_card_hidden_files_are_left_out_as_datasets_leaves_them(tmp_path):
    """macOS leaves an AppleDouble `._x.parquet` beside each file it copies to a disk of
    another kind: `data/._train-00000-of-00001.parquet` was refused as split '._train', and a
    `._x.parquet` in SRC read as a (broken) Parquet file; datasets leaves both out."""
    data_files_module = pytest.importorskip("datasets.data_files")
    for layout in (["data/train-00000-of-00001.parquet", "data/test-00000-of-00001.parquet"],
                   ["x.parquet"], ["train/x.parquet"]):  # fmt: skip
        src = tmp_path / layout[0].replace("/", "_")
        for name in layout:
            write_hf(src / name, [0, 1])
            ghost = (src / name).with_name(f"._{(src / name).name}")
            ghost.write_bytes(b"\x00\x05\x16\x07Mac OS X" + bytes(100))
        patterns = data_files_module.get_data_patterns(str(src))
        theirs = data_files_module.DataFilesDict.from_patterns(patterns, str(src))
        theirs = {str(s): sorted(Path(p).relative_to(src).as_posix() for p in files)
                  for s, files in theirs.items()}  # fmt: skip
        assert data_files(storage_at(src), required=True) == theirs, layout
        assert len(scan(src).splits) == len(theirs)


def test_a_card_glob_packs_the_rows_load_dataset_reads(tmp_path):
    datasets = pytest.importorskip("datasets")
    src = card(tmp_path / "src", "data/*.parquet")
    write_hf(src / "data/a.parquet", [0, 1])
    write_hf(src / "data/other/b.parquet", [1, 1, 0, 0])
    loaded = datasets.load_dataset(str(src), split="train")
    dataset = scan(src, PackOptions(source="hf"))
    assert len(dataset.splits["train"]) == loaded.num_rows == 2


# ---- 13: YAML aliases -------------------------------------------------------------------------


def test_a_card_of_yaml_aliases_is_refused_quickly(tmp_path):
    """A 15 KB card whose aliases expand to 400,000 patterns: refused in a moment (each
    pattern walked the folder again: it ran for minutes)."""
    src = tmp_path / "src"
    write_hf(src / "data/train-00000-of-00001.parquet", [0, 1])
    patterns = ", ".join(f"data/t{i}*.parquet" for i in range(200))
    entries = ", ".join(["*e"] * 2000)
    src.joinpath("README.md").write_text(
        f"---\npatterns: &p [{patterns}]\nentry: &e {{split: train, path: *p}}\nconfigs:\n"
        f"- config_name: default\n  data_files: [{entries}]\n---\n"
    )
    assert src.joinpath("README.md").stat().st_size < 16 << 10
    start = time.perf_counter()
    refused(src, "README.md: its configs expand to over 100,000 values", "YAML aliases")
    assert time.perf_counter() - start < 5


def test_many_wildcard_patterns_are_refused(tmp_path):
    src = tmp_path / "src"
    write_hf(src / "data/train-00000-of-00001.parquet", [0, 1])
    card(src, json.dumps([f"data/t{i}*.parquet" for i in range(1001)]))
    refused(src, "README.md: its configs hold 1,001 wildcard patterns (over 1,000)")


# ---- 20: a NUL in a row's path; folders nested past any walk ----------------------------------


def test_a_nul_in_a_rows_image_path_skips_that_row(tmp_path):
    src = tmp_path / "src"
    write_hf(src / "data/train-00000-of-00001.parquet", [0, 1, 0],
             paths=["a.jpg", "b\0.jpg", "c.jpg"], images=[jpeg(1), None, jpeg(2)])  # fmt: skip
    done = run_cli("pack", str(src), str(tmp_path / "out"), "--workers", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    index = json.loads((tmp_path / "out/index.json").read_text())
    (skip,) = index["skipped"]
    assert skip["key"] == "data/train-00000-of-00001.parquet:1"
    assert "only the path 'b\\x00.jpg', which is not a file under SRC" in skip["reason"]


def test_folders_nested_1100_deep_where_a_card_looks_are_one_line(tmp_path):
    """A '**' walked them a frame a folder: RecursionError."""
    src = card(tmp_path / "src", "'data/**/*.parquet'")
    write_hf(src / "data/train-00000-of-00001.parquet", [0, 1])
    bottom = _nest(src / "data", 1100)
    try:
        done = run_cli("pack", str(src), str(tmp_path / "out"), "--source", "hf")
        one_line_error(done, f"{src / 'data'}: holds folders nested over 64 deep",
                       "README.md's data_files patterns look")  # fmt: skip
        card(src, "'data/*.parquet'")  # a pattern that does not reach them
        assert len(scan(src, PackOptions(source="hf")).splits["train"]) == 2
    finally:
        _unnest(bottom, 1100)


def _nest(folder: Path, depth: int) -> int:
    """folder/x/x/.../x, `depth` deep, made a level at a time through descriptors (a path of
    1,100 parts costs a lookup a part); returns the deepest one's descriptor."""
    fd = os.open(folder, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("x", dir_fd=fd)
        below = os.open("x", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = below
    return fd


def _unnest(fd: int, depth: int) -> None:
    """Remove what _nest made, from its deepest folder up (rmtree recurses a frame a level)."""
    for _ in range(depth):
        above = os.open("..", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        os.rmdir("x", dir_fd=above)
        fd = above
    os.close(fd)


# ---- 8: rows holding an image's path, not its bytes ------------------------------------------


def test_rows_naming_image_files_say_what_to_do_and_root_finds_them(tmp_path, monkeypatch):
    """`datasets` keeps the path it was given until the bytes are embedded (push_to_hub does,
    to_parquet does not): each way the skip reason gives works."""
    datasets = pytest.importorskip("datasets")
    from datasets import ClassLabel, Features, Image

    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        (photos / f"p{i}.jpg").write_bytes(jpeg(i))
    features = Features({"image": Image(), "label": ClassLabel(names=CLASSES)})
    monkeypatch.chdir(photos)  # relative paths, as datasets was given them
    ds = datasets.Dataset.from_dict({"image": [f"p{i}.jpg" for i in range(3)],
                                     "label": [0, 1, 0]}, features=features)  # fmt: skip
    src = tmp_path / "src"
    ds.to_parquet(str(src / "data/train-00000-of-00001.parquet"))
    monkeypatch.chdir(tmp_path)
    done = run_cli("pack", str(src), str(tmp_path / "out"), "--workers", "1", "--no-progress")
    line = one_line_error(
        done,
        "no image was packed",
        "3 items skipped",
        "holds no image bytes, only the path 'p0.jpg' (SRC/p0.jpg: cannot read",
        "embed_table_storage",
        "place them at that path under SRC",
        "--root",
    )
    assert not (tmp_path / "out/index.json").exists(), line
    done = run_cli("pack", str(src), str(tmp_path / "out"), "--workers", "1", "--no-progress",
                   "--root", str(photos))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = list(shardpack.iter_examples(tmp_path / "out", "train"))
    assert sorted(r["image"] for r in records) == sorted(jpeg(i) for i in range(3))
    from datasets.table import embed_table_storage

    monkeypatch.chdir(photos)
    pq.write_table(embed_table_storage(ds.data.table), src / "data/train-00000-of-00001.parquet")
    monkeypatch.chdir(tmp_path)
    done = run_cli("pack", str(src), str(tmp_path / "out2"), "--workers", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(shardpack.iter_examples(tmp_path / "out2", "train"))) == 3


def test_rows_naming_absolute_paths_say_the_root_that_reads_them(tmp_path):
    """`datasets` keeps a path as it was given, most often absolute (a list of files built in
    a script): --root of a folder above them reads them; the skip reason names one."""
    photos = tmp_path / "photos" / "cats"
    photos.mkdir(parents=True)
    for i in range(3):
        (photos / f"p{i}.jpg").write_bytes(jpeg(i))
    src = tmp_path / "src"
    write_hf(src / "data/train-00000-of-00001.parquet", [0, 1, 0], images=[None] * 3,
             paths=[f"{photos}/p{i}.jpg" for i in range(3)])  # fmt: skip
    out = tmp_path / "out"
    done = run_cli("pack", str(src), str(out), "--workers", "1", "--no-progress")
    one_line_error(done, f"only the path '{photos}/p0.jpg', which is not a file under SRC",
                   f"pass --root with a folder it is under: --root {photos})")  # fmt: skip
    for root in (photos, tmp_path):  # its own folder, or any above it
        done = run_cli("pack", str(src), str(out), "--workers", "1", "--no-progress",
                       "--root", str(root), "--overwrite")  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        records = list(shardpack.iter_examples(out, "train"))
        assert sorted(r["image"] for r in records) == sorted(jpeg(i) for i in range(3))
        assert sorted(r["key"] for r in records) == [f"data/train-00000-of-00001.parquet:{i}"
                                                     for i in range(3)]  # fmt: skip
    elsewhere = tmp_path / "elsewhere"  # a folder they are not under: still said
    elsewhere.mkdir()
    done = run_cli("pack", str(src), str(tmp_path / "out2"), "--workers", "1", "--no-progress",
                   "--root", str(elsewhere))  # fmt: skip
    one_line_error(done, "which is not a file under --root", f"--root {photos})")


# ---- 11: a Parquet file rewritten after the scan ----------------------------------------------


def test_a_file_rewritten_after_the_scan_is_refused_by_name(tmp_path):
    """The rows rewritten in reverse order between the scan and a worker's read: each record got
    another row's image under its own label. Now the worker's load stops the run, naming the
    file (a SourceError: one line, as every refusal)."""
    src = tmp_path / "src"
    labels = [0, 1, 1, 0, 1, 0]
    file = write_hf(src / "data/train-00000-of-00001.parquet", labels)
    options = PackOptions(shuffle=False)
    dataset = scan(src, options)
    items = dataset.splits["train"]
    table = pq.read_table(file)
    pq.write_table(table.take(list(range(len(labels)))[::-1]), file)
    with pytest.raises(SourceError) as error:
        dataset.source.load(items[0], dataset.root, options, {})
    assert str(error.value) == (
        f"{file}: changed since the scan (its size or modification time differs), so its rows "
        "may no longer be those listed; pack again"
    )
    dataset = scan(src, options)  # scanned again: each record its own row's image and label
    cache: dict = {}
    items = dataset.splits["train"]
    loaded = [dataset.source.load(item, dataset.root, options, cache) for item in items]
    assert loaded == [jpeg(i) for i in range(len(labels))][::-1]
    assert [item.label for item in items] == labels[::-1]


# ---- issue 33, 7: without pyarrow, auto-detection says what --source hf says -------------------

# `import pyarrow` fails in this child, as where it is not installed; then SRC is packed into
# OUT-auto and OUT-hf with those --source values, and each refusal printed, a line each.
_WITHOUT_PYARROW = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pyarrow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Missing())
import shardpack
from shardpack.errors import ShardpackError

for source in ("auto", "hf"):
    try:
        shardpack.pack(sys.argv[1], f"{sys.argv[2]}-{source}", shardpack.PackOptions(source=source))
    except ShardpackError as e:
        print(e)
"""


def test_without_pyarrow_a_hub_folder_says_it_needs_pyarrow_as_source_hf_does(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "src"
    write_hf(src / "data/train-00000-of-00001.parquet", [0, 1])
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PYARROW, str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    auto, hf = done.stdout.splitlines()
    assert auto == hf and "reading Parquet needs pyarrow: pip install '.[parquet]'" in auto


# ---- 24: what a Parquet file holds decoded, at any moment ---------------------------------------


def test_row_groups_each_under_the_limit_stay_under_a_gib_decoded_together(tmp_path):
    """Two row groups of 0.6 GiB decoded each (one 100,000-character caption, referenced 6,000
    times a group; 10 KB on disk) passed the 1 GiB a row group and the 4 GiB a file, and were
    decoded whole (1.3 GB peak; three groups of 0.9 GiB ended in "not a readable Parquet file
    ()" under test_hostile_src's 3 GiB address space). Now a file's limit is 1 GiB: the second
    group is refused before it decodes, and the first decodes a slice at a time."""
    from tests.helpers import make_tree
    from tests.hostile.test_parquet import _one_caption_everywhere
    from tests.hostile.test_src import _pack, _refused

    src = make_tree(tmp_path / "src", {"a": 1})
    manifest = _one_caption_everywhere(src / "captions.parquet", 2, True, rows=6_000)
    assert manifest.stat().st_size < 64 << 10
    run = _pack(tmp_path, manifest)
    _refused(run, "captions.parquet: row groups 0 to 1 decode to 1.1 GiB (over the 1 GiB limit "
             "for one file, held in memory whole)")  # fmt: skip
    assert run.peak_mib < 1024, run.peak_mib


# ---- round 8: a ClassLabel naming one class twice ----------------------------------------------


def test_a_classlabel_naming_a_class_twice_is_refused_as_datasets_refuses_it(tmp_path):
    """`datasets` refuses the file ('Some label names are duplicated'); it was packed as classes
    cat, dog, cat. Without --source hf, the refusal of a Hub folder's bad ClassLabel was passed
    over (the class folders then said 'no images found', the file as SRC was read as a
    manifest): a file with an image column is a Hugging Face file, and is told what is wrong."""
    src = tmp_path / "src"
    file = write_hf(
        src / "data/train-00000-of-00001.parquet", [0, 1, 2], names=["cat", "dog", "cat"]
    )
    for where, source in ((src, "hf"), (src, "auto"), (file, "auto")):
        refused(where, f"{file}, column 'label': two classes are named 'cat'", source=source)
    write_hf(file, [0, 1], names=["cat", "dog\x1c"])
    refused(
        src, "column 'label': the class name 'dog\\x1c' holds a control character", source="auto"
    )


def test_huggingface_metadata_whose_info_is_no_object_is_read_as_none(tmp_path):
    """{"info": []} ended pack in a traceback (AttributeError: 'list' object has no attribute
    'get'); metadata of another shape is read as no features, as a document that is no object
    already was: the image column is still found by its type."""
    file = write_hf(tmp_path / "data/train-00000-of-00001.parquet", [0, 1])
    table = pq.read_table(file)
    for info in ([], "x", None, 3):
        meta = {"huggingface": json.dumps({"info": info})}
        pq.write_table(table.replace_schema_metadata(meta), file)
        for source in ("hf", "auto"):
            dataset = scan(tmp_path, PackOptions(source=source))
            assert dataset.kind == "hf" and len(dataset.splits["train"]) == 2


def test_a_classlabel_column_of_floats_or_text_is_refused_by_name(tmp_path):
    """A ClassLabel `label` stored as doubles (pandas' type for integers with a gap) ended the
    pack in a worker's traceback (TypeError: list indices must be integers or slices, not
    float); as strings it said 'not a readable Parquet file'."""
    file = write_hf(tmp_path / "x.parquet", [0, 1])
    table = pq.read_table(file)
    for values, arrow in (([0.0, 1.0], "double"), (["cat", "dog"], "string")):
        column = table.schema.get_field_index("label")
        pq.write_table(table.set_column(column, "label", pa.array(values)), file)
        done = run_cli("pack", str(file), str(tmp_path / "out"), "--workers", "1")
        one_line_error(done, f"{file}: column 'label' is a ClassLabel of Arrow type {arrow}, "
                       "not of integers; cast it")  # fmt: skip


def test_a_hub_cache_snapshot_of_links_says_how_to_pack_it_with_or_without_source_hf(tmp_path):
    """A Hub cache's snapshot (snapshot_download's folder) holds links into blobs/: without
    --source hf the refusal was passed over and the class folders said 'no images found;
    expected SRC/<class>/<image>'. Links are not followed (a manifest's are not either); both
    ways say so, and how to copy the folder with them resolved."""
    blob = write_hf(tmp_path / "cache/blobs/0123abcd", [0, 1])
    src = tmp_path / "cache/snapshots/main"
    (src / "data").mkdir(parents=True)
    (src / "data/train-00000-of-00001.parquet").symlink_to("../../../blobs/0123abcd")
    for source in ("hf", "auto"):
        refused(src, "train-00000-of-00001.parquet: is a symbolic link", "cp -rL",
                source=source)  # fmt: skip
    (src / "data/train-00000-of-00001.parquet").unlink()
    (src / "data/train-00000-of-00001.parquet").write_bytes(blob.read_bytes())  # as cp -rL
    assert len(scan(src).splits["train"]) == 2
