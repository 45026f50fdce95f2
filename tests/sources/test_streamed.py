"""A list of many Parquet/JSONL files packed with --no-shuffle or --shuffle-window streams: the
scan counts rows and types columns, holding none; each shard is a range of one file that its
worker reads and converts; every row lands once, in the same bytes at any worker count."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardpack import PackOptions, iter_examples, pack
from shardpack.errors import ImageError, OptionError, OutputError, SourceError
from shardpack.packing.fresh import _scan_and_plan
from shardpack.packing.worker import write_shard
from shardpack.sources import scan
from shardpack.sources.streamed import BAD_ROW, RowRange, StreamedRows
from shardpack.storage import storage_at
from shardpack.storage.imageroot import NOT_WEB
from shardpack.storage.urlspool import UrlSpool
from tests import helpers
from tests.storage.test_fetch import serving

# Three files of six rows: Parquet in row groups of 4 (a range crosses a group), then JSONL
# with a bad line (not JSON), a blank line (no row) and a URL the server has lost (404).
GONE = 16


def _planned(src, options):
    """The fresh pack's scan and plan of a list (no --dedup: nothing fetched is kept, and no
    pass asks for its workers)."""
    return _scan_and_plan(src, options, None, UrlSpool(tempfile.gettempdir()), lambda *_: 1)


def _paths() -> list[list[str]]:
    return [[f"/img/{i}.png" for i in range(start, start + 6)] for start in (0, 6, 12)]


def _write_list(folder: Path, url) -> list[str]:
    """The list's files in `folder`; the key (URL, or the bad line's name) of each row."""
    folder.mkdir()
    files = _paths()
    keys = []
    for number, paths in enumerate(files[:2]):
        urls = [url(p) for p in paths]
        table = pa.table({"url": urls, "caption": [f"photo {p}" for p in paths]})
        pq.write_table(table, folder / f"part-{number}.parquet", row_group_size=4)
        keys += urls
    lines = []
    for i, path in enumerate(files[2]):
        path = f"/gone/{GONE}.png" if i == GONE - 12 else path
        if i == 2:
            lines.append("{not json\n")
            keys.append("part-2.jsonl line 3")
        lines.append(json.dumps({"url": url(path), "caption": f"photo {path}"}) + "\n")
        keys.append(url(path))
        if i == 4:
            lines.append("\n")
    (folder / "part-2.jsonl").write_text("".join(lines[:-1]))  # the last row's line
    keys.pop()  # (the resume test's file grows by it)
    return keys


@pytest.fixture(scope="module")
def listed(tmp_path_factory):
    """(the site, the list's folder, its rows' keys in order, OUT of a --no-shuffle pack on
    one worker)."""
    root = tmp_path_factory.mktemp("streamed")
    with serving() as site:
        keys = _write_list(root / "lists", site.url)
        done = helpers.run_cli("pack", str(root / "lists"), str(root / "none-1"), *_JOB,
                               "--no-shuffle", "--workers", "1")  # fmt: skip
        assert done.returncode == 0, done.stderr
        yield site, root / "lists", keys, root / "none-1", done.stdout


_JOB = (
    "--path-column",
    "url",
    "--allow-private-urls",
    "--shards",
    "6",
    "--retries",
    "0",
    "--url-threads",
    "4",
)


def _options(**given) -> PackOptions:
    return PackOptions(**{"path_column": "url", "allow_private_urls": True, "shards": 6,
                          "retries": 0, "url_threads": 4, **given})  # fmt: skip


def _keys(out: Path) -> list[str]:
    return [example["key"] for example in iter_examples(out)]


def test_no_shuffle_streams_every_row_once_in_the_lists_order(listed):
    site, _, keys, out, stdout = listed
    good = [k for k in keys if "/img/" in k]
    assert _keys(out) == good  # the files' order, and each row's within its file
    index = json.loads((out / "index.json").read_text())
    assert index["shuffle"] == "none" and index["seed"] is None
    assert "order: none, as listed" in stdout
    assert [s["num_records"] for s in index["splits"]["train"]["shards"]] == [3, 3, 3, 3, 2, 2]
    assert not (out / "contents.json").exists()  # no list of every key is held
    bad = {s["key"]: s["reason"] for s in index["skipped"]}["part-2.jsonl line 3"]
    assert bad.startswith("not valid JSON")  # its file and line, as a file read whole says it
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert [(f["url"], f["file"], f["row"], f["status"]) for f in failures] == [
        (None, "part-2.jsonl", 3, None),  # the bad line, as a list read whole has it
        (site.url(f"/gone/{GONE}.png"), "part-2.jsonl", 6, 404),  # its line, as an editor counts
    ]


def test_a_brace_pattern_of_list_files_is_one_list_in_its_own_order(listed, tmp_path):
    """`lists/part-{0..1}.parquet`, the brace pattern webdataset names tars with, was taken for
    tars: 'part-0.parquet: is not a tar file'. It names the list's files in its own order
    (braceexpand's), streamed as a folder of them is; a name it makes that is no file there
    is one line."""
    _, lists, keys, _, _ = listed
    for pattern, rows in [("{0..1}", keys[:12]), ("{1,0}", keys[6:12] + keys[:6])]:
        out = tmp_path / pattern
        done = helpers.run_cli("pack", f"{lists}/part-{pattern}.parquet", str(out), *_JOB,
                               "--no-shuffle")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert _keys(out) == rows
    missing = helpers.run_cli("pack", f"{lists}/part-{{0..3}}.parquet", str(tmp_path / "x"),
                              *_JOB, "--no-shuffle")  # fmt: skip
    helpers.one_line_error(missing, "part-{0..3}.parquet: names part-2.parquet, which is not a "
                           f"file in {lists}; check the pattern")  # fmt: skip


def test_row_groups_far_past_a_shard_are_warned_of_under_the_window_shuffle(tmp_path):
    """A list written with pyarrow's default row groups (1M rows) under --shuffle-window: each
    shard of 1,024 rows reads its whole row group, the list read ~1,000 times over, and nothing
    said so. The plan warns, naming the file and the row group size to write; groups of about
    a shard's rows, or --no-shuffle, are not warned of."""
    from shardpack.packing.rangeplan import GROUP_SHARDS

    for name, group in (("big", 8 * GROUP_SHARDS), ("small", 8)):
        (tmp_path / name).mkdir()
        for part in range(2):
            urls = [f"http://127.0.0.1:9/{part}/{i}.jpg" for i in range(8 * GROUP_SHARDS)]
            pq.write_table(pa.table({"url": urls}), tmp_path / name / f"part-{part}.parquet",
                           row_group_size=group)  # fmt: skip
    options = {"shards": None, "shard_size": 8 * 128 * 1024}  # 8 rows a shard
    warned = _planned(storage_at(str(tmp_path / "big")), _options(shuffle_window=True, **options))
    said = f"part-0.parquet: a row group of {8 * GROUP_SHARDS:,} rows, {GROUP_SHARDS} times a "
    assert [w for w in warned[3].warnings if said in w and "row_group_size=8)" in w], warned[3]
    for src, given in (("small", {"shuffle_window": True}), ("big", {"shuffle": False})):
        plan = _planned(storage_at(str(tmp_path / src)), _options(**given, **options))[3]
        assert not [w for w in plan.warnings if "row group" in w], (src, plan.warnings)


def test_a_list_file_of_no_row_names_its_first_bad_line(tmp_path):
    """Every line bad (a trailing comma in each object): it said 'holds no rows; add one row
    per image', as of an empty file."""
    (tmp_path / "lists").mkdir()
    for name in ("a", "b"):
        (tmp_path / "lists" / f"{name}.jsonl").write_text('{"url": "http://x/a.jpg",}\n' * 3)
    with pytest.raises(SourceError, match=r"a\.jsonl: no line of it is a row; the first, line 1: "
                       "not valid JSON"):  # fmt: skip
        scan(tmp_path / "lists", _options())


def test_a_window_shuffle_mixes_ranges_and_rows_and_is_the_same_at_any_worker_count(
    listed, tmp_path
):
    _, lists, keys, _, _ = listed
    outs = [tmp_path / f"window-{n}" for n in (1, 2)]
    for out, workers in zip(outs, (1, 2), strict=True):
        result = pack(lists, out, _options(shuffle_window=True, workers=workers, seed=3))
        assert result.index.shuffle == "window" and result.index.seed == 3
    assert helpers.shard_files(outs[0]) == helpers.shard_files(outs[1])
    got = _keys(outs[0])
    good = [k for k in keys if "/img/" in k]
    assert sorted(got) == sorted(good) and got != good  # every row once, not in order
    sizes = [s.num_records for s in result.index.shards]
    shards = [frozenset(got[sum(sizes[:i]) : sum(sizes[: i + 1])]) for i in range(len(sizes))]
    ranges = [frozenset(good[i : i + 3]) for i in (0, 3, 6, 9)] + [
        frozenset(good[12:14]), frozenset(good[14:16])]  # fmt: skip
    assert sorted(shards, key=sorted) == sorted(ranges, key=sorted) and shards != ranges


def test_worker_counts_write_the_same_bytes_without_a_shuffle(listed, tmp_path):
    _, lists, _, one, _ = listed
    pack(lists, tmp_path / "none-2", _options(shuffle=False, workers=2))
    assert helpers.shard_files(tmp_path / "none-2") == helpers.shard_files(one)


def test_the_scan_holds_counts_and_the_plan_ranges(listed):
    _, lists, _, _, _ = listed
    options = _options(shuffle=False)
    dataset, _, _, plan, _ = _planned(storage_at(str(lists)), options)
    rows = dataset.splits["train"]
    assert isinstance(rows, StreamedRows) and len(rows) == 18
    assert [file.rows for file in rows.files] == [6, 6, 6]  # the bad line is a row, blank not
    assert [(s.items.number, s.items.first, len(s.items)) for s in plan.shards] == [
        (0, 0, 3), (0, 3, 3), (1, 0, 3), (1, 3, 3), (2, 0, 3), (2, 3, 3),
    ]  # fmt: skip
    assert all(isinstance(s.items, RowRange) and s.items._items is None for s in plan.shards)
    assert plan.shuffle == "none"
    again = _planned(storage_at(str(lists)), options)[3]
    assert again.digest == plan.digest


def test_a_cut_other_than_asked_is_warned_of_as_a_list_read_whole_warns(listed):
    """--shards 4 over three files of six rows made 6 shards, and --shard-size 200000 one row a
    shard (each row taken for 128 KiB, unread), and pack said nothing of either, where a list
    read whole warns of both. --shards 6 (two ranges a file) and the default size say nothing."""
    _, lists, _, _, _ = listed

    def warned(**given) -> tuple[str, ...]:
        options = PackOptions(path_column="url", allow_private_urls=True, shuffle=False,
                              **given)  # fmt: skip
        return _planned(storage_at(str(lists)), options)[3].warnings

    assert warned(shards=6) == warned() == ()
    (line,) = warned(shards=4)
    assert line == ("split train: 6 shards, not the 4 asked: a streamed list's shard holds "
                    "rows of one of its 3 files, and one row at least")  # fmt: skip
    (line,) = warned(shard_size=200_000)
    said = "a shard size of 200,000 bytes leaves about 1 image per shard (18 shards for 18 images"
    assert line.startswith(f"split train: {said}; each row taken for 131,072 bytes"), line


def test_a_bad_row_stops_a_fail_run_naming_its_file_and_line(listed, tmp_path):
    _, lists, _, _, _ = listed
    with pytest.raises(ImageError, match=r"part-2\.jsonl line 3: not valid JSON"):
        pack(lists, tmp_path / "out", _options(shuffle=False, on_error="fail", workers=1))


def test_resume_keeps_the_finished_ranges_and_a_changed_file_changes_the_plan(listed, tmp_path):
    """Stopped by a bad row in its fifth shard (--on-error fail), a rerun with --resume keeps
    the shards written and asks the server for the URLs of the last two alone; a file changed
    since the scan is refused by its worker, and its new size and rows make another plan."""
    site, lists, _, clean, _ = listed
    out = tmp_path / "out"
    stopped = helpers.run_cli("pack", str(lists), str(out), *_JOB, "--no-shuffle",
                              "--workers", "1", "--on-error", "fail")  # fmt: skip
    helpers.one_line_error(stopped, "part-2.jsonl line 3")
    site.hits.clear()
    resumed = helpers.run_cli("pack", str(lists), str(out), *_JOB, "--no-shuffle",
                              "--workers", "1", "--resume")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    unfinished = ["/gone/16.png", *(f"/img/{i}.png" for i in range(12, 16))]
    assert sorted(site.hits.elements()) == unfinished  # shards 4 and 5 alone, each URL once
    assert helpers.shard_files(out) == helpers.shard_files(clean)
    assert (out / "failures.jsonl").read_bytes() == (clean / "failures.jsonl").read_bytes()
    grown = tmp_path / "grown"
    grown.mkdir()
    for part in lists.iterdir():
        (grown / part.name).write_bytes(part.read_bytes())
    options = _options(shuffle=False)
    dataset, _, _, plan, _ = _planned(storage_at(str(grown)), options)
    with (grown / "part-2.jsonl").open("a") as f:
        f.write(json.dumps({"url": site.url("/img/17.png"), "caption": "late"}) + "\n")
    args = (options, dataset.root, storage_at(str(tmp_path / "w")), dataset.schema,
            dataset.source)  # fmt: skip
    (tmp_path / "w").mkdir()
    with pytest.raises(SourceError, match=r"part-2\.jsonl: changed since the scan"):
        write_shard(plan.shards[-1], *args)
    assert _planned(storage_at(str(grown)), options)[3].digest != plan.digest


def test_growing_a_streamed_pack_and_a_window_over_one_file_are_refused_in_one_line(
    listed, tmp_path
):
    _, lists, _, out, _ = listed
    copy = tmp_path / "copy"
    copy.mkdir()
    for part in out.iterdir():
        if part.is_file():
            (copy / part.name).write_bytes(part.read_bytes())
    grown = helpers.run_cli("pack", str(lists), str(copy), *_JOB, "--no-shuffle", "--append")
    helpers.one_line_error(grown, "packed streamed", "--overwrite")
    alone = helpers.run_cli("pack", str(lists / "part-0.parquet"), str(tmp_path / "one"),
                            *_JOB, "--shuffle-window")  # fmt: skip
    helpers.one_line_error(alone, "--shuffle-window streams a folder or pattern")
    held = helpers.run_cli("pack", str(lists / "part-0.parquet"), str(tmp_path / "one"), *_JOB)
    assert "order: global shuffle, seed 0" in held.stdout  # a file alone is held, shuffled
    with pytest.raises(OptionError, match=r"shuffle_window"):
        PackOptions(shuffle=False, shuffle_window=True)
    with pytest.raises(OutputError):
        pack(lists, copy, _options(shuffle=False, grow="update"))
    assert len(scan(lists, _options()).splits["train"]) == 17  # the global shuffle holds items


def test_a_parquet_list_is_typed_by_its_footer_or_surveyed_as_a_list_read_whole(
    tmp_path, monkeypatch
):
    """Text, number and boolean columns take their types from the footer, no row read;
    a list column (boxes) or a number column with a null is surveyed. Either way a streamed
    list's schema is the one the same list read whole gets."""
    from shardpack.sources.tables import ranges

    scalars, lists = tmp_path / "scalars", tmp_path / "lists"
    for folder in (scalars, lists):
        folder.mkdir()
    urls = [f"http://images.example/{i}.png" for i in range(6)]
    for part in (0, 1):
        rows = slice(3 * part, 3 * part + 3)
        table = pa.table({"url": urls[rows], "caption": ["a", None, "c"], "likes": [1, 2, 3],
                          "score": pa.array([0.5, 1.5, 2.0], pa.float64()),
                          "nsfw": [True, False, True]})  # fmt: skip
        pq.write_table(table, scalars / f"part-{part}.parquet", row_group_size=2)
        boxes = [[[0.1, 0.1, 0.5, 0.5]], [], [[0.2, 0.2, 0.3, 0.4]]]
        pq.write_table(table.append_column("bbox", pa.array(boxes)),
                       lists / f"part-{part}.parquet")  # fmt: skip

    def unread(*args):
        raise AssertionError("a row was read")

    for folder in (scalars, lists):
        held = scan(folder, _options()).schema
        with monkeypatch.context() as patched:
            if folder is scalars:
                patched.setattr(ranges, "parquet_chunks", unread)
            streamed = scan(folder, _options(shuffle=False))
        assert isinstance(streamed.splits["train"], StreamedRows)
        assert streamed.schema == held, folder.name
    assert held["bbox"].shape == (-1, 4)


def test_the_ranges_of_one_row_group_read_it_once_in_a_process(tmp_path, monkeypatch):
    """pyarrow writes up to 1M rows a row group and a shard takes 1,024: each range read its
    whole row group again (1.3 s for 1M URLs and captions, a thousand times a group)."""
    from shardpack.sources.tables import ranges

    folder = tmp_path / "lists"
    folder.mkdir()
    urls = [f"http://images.example/{i}.png" for i in range(12)]
    pq.write_table(pa.table({"url": urls, "caption": list("abcdefghijkl")}),
                   folder / "part-0.parquet", row_group_size=12)  # fmt: skip
    read, real = [], ranges.read_group
    monkeypatch.setattr(ranges, "read_group", lambda *args: read.append(args[2]) or real(*args))
    dataset, _, _, plan, _ = _planned(storage_at(str(folder)), _options(shuffle=False))
    assert len(plan.shards) == 6  # --shards 6: two rows each, all in row group 0
    assert [item.key for spec in plan.shards for item in spec.items] == urls
    assert read == [0]
    dataset.splits["train"].release()


def test_a_streamed_url_list_reads_http_urls_only(tmp_path):
    """As a list read whole: a row naming a local file or an object store in a range of URLs
    is a bad row (refused at its read, naming its row), never read."""
    image = tmp_path / "private.jpg"
    image.write_bytes(helpers.jpeg(0))
    folder = tmp_path / "lists"
    folder.mkdir()
    paths = ["http://images.example/0.png", f"file://{image}", str(image), "s3://bucket/a.png"]
    for part in (0, 1):
        pq.write_table(pa.table({"url": paths}), folder / f"part-{part}.parquet")
    rows = scan(folder, _options(shuffle=False)).splits["train"]
    items = list(RowRange(rows, 1, 0, 4))
    assert items[0].path == paths[0]
    assert [i.path for i in items[1:]] == [
        f"{BAD_ROW}part-1.parquet row {row}: image {path}: {NOT_WEB}"
        for row, path in enumerate(paths[1:], 1)
    ]


@pytest.mark.slow  # a loopback server
def test_a_streamed_laion_list_of_urls_reads_the_columns_kept_alone(tmp_path):
    """LAION's parts streamed (--no-shuffle, a folder of them): the scan's footer typing and
    each worker's range read only the columns kept (the others' pages spoiled: reading them
    would fail), HEIGHT's empty rows refuse nothing, and each record holds the URL's image
    with its caption."""
    (tmp_path / "lists").mkdir()
    with serving() as site:
        rows = [helpers.laion_rows(tmp_path / "img", count, site.url) for count in (3, 2)]
        for number, part in enumerate(rows):
            part = [{**row, "URL": f"{row['URL']}?part={number}"} for row in part]
            rows[number] = part
            path = helpers.write_parquet(tmp_path / "lists" / f"part-{number}.parquet", part)
            helpers.spoil_columns(path, "HEIGHT", "WIDTH", "LICENSE")
        options = _options(shuffle=False, workers=1, path_column="URL",
                           columns=("TEXT=caption", "NSFW"))  # fmt: skip
        done = pack(tmp_path / "lists", tmp_path / "out", options)
    assert done.index.shuffle == "none"
    records = list(iter_examples(tmp_path / "out"))
    assert [(r["key"], r["caption"], r["NSFW"]) for r in records] == [
        (row["URL"], row["TEXT"], "UNLIKELY") for part in rows for row in part
    ]
    assert set(records[0]) - {"image", "key", "height", "width", "channels", "format"} == {
        "caption",
        "NSFW",
    }


@pytest.mark.slow  # a loopback server
def test_a_streamed_lists_bad_rows_are_in_failures_when_every_url_was_packed(tmp_path):
    """A streamed list's bad rows (no URL, not JSON, a URL of another scheme) went to
    failures.jsonl only where one of its URLs failed too (no process holds its rows to tell
    it lists URLs): its ranges tell now, so every bad row is there, at its line, as a list
    read whole has them; a streamed list of local files keeps none."""
    lists = tmp_path / "lists"
    lists.mkdir()
    with serving() as site:
        first = [{"url": site.url("/img/0.png")}, {"url": ""}, {"url": site.url("/img/1.png")}]
        helpers.write_jsonl(lists / "part-0.jsonl", first)
        second = [{"url": site.url("/img/2.png")}, {"url": "ftp://example.com/a.png"}]
        helpers.write_jsonl(lists / "part-1.jsonl", second)
        with (lists / "part-1.jsonl").open("a") as f:
            f.write("{not json\n")
        options = _options(shuffle=False, workers=1, shards=None)
        done = pack(lists, tmp_path / "out", options)
        assert site.hits and max(site.hits.values()) == 1
    assert done.num_records == 3 and done.index.num_skipped == 3
    said = [json.loads(line) for line in (tmp_path / "out/failures.jsonl").read_text().splitlines()]
    assert [(f["url"], f["file"], f["row"], f["split"], f["error"]) for f in said] == [
        (None, "part-0.jsonl", 2, None, "bad row"),
        ("ftp://example.com/a.png", "part-1.jsonl", 2, None, "bad row"),
        (None, "part-1.jsonl", 3, None, "bad row"),
    ]
    assert said[0]["reason"] == "part-0.jsonl line 2: no image path in column 'url'"
    assert done.index.stats.url_failures == {"bad row": 3}
    local = tmp_path / "local"
    local.mkdir()
    for part in (0, 1):
        (local / f"a{part}.jpg").write_bytes(helpers.jpeg(part))
        helpers.write_jsonl(local / f"part-{part}.jsonl", [{"path": f"a{part}.jpg"}, {"path": ""}])
    done = pack(
        f"{local}/part-*.jsonl", tmp_path / "local-out", PackOptions(shuffle=False, workers=1)
    )
    assert not (tmp_path / "local-out/contents.json").exists()  # streamed
    assert done.index.num_skipped == 2 and not (tmp_path / "local-out/failures.jsonl").exists()
