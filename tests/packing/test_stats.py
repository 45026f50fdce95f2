"""packing/stats.py: the summaries index.json keeps of each split's records."""

from __future__ import annotations

import numpy as np
import pytest

from shardpack.errors import ImageError
from shardpack.options import PackOptions
from shardpack.packing.masks import check_size
from shardpack.packing.packer import pack
from shardpack.packing.stats import entry_summaries, reason_kind, reasons_of
from tests import helpers


@pytest.mark.parametrize("count", [1, 2, 5, 6, 1001])
def test_a_summary_s_medians_are_numpy_s_of_odd_and_even_counts(count):
    """Each spread's median is np.median's (the middle value, or the mean of the two middle
    ones), for sizes and for the aspect ratios they make."""
    rng = np.random.default_rng(count)
    width, height = rng.integers(1, 4000, count), rng.integers(1, 4000, count)
    size, stored = rng.integers(100, 10**7, count), rng.integers(100, 10**6, count)
    entry = {"keys": [str(i) for i in range(count)], "size": size, "width": width,
             "height": height, "stored": stored, "tally": [], "reasons": []}  # fmt: skip
    summary = entry_summaries({"train": [entry]}, {}, {})["train"]
    wanted = {"width": width, "height": height, "bytes": size, "aspect": width / height,
              "stored_bytes": stored}  # fmt: skip
    assert summary["bytes"]["total"] == int(size.sum())
    assert summary["stored_bytes"]["total"] == int(stored.sum())
    for name, values in wanted.items():
        median = float(np.median(values.astype(np.float64)))
        assert summary[name]["median"] == pytest.approx(median, abs=1e-4), name


def test_what_some_records_of_a_split_did_not_note_is_left_out_or_counted_not_noted():
    """A split of an older shardpack's entry (sides 0, no tally: contentsfile._filled) and a
    noted one: no width, height, aspect ratio nor size grid (they were figures over zeros, a
    median of 0 where most records were old), the bytes of all; formats, channels and
    orientations count the old records as not noted. A split of noted records keeps them."""
    old = {"keys": ["a", "b", "c"], "size": [10, 20, 30], "width": [0] * 3, "height": [0] * 3,
           "stored": [0] * 3, "tally": [], "reasons": []}  # fmt: skip
    new = {"keys": ["d"], "size": [40], "width": [8], "height": [4], "stored": [5],
           "tally": [["channels", "3", 1], ["format", "png", 1]], "reasons": []}  # fmt: skip
    summaries = entry_summaries({"train": [old, new], "test": [new]}, {}, {})
    train, test = summaries["train"], summaries["test"]
    assert train["records"] == 4 and train["bytes"]["total"] == 100
    sizes = {"width", "height", "aspect", "aspect_histogram", "size_histogram", "stored_bytes"}
    assert not sizes & train.keys()
    assert train["formats"] == {"(not noted)": 3, "png": 1}
    assert train["channels"] == {"(not noted)": 3, "3": 1}
    assert train["orientations"] == {"(not noted)": 3}
    assert sizes <= test.keys() and test["width"]["min"] == 8 and test["aspect"]["max"] == 2
    assert test["formats"] == {"png": 1} and "orientations" not in test


def _size_reason(file: str, annotated: tuple, orientation: int | None) -> str:
    """The reason check_size gives an image of 30x40 as displayed, its annotations in `file`."""
    with pytest.raises(ImageError) as caught:
        check_size("img.jpg", annotated, (40, 30), orientation, file)
    return caught.value.reason


def test_a_reason_kind_does_not_name_the_file_or_the_line_it_came_from():
    """Reasons that name an annotation file (VOC's XML, YOLO's label file, the annotated size)
    are counted under one kind whatever the file, so a summary stays a few counts; the kind
    says what is wrong, not where."""
    for orientation, annotated in ((6, (30, 40)), (None, (50, 50))):
        kinds = {
            reason_kind(_size_reason(f"VOC2012/Annotations/{name}.xml", annotated, orientation))
            for name in ("2008_000001", "b")
        }
        assert len(kinds) == 1 and "Annotations" not in kinds.pop()
    bad = [
        f"VOC2012/Annotations/{n}.xml object {i} ({c}): <bndbox/xmax> is {v!r}, not a "
        "number; fix it"
        for n, i, c, v in (("a", 0, "dog", "x"), ("b", 3, "cat", "1:5"))
    ]
    assert {reason_kind(r) for r in bad} == {"<bndbox/xmax> is '...', not a number; fix it"}
    lines = [f"labels/{s}/{n}.txt line {i}: class 7 is not one of data.yaml's 3 classes"
             for s, n, i in (("train", "a", 2), ("val", "b", 40))]  # fmt: skip
    assert {reason_kind(r) for r in lines} == {"class N is not one of data.yaml's N classes"}
    assert reason_kind("corrupt JPEG: premature end") == "corrupt JPEG"
    kind = "N bytes, over the limit of N bytes, the most an image of --max-pixels can take"
    large = {reason_kind(f"{n:,} bytes, over the limit of 1,000 bytes, the most an image of "
                         "--max-pixels can take: raise it") for n in (1001, 8 << 30)}  # fmt: skip
    assert large == {kind}


def test_a_manifest_s_skips_are_counted_by_what_is_wrong_not_by_its_file_and_line(tmp_path):
    """A JSONL manifest's missing image and repeated row were both counted as 'm.jsonl line
    N' (by reason: m.jsonl line N 2), its file and line taken for the kind: a path without a
    slash, and a Parquet file's rows, slipped past what strips a place."""
    for i in range(2):
        helpers.write_image(tmp_path / "imgs" / f"{i}.png", helpers.image(i))
    rows = [{"path": f"imgs/{name}.png"} for name in ("0", "1", "gone", "1", "lost")]
    result = pack(helpers.write_jsonl(tmp_path / "m.jsonl", rows), tmp_path / "out",
                  PackOptions(workers=1))  # fmt: skip
    assert result.to_json()["skip_reasons"] == {"No such file or directory": 2,
                                                "the same image as line N": 1}  # fmt: skip
    parquet = ["data/train-00000-of-00002.parquet row 7: holds no image", "b.parquet row 0: "
               "holds no image", "my list.csv line 3: holds no image"]  # fmt: skip
    assert reasons_of(parquet) == {"holds no image": 3}
