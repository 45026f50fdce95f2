"""The source seam: a source defined here alone, added through register_source, packs, verifies
and reads back through the public API, on forked workers too; one that owns an option checks its
values itself."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest

import shardpack
from shardpack import options as options_module
from shardpack import sources
from shardpack.errors import Option, OptionError, SourceError
from shardpack.options import PackOptions
from shardpack.schema import Schema
from shardpack.sources import NO_FIELDS, Dataset, Item, RecordCost, Source, register_source, source
from shardpack.storage import Storage
from tests.helpers import make_tree, one_line_error, parsed, run_cli

SEEDS = "seeds.txt"  # one "<class> <seed>" line per image; each image is drawn from its seed
SIDE = 8


def _pixels(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)


def _lines(root: Storage) -> list[tuple[str, int]]:
    text = root.read(SEEDS, 1 << 20).decode()
    return [(name, int(seed)) for name, seed in (line.split() for line in text.splitlines())]


class SeededSource(Source):
    """Images drawn from seeds listed in SRC/seeds.txt: records inside one file, like CIFAR's."""

    name = "seeds"
    kinds = ("seeds",)
    described = "seeded images"
    record_cost = RecordCost(SIDE * SIDE * 3, {e: 1e-5 for e in ("keep", "raw", "jpeg", "png")})

    def recognise(self, root: Storage, options: PackOptions) -> Storage | None:
        return root if root.kind() == "dir" and root.kind(SEEDS) == "file" else None

    def scan(
        self, found: Storage, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        lines = _lines(found)
        classes = tuple(sorted({name for name, _ in lines}))
        items = tuple(
            Item(f"{SEEDS}:{i}", classes.index(name), SEEDS, SIDE * SIDE * 3, i, NO_FIELDS)
            for i, (name, _) in enumerate(lines)
        )
        return Dataset("seeds", found, Schema.build(classes), {"train": items})

    def load(self, item: Item, root: Storage, options: PackOptions, cache: dict) -> np.ndarray:
        if SEEDS not in cache:
            cache[SEEDS] = _lines(root)
        return _pixels(cache[SEEDS][item.position][1])

    def item_files(self, items: Iterable[Item]) -> Iterator[str]:
        return iter(())  # seeds.txt is read once a worker

    def default_name(self, dataset: Dataset) -> str:
        return "seeded"


@pytest.fixture
def seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    """SeededSource registered for one test: the registry is restored after it."""
    monkeypatch.setattr(source, "_REGISTRY", dict(source.registered_sources()))
    register_source(SeededSource())


def _src(tmp_path: Path, n: int = 12) -> tuple[Path, list[tuple[str, int]]]:
    lines = [(("cat", "dog")[i % 2], 100 + i) for i in range(n)]
    src = tmp_path / "src"
    src.mkdir()
    (src / SEEDS).write_text("".join(f"{name} {seed}\n" for name, seed in lines))
    return src, lines


@pytest.mark.parametrize("workers", [1, 2])
def test_a_registered_source_packs_verifies_and_reads_back(seeded, tmp_path: Path, workers):
    src, lines = _src(tmp_path)
    out = tmp_path / "out"
    result = shardpack.pack(src, out, PackOptions(workers=workers, shards=2, encode="png"))
    assert result.num_records == len(lines)
    index = json.loads((out / "index.json").read_text())
    assert index["source"] == "seeds"
    assert index["stats"]["workers"] == workers  # 2: the loader ran in forked workers
    assert all(s["file"].startswith("seeded-train.") for s in index["splits"]["train"]["shards"])
    assert shardpack.verify(out, decode=True).ok
    records = {r["key"]: r for r in shardpack.iter_examples(out, decode=True)}
    assert len(records) == len(lines)
    for i, (name, seed) in enumerate(lines):
        record = records[f"{SEEDS}:{i}"]
        assert record["label"] == ("cat", "dog").index(name)
        np.testing.assert_array_equal(record["image"], _pixels(seed))


def test_a_registered_source_is_a_source_choice_with_the_generic_refusals(seeded, tmp_path):
    src, _ = _src(tmp_path)
    assert sources.source_choices() == (
        "auto",
        "folder",
        "cifar",
        "hf",
        "tfds",
        "webdataset",
        "coco",
        "yolo",
        "voc",
        "shardpack",
        "seeds",
    )
    assert sources.scan(src, PackOptions(source="seeds")).kind == "seeds"
    with pytest.raises(SourceError, match="is not seeded images; drop source="):
        sources.scan(tmp_path, PackOptions(source="seeds"))
    with pytest.raises(SourceError, match="path_column= is for a manifest table, and SRC is se"):
        sources.scan(src, PackOptions(path_column="file"))
    with pytest.raises(ValueError, match="registered already"):
        register_source(SeededSource())


def test_an_unregistered_source_is_no_choice(tmp_path: Path):
    src, _ = _src(tmp_path)
    with pytest.raises(shardpack.ShardpackError, match="source= must be one of auto, folder"):
        shardpack.pack(src, tmp_path / "out", PackOptions(source="seeds"))
    assert not (tmp_path / "out").exists()


LIST = "list.txt"  # ListedSource's: whitespace-separated columns a line, a path and a class


class ListedSource(Source):
    """Images listed in SRC/list.txt, the path (relative to SRC) in the column path_column
    numbers and the class in the other: a source's own option, checked by the source alone."""

    name, kinds, described = "listed", ("listed",), "a listed folder"
    own_options = ("path_column",)

    def check_options(self, options: PackOptions) -> None:
        if options.path_column not in (None, "1", "2"):
            raise OptionError(Option("path_column"), f" numbers {LIST}'s column of image paths, "
                              f"1 or 2, got: {options.path_column!r}")  # fmt: skip

    def recognise(self, root: Storage, options: PackOptions) -> Storage | None:
        return root if root.kind() == "dir" and root.kind(LIST) == "file" else None

    def scan(
        self, found: Storage, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        at = int(options.path_column or 1) - 1
        rows = [line.split() for line in found.read(LIST, 1 << 20).decode().splitlines()]
        classes = tuple(sorted({row[1 - at] for row in rows}))
        items = tuple(
            Item(row[at], classes.index(row[1 - at]), row[at], found.size(row[at])) for row in rows
        )
        return Dataset("listed", found, Schema.build(classes), {"train": items})


def test_a_source_s_own_option_is_checked_by_the_source_with_no_edit_elsewhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """ListedSource owns path_column and checks its values (Source.check_options): once a scan
    has found it, before its scan, for the library and the CLI alike (which says the flag); the
    manifest, which owns path_column too, keeps its own sense of the option."""
    monkeypatch.setattr(source, "_REGISTRY", dict(source.registered_sources()))
    register_source(ListedSource())
    src = make_tree(tmp_path / "src", {"cat": 1, "dog": 1})
    (src / LIST).write_text("cat cat/img_000.jpg\ndog dog/img_000.jpg\n")
    dataset = sources.scan(src, PackOptions(path_column="2"))
    assert (dataset.kind, dataset.classes) == ("listed", ("cat", "dog"))
    assert [item.key for item in dataset.splits["train"]] == ["cat/img_000.jpg", "dog/img_000.jpg"]
    with pytest.raises(OptionError) as caught:
        sources.scan(src, PackOptions(path_column="3"))
    assert caught.value.options == ("path_column",)
    assert (
        str(caught.value)
        == "path_column= numbers list.txt's column of image paths, 1 or 2, got: '3'"
    )
    out = tmp_path / "out"
    with pytest.raises(OptionError, match="path_column= numbers"):
        shardpack.pack(src, out, PackOptions(path_column="file"))
    assert not out.exists()
    one_line_error(run_cli("pack", str(src), str(out), "--path-column", "3"),
                   "error: --path-column numbers list.txt's column of image paths")  # fmt: skip
    table = tmp_path / "list.csv"  # a manifest's path_column is a column's name, as before
    table.write_text("file,label\nsrc/cat/img_000.jpg,cat\n")
    assert sources.scan(table, PackOptions(path_column="file")).kind == "manifest"


SELVES = ("self", "options")  # what PackOptions' checks call the options they check


def test_packoptions_checks_no_option_a_source_owns():
    """What a source owns (own_options) its check_options checks: no check of PackOptions
    (__post_init__, its _check_ helpers) reads one, by attribute or by name."""
    owned = {name for each in sources.registered_sources().values() for name in each.own_options}
    tree = parsed(Path(options_module.__file__))
    checks = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and (node.name == "__post_init__" or node.name.startswith("_check"))]  # fmt: skip
    read = set()
    for node in (inner for check in checks for inner in ast.walk(check)):
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) in SELVES:
            read.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            read.add(node.value)  # getattr(self, "retries"), Option("retries")
    assert {"seed", "quality", "max_side", "min_side"} <= read  # the walk finds the checks
    assert {"path_column", "retries", "split_names", "box_columns"} <= owned
    assert not read & owned, f"check these in their sources' check_options: {read & owned}"
