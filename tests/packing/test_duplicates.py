"""Know your data: exact copies found while packing, --dedup exact, statistics, the data card."""

from __future__ import annotations

import html
import importlib.util
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

from shardpack import PackOptions
from shardpack.cli import app
from shardpack.packing import duplicates
from shardpack.packing.contents import copy_numbers
from shardpack.packing.fresh import FreshPack
from shardpack.packing.packeditems import packed_plan
from shardpack.packing.plan import make_plan
from shardpack.packing.worker import write_shard
from shardpack.read.stream import iter_examples
from shardpack.schema import Schema
from shardpack.sources import Dataset, Item, scan, source_root
from shardpack.storage import storage_at
from tests.helpers import bytes_read, image, shard_files, write_image

runner = CliRunner()

# The planted copies: (copy, original), paths under SRC.
COPIES = {
    "train/dog/copy_a.jpg": "train/cat/img_000.jpg",  # within train
    "test/dog/copy_b.jpg": "train/dog/img_001.jpg",  # test's copy of a train image
    "train/cat/copy_c.jpg": "test/cat/img_000.jpg",  # a group of three across both splits
    "train/cat/copy_d.jpg": "test/cat/img_000.jpg",
}


def _src(root: Path) -> Path:
    """A split tree of distinct real JPEGs and PNGs with COPIES planted among them."""
    seed = 0
    for split, count in (("train", 6), ("test", 3)):
        for cls in ("cat", "dog"):
            for i in range(count):
                ext = ".png" if i == 2 else ".jpg"
                write_image(root / split / cls / f"img_{i:03d}{ext}", image(seed, 40, 56))
                seed += 1
    for copy, original in COPIES.items():
        shutil.copyfile(root / original, root / copy)
    return root


def _pack(src: Path, out: Path, *args: str) -> dict:
    result = runner.invoke(app, ["pack", str(src), str(out), "--no-progress", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _keys(out: Path, split: str) -> set[str]:
    return {r["key"] for r in iter_examples(out, split)}


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return _src(tmp_path_factory.mktemp("knowdata") / "src")


def test_exact_copies_are_reported_and_kept(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = _pack(src, out, "--workers", "2", "--shards", "2")
    assert summary["records"] == 18 + len(COPIES) and summary["skipped"] == 0
    dup = summary["duplicates"]
    assert (dup["groups"], dup["images"], dup["copies"], dup["removed"]) == (3, 7, 4, 0)
    across = {(a["split"], a["also_in"]): a["images"] for a in dup["across_splits"]}
    assert across == {("test", "train"): 2, ("train", "test"): 3}
    index = json.loads((out / "index.json").read_text())
    listed = sorted(map(sorted, index["duplicates"]["listed"]))
    keys = {path: _key(out, path) for path in (*COPIES, *COPIES.values())}  # test/dog/x.jpg
    assert listed == sorted([
        sorted([keys["train/cat/img_000.jpg"], keys["train/dog/copy_a.jpg"]]),
        sorted([keys["train/dog/img_001.jpg"], keys["test/dog/copy_b.jpg"]]),
        sorted([keys["test/cat/img_000.jpg"], keys["train/cat/copy_c.jpg"],
                keys["train/cat/copy_d.jpg"]]),
    ])  # fmt: skip
    # every group lists the copy --dedup would keep first: the test split's, else the first key
    firsts = {group[0] for group in index["duplicates"]["listed"]}
    assert keys["test/cat/img_000.jpg"] in firsts and keys["test/dog/copy_b.jpg"] in firsts

    text = runner.invoke(app, ["pack", str(src), str(tmp_path / "o2"), "--no-progress"])
    assert "4 duplicate copies of 3 images (same bytes)" in text.output
    assert "2 images of test are also in train" in text.output


def _key(out: Path, path: str) -> str:
    """The record key pack gave the file at `path` under SRC."""
    split = path.split("/")[0]
    (key,) = (k for k in _keys(out, split) if k.endswith(path.split("/", 1)[1]))
    return key


def test_dedup_exact_keeps_the_evaluation_copy(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = _pack(src, out, "--dedup", "exact", "--workers", "2")
    assert summary["records"] == 18 and summary["skipped"] == 4
    assert summary["duplicates"]["removed"] == 4
    test, train = _keys(out, "test"), _keys(out, "train")
    assert any(k.endswith("dog/copy_b.jpg") for k in test)  # test's copy stays
    assert any(k.endswith("cat/img_000.jpg") for k in test)
    assert not any(k.endswith(("copy_a.jpg", "copy_c.jpg", "copy_d.jpg")) for k in train)
    assert any(k.endswith("cat/img_000.jpg") for k in train)  # the first key of the group
    assert not any(k.endswith("dog/img_001.jpg") for k in train)
    # every distinct image is there once
    assert len(test) + len(train) == 18
    index = json.loads((out / "index.json").read_text())
    reasons = {s["key"]: s["reason"] for s in index["skipped"]}
    (copy_b,) = (k for k in test if k.endswith("copy_b.jpg"))
    (img_001,) = (k for k in reasons if k.endswith("dog/img_001.jpg"))
    assert reasons[img_001] == f"duplicate of {copy_b}"
    assert all(r.startswith("duplicate of ") for r in reasons.values())


def test_dedup_is_part_of_the_plan_and_resume_keeps_the_facts(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _pack(src, out, "--shards", "2")
    size = json.loads((out / "index.json").read_text())["image_size"]
    again = _pack(src, out, "--shards", "2", "--resume")
    assert again["shards_kept"] == 4  # every shard kept: the journal brought their facts back
    assert json.loads((out / "index.json").read_text())["image_size"] == size == [40, 56]
    assert again["duplicates"] == first["duplicates"]
    result = runner.invoke(app, ["pack", str(src), str(out), "--dedup", "exact", "--no-progress"])
    assert result.exit_code == 2  # another plan
    assert "--dedup exact (the journal's: --dedup none)" in result.output
    deduped, again = tmp_path / "deduped", tmp_path / "again"
    first = _pack(src, deduped, "--shards", "2", "--dedup", "exact", "--workers", "2")
    resumed = _pack(src, deduped, "--shards", "2", "--dedup", "exact", "--resume")
    assert resumed["shards_kept"] == 4 and resumed["duplicates"] == first["duplicates"]
    _pack(src, again, "--shards", "2", "--dedup", "exact", "--workers", "1")
    assert shard_files(deduped) == shard_files(again)  # the same copies kept, the same bytes


def test_the_packing_process_reads_no_copy_again(src: Path, tmp_path: Path) -> None:
    """The workers' notes alone confirm the copies: with every copy's file gone once the
    shards are written, the merge still finds each group, as a pack of the whole SRC does."""
    tree, out = shutil.copytree(src, tmp_path / "src"), tmp_path / "out"
    steps = FreshPack(source_root(str(tree)), storage_at(str(out)), PackOptions(shards=2), None)
    steps.open()
    planned = steps.plan()
    dataset = planned.dataset
    results = [write_shard(spec, planned.options, dataset.root, steps.out, dataset.schema,
                           dataset.source) for spec in planned.plan.shards]  # fmt: skip
    for path in {*COPIES, *COPIES.values()}:
        (tree / path).unlink()
    steps.merge(planned, results)
    found = json.loads((out / "index.json").read_text())["duplicates"]
    whole = _pack(src, tmp_path / "whole", "--shards", "2")["duplicates"]
    assert (found["groups"], found["images"], found["copies"]) == (3, 7, 4)
    assert sorted(found["listed"]) == sorted(whole["listed"])


def test_distinct_images_have_no_duplicates(tmp_path: Path) -> None:
    for i in range(6):
        write_image(tmp_path / "src" / "a" / f"{i}.png", image(i))
    summary = _pack(tmp_path / "src", tmp_path / "out", "--dedup", "exact")
    assert summary["records"] == 6 and summary["duplicates"]["groups"] == 0


def test_split_summaries_match_the_records(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _pack(src, out, "--dedup", "exact", "--shards", "2")
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    (bad / "train" / "cat" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really")
    index = json.loads((out / "index.json").read_text())
    for split in ("train", "test"):
        records = list(iter_examples(out, split))
        summary = index["summaries"][split]
        sizes = sorted(len(r["image"]) for r in records)  # --encode keep: the source's bytes
        assert summary["records"] == len(records)
        assert summary["bytes"] == {
            "min": sizes[0],
            "median": _median(sizes),
            "max": sizes[-1],
            "total": sum(sizes),
        }
        assert summary["stored_bytes"] == summary["bytes"]  # passed through as they came
        assert summary["width"]["median"] == 56 and summary["height"]["max"] == 40
        formats = {}
        for r in records:
            formats[r["format"]] = formats.get(r["format"], 0) + 1
        assert summary["formats"] == formats
        assert sum(summary["bytes_histogram"]["counts"]) == len(records)
        assert summary["size_histogram"]["counts"] == [[len(records)]]
    assert index["summaries"]["train"]["skipped"] == {"duplicate": 4}
    assert "skipped" not in index["summaries"]["test"]

    result = runner.invoke(app, ["inspect", str(out), "--json"])
    described = json.loads(result.stdout)
    assert described["summaries"] == index["summaries"]
    assert described["duplicates"]["removed"] == 4
    text = runner.invoke(app, ["inspect", str(out)]).output
    assert "images: 56x40 median" in text and "skipped: duplicate 4" in text
    assert "2 images of test were also in train before --dedup" in text  # no more in the pack
    assert "\nskipped 4 items at pack time\n" in text  # items, as pack says: not all are files

    summary = _pack(bad, tmp_path / "out2")
    assert summary["skipped"] == 1
    index = json.loads((tmp_path / "out2" / "index.json").read_text())
    assert index["summaries"]["train"]["skipped"] == {"truncated JPEG": 1}


def _median(values: list[int]) -> float:
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


class _Marked(HTMLParser):
    """The text of each element marked data-value, by (the data-split or data-class of the
    nearest element around it that has one, its data-value)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str | None, str | None]] = []
        self.values: dict[tuple[str | None, str], str] = {}
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        where = attrs.get("data-split") or attrs.get("data-class")
        if where is None and self.stack:
            where = self.stack[-1][1]
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        else:
            self.stack.append((tag, where, attrs.get("data-value")))

    def handle_endtag(self, tag: str) -> None:
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1][2] is not None:
            _, where, name = self.stack[-1]
            self.values[where, name] = self.values.get((where, name), "") + data


def _browser(page: Path, tmp_path: Path, screenshot: bool = True) -> tuple[str, Path]:
    """The DOM headless Chromium built from the page, and a screenshot of it (a Chromium start
    of its own: seconds of CPU, taken only where asked)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("needs Debian's chromium (make install-test installs it with apt)")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    # 1200 pixels wide: the dump's own window too (it inherited the screenshot's window size
    # through the profile)
    flags.append("--window-size=1200,3000")
    shot = tmp_path / "shot.png"
    if screenshot:
        run = subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()],
                             capture_output=True, timeout=180)  # fmt: skip
        assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=180)  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout, shot


@pytest.mark.slow  # a browser's start-up: seconds
def test_report_in_a_real_browser(src: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    _pack(src, out, "--shards", "2")
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    page = out / "report.html"
    text = page.read_text()
    assert "<script" not in text and "<link" not in text  # self-contained: nothing fetched
    assert not re.search(r"url\([^#]|src=.http|href=.http", text)
    dom, shot = _browser(page, tmp_path)
    marked = _Marked()
    marked.feed(dom)
    values = {key: value.replace(",", "") for key, value in marked.values.items()}
    index = json.loads((out / "index.json").read_text())
    for split, entry in index["splits"].items():
        assert values[split, "records"] == str(entry["num_records"])
        assert values[split, "shards"] == str(len(entry["shards"]))
        assert values[split, "bytes"] == str(sum(s["num_bytes"] for s in entry["shards"]))
        for cls, count in zip(index["classes"], entry["class_counts"], strict=True):
            assert values[cls, f"class:{split}"] == str(count)
        summary = index["summaries"][split]
        for what in ("width", "height", "bytes"):
            for stat in ("min", "median", "max"):
                assert float(values[split, f"{what}:{stat}"]) == summary[what][stat]
    dup = index["duplicates"]
    for what in ("groups", "images", "copies", "removed"):
        assert values[None, f"dup:{what}"] == str(dup[what])
    assert values[None, "leak:test:train"] == "2" and values[None, "leak:train:test"] == "3"
    assert values[None, "skipped"] == "0"
    thumbs = [s for s in marked.images if s.startswith("data:image/jpeg;base64,")]
    assert len(thumbs) == len(marked.images) == 2 * 8 + dup["images"]  # sheets, every copy
    assert dom.count("<svg") >= 4  # class balance, each split's images, shard sizes
    pixels = cv2.imread(str(shot))
    assert pixels.shape[:2] == (3000, 1200)
    assert (pixels < 200).any(axis=2).mean() > 0.02  # charts and thumbnails, not a blank page


# Run in the page by _laid_out: where each class's count cell and each thumbnail's caption
# ends, in CSS pixels, and the text a reader sees of the class balance table.
_MEASURE = """<script>
const right = (e) => Math.round(e.getBoundingClientRect().right);
const cells = [...document.querySelectorAll("td[data-value^='class:']")].map(right);
const captions = [...document.querySelectorAll("figcaption")].map(right);
const names = [...document.querySelectorAll("tr[data-class] td:first-child")].map(
  (e) => e.textContent);
const out = document.createElement("pre");
out.id = "measured";
out.textContent = JSON.stringify({width: innerWidth, cells, captions, names});
document.body.append(out);
</script>"""


def _laid_out(page: Path, tmp_path: Path) -> dict:
    """What headless Chromium measures of the page laid out 1200 pixels wide (_MEASURE)."""
    measured = tmp_path / "measured.html"
    measured.write_text(page.read_text("utf-8").replace("</body>", _MEASURE + "</body>"))
    dom, _ = _browser(measured, tmp_path, screenshot=False)
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(html.unescape(found[1]))


@pytest.mark.slow  # a browser's start-up: seconds
def test_the_report_shows_hostile_class_names_as_the_terminal_does(tmp_path: Path) -> None:
    """A 200-character class name widened the class balance table past the page, so that no
    class's counts could be seen without scrolling sideways (and each of its thumbnails took
    a line of its own); a class `\u202eevil` (a right-to-left override) was shown as `live`,
    and turned the rest of each record name after it backwards (`gnp.0_gmi`). Long names
    wrap; control and format characters are shown escaped, as inspect prints them."""
    pytest.importorskip("matplotlib")
    long, override = "x" * 200, "\u202eevil"
    src = tmp_path / "src"
    for i, cls in enumerate(("cat", long, override)):
        for split in ("train", "test"):
            write_image(src / split / cls / f"img_{i}.png", image(i + (split == "test") * 9))
    out = tmp_path / "out"
    _pack(src, out)
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    seen = _laid_out(out / "report.html", tmp_path)
    assert len(seen["cells"]) == 6 and len(seen["captions"]) == 6
    assert max(seen["cells"] + seen["captions"]) <= seen["width"], seen
    assert sorted(seen["names"]) == sorted(["cat", long, "\\u202eevil"])


def test_hub_dataset_card(src: Path, tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    out = tmp_path / "out"
    _pack(src, out, "--shards", "2", "--format", "webdataset")
    text = (out / "README.md").read_text()
    front = yaml.safe_load(text.split("---\n")[1])
    index = json.loads((out / "index.json").read_text())
    info = front["dataset_info"]
    assert "features" not in info  # a tar's columns are its samples' (jpg, cls, json)
    # no Arrow bytes to give as num_bytes, which `datasets` needs beside num_examples
    assert "splits" not in info and "dataset_size" not in info
    shards = [s for entry in index["splits"].values() for s in entry["shards"]]
    assert info["download_size"] == sum(s["num_bytes"] for s in shards)
    for split, entry in index["splits"].items():
        (files,) = [c["path"] for c in front["configs"][0]["data_files"] if c["split"] == split]
        matched = {p.name for pattern in files for p in out.glob(pattern)}
        assert matched == {s["file"] for s in entry["shards"]}
    assert "2 images of test are also in train." in text
    _pack(src, out, "--shards", "2", "--format", "webdataset", "--resume")  # ours: rewritten


def _one_copy_across(tmp_path: Path) -> Path:
    """A split tree of two train images, one of them copied into test."""
    src = tmp_path / "src"
    write_image(src / "train" / "cat" / "a.png", image(0))
    write_image(src / "train" / "cat" / "b.png", image(1))
    (src / "test" / "cat").mkdir(parents=True)
    shutil.copyfile(src / "train" / "cat" / "a.png", src / "test" / "cat" / "a.png")
    return src


def test_the_hub_card_counts_one_copy_in_the_singular(tmp_path: Path) -> None:
    """One image of train copied into test: the card said '1 copies of 1 images' and '1
    images of train are also in test', where pack's summary says 'image ... is'."""
    src, out = _one_copy_across(tmp_path), tmp_path / "out"
    result = runner.invoke(app, ["pack", str(src), str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    text = (out / "README.md").read_text("utf-8")
    assert "Exact duplicates: 1 copy of 1 image (0 removed).\n" in text
    assert "1 image of test is also in train.\n1 image of train is also in test." in text


@pytest.mark.parametrize("ours", [False, True])
def test_a_users_readme_is_kept_with_the_card_added(src: Path, tmp_path: Path, ours: bool):
    out = tmp_path / "out"
    if ours:  # an output of ours, where the user then wrote a README.md of their own
        _pack(src, out)
    out.mkdir(exist_ok=True)
    (out / "README.md").write_text("---\nlicense: mit  # ours\n---\n# my notes\n")
    for args in ((), ("--overwrite",)):
        _pack(src, out, *args)
        text = (out / "README.md").read_text()
        assert "\nlicense: mit  # ours\ndataset_info:\n" in text
        assert "\n---\n# my notes\n\n<!-- shardpack: begin" in text
        assert text.count("# my notes") == text.count("<!-- shardpack: begin") == 1


def test_a_journals_facts_are_read_as_untrusted(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _pack(src, out, "--shards", "2")
    journal = out / ".shardpack.journal"
    head, *entries = journal.read_text().splitlines()
    bad = [json.loads(line) for line in entries]
    bad[0]["content"] = "not base64!"  # dropped: its shard is written again
    bad[1]["content"] = "AAAA"  # base64 of the wrong length: kept, its records noted as nothing
    bad[2]["tally"] = [["format", "jpeg", "many"]]
    # naming more records that lost boxes (for one reason) than the shard holds
    bad[3]["tally"] = [["boxes_dropped_in", f"outside the image: k{i}", 1]
                       for i in range(bad[3]["num_records"] + 1)]  # fmt: skip
    journal.write_text("\n".join([head, *map(json.dumps, bad)]) + "\n")
    again = _pack(src, out, "--shards", "2", "--resume")
    assert again["shards_kept"] == 1  # the one with a readable content and tally
    assert again["records"] == first["records"]
    assert again["duplicates"]["groups"] <= first["duplicates"]["groups"]


def test_report_and_inspect_take_a_crafted_index_without_a_traceback(
    src: Path, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    _pack(src, out)
    index = json.loads((out / "index.json").read_text())
    index["summaries"] = {"train": {"width": "wide", "size_histogram": [1]}, "<b>": 3}
    index["duplicates"] = {"groups": 1, "images": 2, "copies": 1, "removed": 0,
                           "across_splits": [7], "listed": [["<img src=x>", 5], "x"]}  # fmt: skip
    (out / "index.json").write_text(json.dumps(index))
    result = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "card.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "card.html").read_text()
    assert "<img src=x>" not in page and "&lt;img src=x&gt;" in page
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0
    index["summaries"], index["duplicates"] = ["a list"], "a string"
    (out / "index.json").write_text(json.dumps(index))
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0
    assert runner.invoke(app, ["report", str(out)]).exit_code == 0
    for shard in out.glob("*.tfrecord-*"):  # damaged shards: refused in one line, not a card
        shard.write_bytes(shard.read_bytes()[:100])  # drawn over them (read/test_report.py)
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "Traceback" not in result.output and "lists every damaged shard" in result.stderr


@pytest.fixture(scope="module")
def many(src: Path, tmp_path_factory) -> tuple[Path, dict, Path, dict]:
    """SRC with 11 more copies (13 groups, one across two classes: two cats, then a dog)
    packed as it is (with its report) and with --dedup exact: (each OUT, its pack summary)."""
    root = tmp_path_factory.mktemp("many")
    shutil.copytree(src, root / "src")
    originals = [f"{c}/img_00{i}.{'png' if i == 2 else 'jpg'}" for c in ("cat", "dog")
                 for i in (2, 3, 4, 5)] + ["cat/img_001.jpg", "dog/img_000.jpg"]  # fmt: skip
    for original in originals:
        shutil.copyfile(root / "src" / "train" / original,
                        root / "src" / "test" / original.replace("img", "again"))  # fmt: skip
    train = root / "src" / "train" / "cat"  # a cat copy_a's group keeps, before copy_a (a dog)
    shutil.copyfile(train / "img_000.jpg", train / "again_000.jpg")
    plain, deduped = root / "plain", root / "deduped"
    found, removed = _pack(root / "src", plain), _pack(root / "src", deduped, "--dedup", "exact")
    if importlib.util.find_spec("matplotlib"):
        assert runner.invoke(app, ["report", str(plain)]).exit_code == 0
    return plain, found, deduped, removed


def test_duplicates_name_records_as_readers_see_them(many: tuple) -> None:
    """A split tree's keys hold the split's folder (test/dog/copy_b.jpg): the listed groups,
    the skip reasons and the report's thumbnails named them test/test/dog/copy_b.jpg."""
    plain, _, deduped, _ = many
    index = json.loads((deduped / "index.json").read_text())
    keys = _keys(deduped, "train") | _keys(deduped, "test") | {s["key"] for s in index["skipped"]}
    listed = [name for group in index["duplicates"]["listed"] for name in group]
    assert listed and set(listed) <= keys
    kept = {s["reason"].removeprefix("duplicate of ").split(", whose labels differ")[0]
            for s in index["skipped"]}  # fmt: skip
    assert kept <= keys
    pytest.importorskip("matplotlib")
    page = (plain / "report.html").read_text()
    assert "(not in the shards)" not in page.split("id='duplicates'")[1].split("</section>")[0]


def test_a_copy_filed_under_two_classes_is_a_label_conflict(many: tuple) -> None:
    """COPIES' copy_a is train/cat/img_000.jpg filed under dog: 'a duplicate copy' before, and
    --dedup exact dropped one of the two labels without a word. Its group's first two copies
    are cats (the one kept, then img_000): the warning named those two, which agree; now
    the kept one and the dog, in the summary (found in the shards) and with --dedup, which
    said it 'keeps the first copy's' as if it had not run: now what it did."""
    plain, found, deduped, removed = many
    done = {
        id(found): "--dedup exact keeps the first copy's and skips the others'",
        id(removed): "--dedup exact kept the first copy's and skipped the others'",
    }
    for summary in (found, removed):
        dup = summary["duplicates"]
        assert dup["label_conflicts"] == 1
        (group,) = dup["conflicts_listed"]
        kept, other = "train/cat/again_000.jpg", "train/dog/copy_a.jpg"
        assert group == [kept, other, "train/cat/img_000.jpg"]
        (warning,) = [w for w in summary["warnings"] if w.startswith("label conflict")]
        assert "1 group of copies is labelled differently: another class" in warning
        assert f"(e.g. {kept} and {other})" in warning
        # the flag as it is passed: a bare --dedup is a usage error (it takes a value)
        assert f"; fix the labels: {done[id(summary)]} (index.json's" in warning
    text = runner.invoke(app, ["inspect", str(deduped)]).output
    assert "1 group of copies labelled differently (label conflicts)" in text
    card = (deduped / "README.md").read_text()
    assert "1 group of copies is labelled differently (label conflicts" in card
    pytest.importorskip("matplotlib")
    marked = _Marked()
    marked.feed((plain / "report.html").read_text())
    assert marked.values[None, "dup:label conflicts"] == "1"


def test_the_report_says_what_it_shows(many: tuple) -> None:
    """Thumbnails of the first 12 groups of 13, said so; each class's examples from both
    splits; sizes' medians formatted (48,409.5, not 48409.5)."""
    pytest.importorskip("matplotlib")
    plain = many[0]
    page = (plain / "report.html").read_text()
    marked = _Marked()
    marked.feed(page)
    index = json.loads((plain / "index.json").read_text())
    assert index["duplicates"]["groups"] == 13
    assert marked.values[None, "dup:shown"].startswith("The first 12 of 13 groups")
    sheets = page.split("id='classes'")[1]
    for cls in ("cat", "dog"):
        sheet = sheets.split(f"<h3>{cls}</h3>")[1].split("</div>")[0]
        captions = re.findall(r"<figcaption>([^<]*)</figcaption>", sheet)
        assert {c.split("/")[0] for c in captions} == {"train", "test"}, captions
    for split in ("train", "test"):
        median = marked.values[split, "bytes:median"]
        assert re.fullmatch(r"\d{1,3}(,\d{3})+(\.5)?", median), median
        assert float(median.replace(",", "")) == index["summaries"][split]["bytes"]["median"]
        for what in ("bytes", "stored_bytes"):
            total = marked.values[split, f"{what}:total"].replace(",", "")
            assert int(total) == index["summaries"][split][what]["total"]


def test_the_report_finds_the_copies_an_earlier_index_names(many: tuple, tmp_path: Path) -> None:
    """An index from before names every copy <split>/<key> (test/test/dog/copy_b.jpg): its
    report still draws each; it noted no stored bytes nor totals: the card says them unknown.
    Its test split as a grow over the first contents.json leaves it (no sizes, aspect ratios
    nor size grid: test_grow) is still drawn, those figures said unknown."""
    pytest.importorskip("matplotlib")
    out = Path(shutil.copytree(many[0], tmp_path / "out"))
    index = json.loads((out / "index.json").read_text())
    listed = index["duplicates"]["listed"]
    index["duplicates"]["listed"] = [[f"{n.split('/')[0]}/{n}" for n in g] for g in listed]
    for summary in index["summaries"].values():
        del summary["stored_bytes"], summary["stored_bytes_histogram"], summary["bytes"]["total"]
    for what in ("width", "height", "aspect", "aspect_histogram", "size_histogram"):
        del index["summaries"]["test"][what]
    (out / "index.json").write_text(json.dumps(index))
    assert runner.invoke(app, ["report", str(out)]).exit_code == 0
    page = (out / "report.html").read_text()
    section = page.split("id='duplicates'")[1]
    assert "test/test/dog/copy_b.jpg" in section
    assert "(not in the shards)" not in section.split("</section>")[0]
    marked = _Marked()
    marked.feed(page)
    for split in ("train", "test"):
        assert marked.values[split, "stored_bytes"].startswith("unknown")
        assert marked.values[split, "bytes:median"]  # the rest of the split's images drawn
    for what in ("width", "height", "aspect"):
        assert marked.values["test", what].startswith("unknown")
        assert marked.values["train", f"{what}:median"]


# Keys whose order the sort by their UTF-8 bytes must keep (lone surrogates: a name that is
# not UTF-8), and keys it cannot take: keys alike but for trailing NULs (numpy's bytes drop
# them), a key so long that fixed-width bytes would cost more than the strings.
_ODD_KEYS = {
    "plain": (),
    "unicode": ("é", "z", "\U0001f600", "\uffff", "\udcff", "\ud7ff", "\ue000"),
    "nul": (),
    "wide": ("x" * 500,),
}


def _odd_key(split: str, i: int, odd: str) -> str:
    if odd == "nul":
        return f"{split}/k{i % 7}" + "\x00" * (i // 7)
    extra = _ODD_KEYS[odd][i % 9] if i % 9 < len(_ODD_KEYS[odd]) else ""
    return f"{split}/c{i % 3}/{i:04d}{extra}.jpg"


@pytest.mark.parametrize("odd", _ODD_KEYS)
def test_copies_by_plan_position_are_the_groups_of_their_members(tmp_path: Path, odd) -> None:
    # The packing process held each copy found in the shards as a (split, key, label) tuple
    # (200,000 copies of ten images: ~27 MB); by plan position it holds 8 bytes a copy, and
    # must say what the tuples said: the order, the summary and the copy numbers.
    rng = random.Random(0)
    splits = {}
    for split, count in (("train", 300), ("val", 40), ("test", 60)):
        keys = [_odd_key(split, i, odd) for i in range(count)]
        rng.shuffle(keys)  # a listing need not be in key order (a manifest's rows)
        splits[split] = tuple(Item(key, i % 3 if i % 7 else None, key, 100)
                              for i, key in enumerate(keys))  # fmt: skip
    dataset = Dataset("folder", storage_at(tmp_path), Schema.build(("a", "b", "c")), splits)
    options = PackOptions(shards=5)
    plan = make_plan(dataset, "d", options, 2)
    entries = [(spec.split, item) for spec in plan.shards for item in spec.items]
    chosen = rng.sample(range(len(entries)), 250)
    cuts = sorted(rng.sample(range(1, 125), 60))
    sets = [np.array(chosen[a:b]) for a, b in itertools.pairwise([0, *cuts, 125])]
    sets += [np.array(chosen[125 + 2 * i : 127 + 2 * i]) for i in range(60)]  # pairs
    found = duplicates.PlanCopies.of(packed_plan(plan, dataset)[0], sets)
    members = [[(entries[p][0], entries[p][1].key, entries[p][1].label) for p in s.tolist()]
               for s in sets]  # fmt: skip
    expected = duplicates._ordered(members)
    held = [[(entries[p][0], entries[p][1].key, entries[p][1].label)
             for p in found.positions[a:b].tolist()]
            for a, b in itertools.pairwise(found.starts.tolist())]  # fmt: skip
    assert held == expected
    summary = duplicates.summary(found, 0, options)
    assert summary == duplicates.summary(expected, 0, options)
    assert summary["label_conflicts"] and summary["across_splits"]  # what the test can tell
    number = copy_numbers(expected)
    assert found.numbers().tolist() == [number.get(item.key, 0) for _, item in entries]
    assert duplicates.summary(duplicates.PlanCopies.of(plan, []), 0, options) == (
        duplicates.summary([], 0, options)
    )


def test_dedup_stamps_each_file_by_its_read_and_stats_none(tmp_path: Path, monkeypatch):
    """--dedup's pass over a folder takes each file's stamp from its read's own fstat, as the
    workers do (it stat'ed every file before reading it: 2-5 us a file), and a copy it leaves
    out is noted with its file's mtime still, for a grow to know it unread."""
    src = _src(tmp_path / "src")
    for path in src.rglob("*.*"):
        os.utime(path, ns=(time.time_ns() - 3600 * 10**9,) * 2)  # settled: stamps.RACY_NS
    dataset = scan(str(src))
    stat, looked = os.stat, []

    def counted(path, *args, **kwargs):
        looked.append(os.fspath(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted)
    _, _, noted = duplicates.dedup(dataset, PackOptions(dedup="exact"), 2)
    monkeypatch.undo()
    assert not [p for p in looked if p.endswith((".jpg", ".png"))]
    assert len(noted.dropped) == 4
    for _, key, *_, mtime in noted.dropped:
        assert mtime == (src / key).stat().st_mtime_ns, key


def test_leaks_dedup_removed_are_told_as_src_held_them_not_as_the_pack_holds_them(
    tmp_path: Path,
) -> None:
    """After --dedup exact the summary, inspect, the Hub card and the report still said '1 image
    of test is also in train', untrue of the pack (train's copy was not packed), and the card
    published it as a leak of the dataset."""
    src, out = _one_copy_across(tmp_path), tmp_path / "out"
    result = runner.invoke(app, ["pack", str(src), str(out), "--no-progress", "--dedup", "exact"])
    assert result.exit_code == 0, result.output
    told = "1 image of test was also in train before --dedup\n  1 image of train was also in test"
    assert told in result.output
    assert told in runner.invoke(app, ["inspect", str(out)]).output
    card = (out / "README.md").read_text("utf-8")
    assert "1 image of test was also in train before deduplication.\n" in card
    assert "is also in" not in card
    assert runner.invoke(app, ["report", str(out), "--no-progress"]).exit_code == 0
    assert "<h3>Leaks across splits before deduplication</h3>" in (out / "report.html").read_text()


def test_a_parquet_row_group_is_read_once_a_thread_not_once_a_chunk_of_its_rows(
    tmp_path: Path,
) -> None:
    """--dedup exact of a Hub Parquet file in one row group (as `datasets` writes a small one)
    read the whole group again for each HASH_CHUNK of its rows: 22,000 rows took 9.2 s, a
    fresh pack without --dedup 2.2 s. Bytes read counted by the kernel (/proc/self/io)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 10 * duplicates.HASH_CHUNK
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    images = [{"bytes": cv2.imencode(".png", image(i % 251, 8, 8))[1].tobytes(), "path": None}
              for i in range(rows)]  # fmt: skip
    (tmp_path / "data").mkdir()
    file = tmp_path / "data" / "train-00000-of-00001.parquet"
    table = pa.table({"image": pa.array(images, struct), "label": [i % 3 for i in range(rows)]})
    pq.write_table(table, file, row_group_size=rows)
    options = PackOptions(dedup="exact")
    dataset = scan(str(tmp_path), options)
    entries = [(split, item) for split, items in dataset.splits.items() for item in items]

    before = bytes_read()
    keys = duplicates.content_keys(entries, dataset, options, 1)
    assert bytes_read() - before < 4 * file.stat().st_size  # 20x before
    assert len({key.digest for key in keys}) == len({i["bytes"] for i in images})
