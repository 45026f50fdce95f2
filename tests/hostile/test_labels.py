"""Hostile names in what know-your-data draws and writes: class names and columns with `$`,
quotes, YAML's own signs, characters YAML refuses, 100,000 characters; the report draws them
and the README card's YAML header parses back to them (with PyYAML, as the Hub reads it)."""

from __future__ import annotations

import html
import json
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shardpack.cli import app
from shardpack.sources.classlist import class_name
from tests.helpers import image, write_image

runner = CliRunner()

# Always in the set: the issue's own (a formula for matplotlib, what YAML refuses, a name
# that took 7 s to draw), then a seeded draw of the rest.
ALWAYS = ["$^$", "cat\ufffe", "x" * 100_000]
NASTY = ["$x$", "\\", "\\$", '"', "'", "a: b", "- a", "#c", "&a", "*a", "!!str", "|", ">",
         "%x", "@x", "`x", "{a}", "[a]", "\uffff", "é😀", "<b>x</b>", "null", "true", "1e3",
         "~", "? q", "_under", "\ufeffbom", "a\u00a0b", "\U0010fffd", "\u202eevil", "\ud7ff",
         "a\\nb", "y" * 5000]  # fmt: skip
# Column names: what YAML refuses even quoted (DEL, a C1 control, a noncharacter), a formula.
COLUMNS = ["note\x7fx", "c1\x9f", "$^$ col", "k: v"]


def _random_names(rng: np.random.Generator, count: int) -> list[str]:
    """Strings of code points from all of Unicode but surrogates and what a class name may
    not hold (control characters, line and paragraph separators)."""
    names = []
    while len(names) < count:
        points = rng.integers(0x20, 0x110000, rng.integers(1, 12))
        text = "".join(chr(p) for p in points if not 0xD800 <= p <= 0xDFFF)
        if text and all(unicodedata.category(c) not in ("Cc", "Zl", "Zp") for c in text):
            names.append(text)
    return names


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[Path, list[str]]:
    """A JSONL manifest: one image per hostile class name, every row with COLUMNS."""
    rng = np.random.default_rng(34)
    names = [*ALWAYS, *rng.choice(NASTY, 10, replace=False).tolist(), *_random_names(rng, 4)]
    classes = list(dict.fromkeys(class_name(n) for n in names))  # as the dataset keeps them
    root = tmp_path_factory.mktemp("labels") / "src"
    rows = []
    for i, name in enumerate(classes):
        write_image(root / f"{i}.jpg", image(i, 16, 16))
        rows.append({"image": f"{i}.jpg", "label": name, **{c: f"{c}{i}" for c in COLUMNS}})
    (root / "labels.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    out = root.parent / "out"
    result = runner.invoke(app, ["pack", str(root / "labels.jsonl"), str(out), "--no-progress",
                                 "--format", "parquet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((out / "index.json").read_text())["classes"] == sorted(classes)
    return out, sorted(classes)


def test_the_card_header_parses_back_to_every_name(packed: tuple[Path, list[str]]) -> None:
    """PyYAML (as the Hub) refused the header with a column `note\\x7fx` or a class
    `cat\\ufffe`; every name is quoted or escaped so that it parses back to itself, and
    croissant.json and `datasets` (through the card) give each name back."""
    yaml = pytest.importorskip("yaml")
    out, classes = packed
    front = yaml.safe_load((out / "README.md").read_text("utf-8").split("---\n")[1])
    features = {f["name"]: f for f in front["dataset_info"]["features"]}
    assert set(COLUMNS) <= set(features)
    assert features["label"]["dtype"]["class_label"]["names"] == dict(
        (str(i), c) for i, c in enumerate(classes)
    )
    (files,) = [c["path"] for c in front["configs"][0]["data_files"]]
    assert {p.name for pattern in files for p in out.glob(pattern)} == {
        s["file"] for s in json.loads((out / "index.json").read_text())["splits"]["train"]["shards"]
    }
    (listed,) = [r["data"] for r in json.loads((out / "croissant.json").read_text())["recordSet"]
                 if r["@id"] == "classes-label"]  # fmt: skip
    assert [r["classes-label/name"] for r in listed] == classes
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(str(out))["train"]  # the card's features, as the Hub reads
    assert loaded.features["label"].names == classes
    assert sorted(loaded["label"]) == list(range(len(classes)))  # a row per class


def test_the_report_draws_every_name_quickly(packed: tuple[Path, list[str]], tmp_path) -> None:
    """A class `$^$` was a matplotlib mathtext traceback and no report; a 100,000-character
    name cost 7 s of CPU to lay out. Labels drawn are escaped and shortened; the tables keep
    each whole name."""
    pytest.importorskip("matplotlib.pyplot")  # imported before the clock starts
    out, classes = packed
    start = time.process_time()
    result = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "card.html")])
    assert result.exit_code == 0, result.output
    assert time.process_time() - start < 3  # ~0.5 s; five such names took 17 s
    page = (tmp_path / "card.html").read_text("utf-8", "surrogateescape")
    assert "Traceback" not in page
    for name in classes:
        assert f"data-class='{html.escape(name)}'" in page
