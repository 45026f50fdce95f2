"""A URL list's pack stopped and resumed, and grown with --update: only what is unfinished or
failed is fetched again (requests counted at a real loopback server: tests/storage/test_fetch's
Site), finished shards are left as they are, and failures.jsonl says what still fails."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest

from shardpack import PackOptions, iter_examples, pack, verify
from shardpack.packing.grow import _asked_again, _packed_again
from tests import forkserver, helpers
from tests.packing.test_reliability import _finished_shards
from tests.storage.test_fetch import Site, serving

pytestmark = pytest.mark.slow  # a real server; real processes and signals
JOB = ["--path-column", "url", "--allow-private-urls", "--workers", "1", "--shards", "4",
       "--no-progress"]  # fmt: skip
# 16 rows, every third a 404: failures in finished shards and in the one left unfinished
PATHS = [f"/gone/{i}.png" if i % 3 == 1 else f"/img/{i}.png" for i in range(16)]


def _list(tmp_path: Path, site: Site, paths: list[str]) -> Path:
    rows = [{"url": site.url(path), "caption": f"photo {i}"} for i, path in enumerate(paths)]
    return helpers.write_csv(tmp_path / "urls.csv", rows)


def _rows(manifest: Path) -> list[dict]:
    with open(manifest, newline="") as f:
        return list(csv.DictReader(f))


def _shards(out: Path) -> dict[str, list[str]]:
    """Each shard's URL paths, packed or skipped (contents.json), by shard name."""
    doc = json.loads((out / "contents.json").read_text())
    return {file: ["/" + key.split("/", 3)[3] for key in (*entry["keys"], *entry["skipped"])]
            for file, entry in doc["shards"].items()}  # fmt: skip


def _history(out: Path) -> list[dict]:
    return json.loads((out / "index.json").read_text())["history"]


def _index(out: Path) -> dict:
    doc = json.loads((out / "index.json").read_text())
    doc.pop("stats")
    return doc


@pytest.mark.parametrize("resume", [["--resume"], []])
def test_a_stopped_url_pack_resumes_fetching_only_its_unfinished_shards(tmp_path, resume):
    """Stopped by Ctrl-C while its last shard's requests hang, a URL pack exits at once (it
    waited for the server, up to the read timeout) and, rerun with --resume, asks the server
    for that shard's URLs alone, once each, and ends as an uninterrupted run does,
    failures.jsonl included. (A kill leaves the same journal: tests/packing/test_reliability.)
    The same command again without --resume (img2dataset's rerun resumes) wrote every shard
    again, asking for every URL: it keeps the finished shards too, their URLs taken as
    unchanged."""
    with serving() as site:
        src, clean, out = _list(tmp_path, site, PATHS), tmp_path / "clean", tmp_path / "out"
        assert helpers.run_cli("pack", str(src), str(clean), *JOB).returncode == 0
        shards = _shards(clean)
        last = shards[max(shards)]  # in-process, shards are written in name order
        assert any(p.startswith("/gone/") for p in last), shards
        assert any(p.startswith("/gone/") for ps in shards.values() if ps != last for p in ps)
        site.hits.clear()
        site.held = frozenset(last)
        run = forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(out), *JOB)
        try:
            # (the last shard's fetching starts during the one before: its requests are not
            # enough to say the others are journaled)
            helpers.wait_for(lambda: any(site.hits[p] for p in last)
                             and _finished_shards(out) == len(shards) - 1)  # fmt: skip
            sent = time.monotonic()
            run.send_signal(signal.SIGINT)
            stderr = run.communicate(timeout=30)[1]
            assert time.monotonic() - sent < 5  # Ctrl-C: not when the server answers (30 s)
        finally:
            run.kill()
            site.gate.set()
        assert run.returncode == 130, stderr
        assert not (out / "index.json").exists()
        site.hits.clear()
        resumed = helpers.run_cli("pack", str(src), str(out), *JOB, *resume)
        assert resumed.returncode == 0, resumed.stderr
        assert sorted(site.hits.elements()) == sorted(last)  # each once, and no other
    assert helpers.shard_files(out) == helpers.shard_files(clean)
    assert _index(out) == _index(clean)
    assert (out / "failures.jsonl").read_bytes() == (clean / "failures.jsonl").read_bytes()


def test_the_same_command_again_over_a_finished_url_pack_fetches_nothing(tmp_path):
    """A URL has no stamp (a file's size and mtime), so the same command again over its
    finished pack took no shard as unchanged and asked the server for every URL of the list
    (img2dataset's rerun keeps its finished shards): a URL names its image, as a grow takes
    it, so every shard is kept, its file untouched, and not one request is sent."""
    with serving() as site:
        src, out = _list(tmp_path, site, PATHS), tmp_path / "out"
        assert helpers.run_cli("pack", str(src), str(out), *JOB).returncode == 0
        before, failed = _stamps(out), (out / "failures.jsonl").read_bytes()
        site.hits.clear()
        again = helpers.run_cli("pack", str(src), str(out), *JOB)
        assert again.returncode == 0, again.stderr
        assert "kept 4 of 4 shards" in again.stdout and not site.hits, site.hits
    assert _stamps(out) == before and (out / "failures.jsonl").read_bytes() == failed


def test_the_same_command_over_an_edited_list_names_update_which_fetches_nothing(tmp_path):
    """A caption edited in the list: the same command again is refused, and said to pass
    --overwrite, which fetches every URL again; it names --update, which packs the changed row
    from its held image and asks the server nothing."""
    with serving() as site:
        src, out = _list(tmp_path, site, PATHS), tmp_path / "out"
        assert helpers.run_cli("pack", str(src), str(out), *JOB).returncode == 0
        rows = _rows(src)
        rows[0]["caption"] = "a photo, captioned anew"
        helpers.write_csv(src, rows)
        site.hits.clear()
        again = helpers.run_cli("pack", str(src), str(out), *JOB)
        changed = "was packed from a changed source (other files, sizes or rows)"
        helpers.one_line_error(again, f"{changed}; --update packs only what changed", "--overwrite")
        grown = helpers.run_cli("pack", str(src), str(out), *JOB, "--update")
        assert grown.returncode == 0, grown.stderr
        assert not site.hits, site.hits
    captions = {r["key"]: r["caption"] for r in iter_examples(out)}
    assert captions[site.url(PATHS[0])] == "a photo, captioned anew"


def _stamps(out: Path) -> dict[str, tuple[int, bytes]]:
    """Each shard file's mtime and bytes."""
    return {name: ((out / name).stat().st_mtime_ns, data)
            for name, data in helpers.shard_files(out).items()}  # fmt: skip


def _failed(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]


def test_update_fetches_again_only_the_urls_that_failed_for_a_reason_a_retry_may_mend(tmp_path):
    """A finished URL pack whose server was down for some images (503) and had lost others
    (404): --update asks the 503s alone again, once each, packs those that now answer in a new
    shard beside the finished ones (their bytes and mtimes as they were), and failures.jsonl
    then lists what still fails: the 404s (not asked again) and a 503 that is still one."""
    with serving() as site:
        src, out = _list(tmp_path, site, PATHS), tmp_path / "out"
        down = {"/img/0.png", "/img/5.png", "/img/9.png"}
        site.down |= down
        assert helpers.run_cli("pack", str(src), str(out), *JOB, "--retries", "0").returncode == 0
        gone = [(i, p) for i, p in enumerate(PATHS) if p.startswith("/gone/")]
        assert {row["url"].split("/", 3)[3] for row in _failed(out)} == {
            p.lstrip("/") for p in {*down, *(p for _, p in gone)}
        }
        before, records = _stamps(out), len(list(iter_examples(out)))
        site.down, site.hits = {"/img/9.png"}, Counter()
        grown = helpers.run_cli("pack", str(src), str(out), *JOB, "--retries", "0", "--update")
        assert grown.returncode == 0, grown.stderr
        assert "3 URLs that had failed" in grown.stderr and "asked again: 2 packed" in grown.stderr
        assert sorted(site.hits.elements()) == sorted(down), site.hits  # no held image, no 404
        grown_to, failed = _stamps(out), _failed(out)
        site.hits = Counter()  # again: the one still down fails again, and stays listed
        again = helpers.run_cli("pack", str(src), str(out), *JOB, "--retries", "0", "--update")
        assert again.returncode == 0, again.stderr
        assert list(site.hits.elements()) == ["/img/9.png"]
        assert _stamps(out) == grown_to and _failed(out) == failed  # (no shard of no record)
        # a URL asked again and failing again is no addition (each such --update said 1)
        assert [run["added"] for run in _history(out)] == [2, 0]
        assert "update: added 0, changed 0" in again.stdout
    after = _stamps(out)
    assert {name: after[name] for name in before} == before  # finished shards untouched
    assert len(after) == len(before) + 1
    assert len(list(iter_examples(out))) == records + 2
    failed = _failed(out)
    still = sorted([*gone, (9, "/img/9.png")])
    assert [(row["row"] - 2, "/" + row["url"].split("/", 3)[3]) for row in failed] == still
    assert {row["file"] for row in failed} == {"urls.csv"}
    assert [row["status"] for row in failed] == [503 if "img" in p else 404 for _, p in still]
    index = json.loads((out / "index.json").read_text())
    assert index["stats"]["url_failures"] == {"HTTP Not Found": len(gone),
                                              "HTTP Service Unavailable": 1}  # fmt: skip
    assert helpers.run_cli("verify", str(out)).returncode == 0
    with serving() as other:  # --append: the new rows' URLs alone, once each
        more = [other.url("/img/20.png"), other.url("/gone/21.png")]
        rows = [{"url": url, "caption": "new"} for url in more]
        helpers.write_csv(src, [*_rows(src), *rows])
        grown = helpers.run_cli("pack", str(src), str(out), *JOB, "--retries", "0", "--append")
        assert grown.returncode == 0, grown.stderr
        assert sorted(other.hits.elements()) == ["/gone/21.png", "/img/20.png"]
    assert [row["url"] for row in _failed(out)][-1] == more[1]


def test_a_grow_fetches_a_packed_copy_again_only_to_confirm_a_new_one(tmp_path):
    """Held exact copies behind URLs are known copies: a grow that asks a failed URL again
    fetches none of them (each grow fetched one URL of each group again), a new copy has
    one of them fetched once, to confirm it by digest (docs/sources.md), and a copy whose
    caption changed is still one, fetched by no one (it and its copy were fetched)."""
    with serving() as site:
        paths = [*(f"/twin/{i}.png" for i in range(4)), "/img/9.png"]
        src, out = _list(tmp_path, site, paths), tmp_path / "out"
        site.down.add("/img/9.png")
        assert helpers.run_cli("pack", str(src), str(out), *JOB, "--retries", "0").returncode == 0
        site.down, site.hits = set(), Counter()
        assert helpers.run_cli("pack", str(src), str(out), *JOB, "--update").returncode == 0
        assert list(site.hits) == ["/img/9.png"], site.hits
        site.hits.clear()
        helpers.write_csv(src, [*_rows(src), {"url": site.url("/img/0.png"), "caption": "new"}])
        assert helpers.run_cli("pack", str(src), str(out), *JOB, "--append").returncode == 0
        assert sorted(site.hits) in (["/img/0.png", f"/twin/{i}.png"] for i in (0, 1)), site.hits
        assert sum(site.hits.values()) == 2
        site.hits.clear()  # a copy's caption edited: its bytes, and so its copies, stand
        rows = _rows(src)
        rows[2]["caption"] = "edited"
        helpers.write_csv(src, rows)
        assert helpers.run_cli("pack", str(src), str(out), *JOB, "--update").returncode == 0
        assert not site.hits, site.hits
    doc = json.loads((out / "index.json").read_text())
    assert (doc["duplicates"]["groups"], doc["duplicates"]["copies"]) == (2, 3)


def _told(out: Path) -> dict:
    """What an index says of copies and skips, and each split's records and statistics."""
    doc = json.loads((out / "index.json").read_text())
    splits = {name: split["num_records"] for name, split in doc["splits"].items()}
    return {k: doc[k] for k in ("duplicates", "num_skipped", "skipped", "summaries")} | splits


def test_a_grow_fetches_no_copy_dedup_left_out_until_its_kept_image_leaves(tmp_path):
    """--dedup exact's copies left out are known from contents.json: an --update that changes
    nothing fetches nothing (each grow fetched every copy left out and an image each
    matched; an older contents.json without them, once), a new row fetches that row alone,
    and a kept image whose row goes has its copy fetched and packed; each grow tells copies
    and skips as a fresh pack of its list does."""
    given = {"workers": 1, "path_column": "url", "allow_private_urls": True, "shards": 2,
             "dedup": "exact"}  # fmt: skip
    with serving() as site:
        src = _list(tmp_path, site, [*(f"/twin/{i}.png" for i in range(4)), "/img/9.png"])
        out, fresh = tmp_path / "out", tmp_path / "fresh"
        pack(src, out, PackOptions(**given))
        doc = json.loads((out / "contents.json").read_text())
        del doc["dropped"]  # as an older shardpack wrote it: its grow fetches them, once
        (out / "contents.json").write_text(json.dumps(doc))
        site.hits.clear()
        for fetched in ({f"/twin/{i}.png" for i in range(4)}, set()):
            assert pack(src, out, PackOptions(**given, grow="update")).grow["nothing"]
            assert set(site.hits) == fetched, site.hits
            site.hits.clear()
        added = [{"url": site.url(f"/img/{i}.png"), "caption": "new"} for i in (10, 0)]
        helpers.write_csv(src, [*_rows(src), *added])
        pack(src, out, PackOptions(**given, grow="update"))  # (--append keeps the held copy)
        # a new row keyed, then packed (as a fresh pack); /img/0.png a copy of /twin/0.png and
        # /twin/1.png: one of those fetched to confirm it
        twins = [path for path in site.hits.elements() if path.startswith("/twin/")]
        assert twins in (["/twin/0.png"], ["/twin/1.png"]), site.hits
        assert set(site.hits) - set(twins) == {"/img/0.png", "/img/10.png"}, site.hits
        pack(src, fresh, PackOptions(**given))
        assert _told(out) == _told(fresh)
        rows = _rows(src)
        helpers.write_csv(src, rows[1:-1])  # /img/0.png, kept of its group, and /twin/0.png go
        site.hits.clear()
        pack(src, out, PackOptions(**given, grow="update"))
        assert list(site.hits) == ["/twin/1.png"], site.hits
        pack(src, fresh, PackOptions(**given, overwrite=True))
    assert _told(out) == _told(fresh)
    assert site.url("/twin/1.png") in _records(out)
    assert verify(out).ok


def test_a_grow_lists_the_copies_dedup_left_out_in_failures_jsonl_as_a_fresh_pack(tmp_path):
    """A grow's failures.jsonl and stats.url_failures left out every copy --dedup skipped, held
    or new, which its index.json counted: one writing shards listed the 404 alone, one writing
    none kept the old file without its new copy. And a fresh pack named no split for a copy.
    Each grow lists now what a fresh pack of its list lists, a copy with its split."""
    given = {"workers": 1, "path_column": "url", "allow_private_urls": True, "dedup": "exact"}
    with serving() as site:
        src = _list(tmp_path, site, ["/twin/0.png", "/twin/1.png", "/img/5.png"])  # twins: 0
        out, fresh = tmp_path / "out", tmp_path / "fresh"
        pack(src, out, PackOptions(**given))
        # /twin/10.png and /twin/11.png are copies of /img/5.png: the first grow writes /img/8.png
        # into a shard, the second finds a copy alone and writes none
        for added, nothing in ((["/twin/10.png", "/gone/7.png", "/img/8.png"], False),
                               (["/twin/11.png"], True)):  # fmt: skip
            rows = [{"url": site.url(path), "caption": "new"} for path in added]
            helpers.write_csv(src, [*_rows(src), *rows])
            grown = pack(src, out, PackOptions(**given, grow="update"))
            assert grown.grow.get("nothing", False) is nothing, grown.grow
            pack(src, fresh, PackOptions(**given, overwrite=True))
            assert _failed(out) == _failed(fresh)
            stats = [json.loads((o / "index.json").read_text())["stats"] for o in (out, fresh)]
            assert stats[0]["url_failures"] == stats[1]["url_failures"]
    assert Counter(row["error"] for row in _failed(out)) == {"duplicate": 3, "HTTP Not Found": 1}
    assert {row["split"] for row in _failed(out)} == {"train"}
    assert stats[0]["url_failures"] == {"duplicate": 3, "HTTP Not Found": 1}


def test_a_grow_keeps_the_near_copies_dedup_near_left_out_unfetched(tmp_path):
    """--dedup near's copies left out and the held images they are near copies of are known by
    their noted hashes: an --update that changes nothing fetches nothing, and keeps them left
    out (one that fetched them found the held image unhashed, and packed them)."""
    given = {"workers": 1, "path_column": "url", "allow_private_urls": True, "shards": 2,
             "dedup": "near"}  # fmt: skip
    with serving() as site:
        src = _list(tmp_path, site, ["/img/0.png", "/jpeg/0.png", "/img/1.png", "/twin/2.png",
                                     "/twin/3.png"])  # fmt: skip
        out, fresh = tmp_path / "out", tmp_path / "fresh"
        pack(src, out, PackOptions(**given))
        site.hits.clear()
        assert pack(src, out, PackOptions(**given, grow="update")).grow["nothing"]
        assert not site.hits, site.hits
        pack(src, fresh, PackOptions(**given))
    told = _told(out)
    assert told == _told(fresh) and told["duplicates"]["removed"] == 3  # twin/2, 3: of img/1
    near = [s["key"] for s in told["skipped"] if s["reason"].startswith("near duplicate of")]
    assert near == [site.url("/jpeg/0.png")]


def test_the_line_of_urls_asked_again_counts_one_url_as_one():
    fresh = {"train-00000.tfrecord": {"keys": ["http://127.0.0.1/a.jpg", "b"]}}
    (one,) = _asked_again(once := frozenset({"http://127.0.0.1/a.jpg"}), _packed_again(once, fresh))
    (two,) = _asked_again(twice := frozenset({"http://127.0.0.1/a.jpg", "c"}), 1)
    assert (_packed_again(twice, fresh), _packed_again(frozenset(), fresh)) == (1, 0)
    assert one.startswith("1 URL that had failed") and one.endswith("asked again: 1 packed")
    assert two.startswith("2 URLs that had failed")


def _records(out: Path) -> dict[str, dict]:
    return {r["key"]: r for r in iter_examples(out)}


def _originals(out: Path) -> dict[str, dict]:
    """img2dataset's .json of each sample, by its URL."""
    found = {}
    for tar in sorted(out.glob("*.tar")):
        with tarfile.open(tar) as f:
            for member in f.getmembers():
                if member.name.endswith(".json"):
                    doc = json.loads(f.extractfile(member).read())
                    found[doc["url"]] = {k: doc[k] for k in ("original_width", "sha256")}
    return found


# make test: the default container, and webdataset's img2dataset naming (fields beyond the
# schema); the other containers read their records alike, in make test-long
@pytest.mark.parametrize("fmt", ["tfrecord", "webdataset",
                                 *(pytest.param(f, marks=pytest.mark.long)
                                   for f in ("parquet", "array_record"))])  # fmt: skip
def test_update_keeps_each_held_image_from_its_shard_and_fetches_only_new_urls(tmp_path, fmt):
    """A caption edited, a URL changed and a row removed, while every packed URL now 404s:
    --update takes each held image from the shard that held it, with its row's caption now,
    and fetches the changed URL alone (it fetched every URL of the shards it rewrote, and
    dropped those that failed)."""
    naming = {"wds_naming": "img2dataset"} if fmt == "webdataset" else {}
    given = {"workers": 1, "path_column": "url", "allow_private_urls": True, "shards": 2,
             "format": fmt, "retries": 0, **naming}  # fmt: skip
    with serving() as site:
        src, out = _list(tmp_path, site, [f"/img/{i}.png" for i in range(8)]), tmp_path / "out"
        pack(src, out, PackOptions(**given))
        before = _records(out)
        rows = _rows(src)
        rows[3]["caption"] = "edited"
        rows[5]["url"] = site.url("/img/15.png")
        del rows[6]
        helpers.write_csv(src, rows)
        site.gone = {f"/img/{i}.png" for i in range(8)}
        site.hits.clear()
        result = pack(src, out, PackOptions(**given, grow="update"))
        assert list(site.hits.elements()) == ["/img/15.png"]
    after = _records(out)
    assert sorted(after) == sorted(row["url"] for row in rows)
    for row in rows[:5] + rows[6:]:
        assert after[row["url"]]["image"] == before[row["url"]]["image"]
        assert after[row["url"]]["caption"] == row["caption"]
    assert after[rows[3]["url"]]["caption"] == "edited"
    assert result.grow["changed"] == 1 and result.grow["removed"] == 2
    assert not (out / "failures.jsonl").exists() or not _failed(out)
    if naming:  # img2dataset's fields of the image as fetched, written again
        assert all(v["original_width"] == 32 for v in _originals(out).values())
    assert verify(out).ok


def test_update_fetches_a_row_whose_boxes_must_follow_the_pixels_as_fetched(tmp_path):
    """Boxes resized with their image: a row whose boxes changed needs the image as fetched
    to move them, so --update fetches that URL alone; its shard's other records are kept."""
    given = {"workers": 1, "path_column": "url", "allow_private_urls": True, "shards": 2,
             "resize": (16, 16), "resize_mode": "center-crop"}  # fmt: skip
    with serving() as site:
        rows = [{"url": site.url(f"/img/{i}.png"), "bbox": [[0.1, 0.1, 0.5, 0.5]]}
                for i in range(4)]  # fmt: skip
        src, out = helpers.write_jsonl(tmp_path / "urls.jsonl", rows), tmp_path / "out"
        pack(src, out, PackOptions(**given))
        before = _records(out)
        rows[1]["bbox"] = [[0.2, 0.2, 0.6, 0.6]]
        helpers.write_jsonl(src, rows)
        fresh = pack(src, tmp_path / "fresh", PackOptions(**given))
        site.hits.clear()
        pack(src, out, PackOptions(**given, grow="update"))
        assert list(site.hits) == ["/img/1.png"]
    after, made = _records(out), {r["key"]: r for r in iter_examples(fresh.out)}
    assert all(after[row["url"]]["image"] == before[row["url"]]["image"] for row in rows)
    for row in rows:  # the boxes as a fresh pack moves them with the pixels
        assert after[row["url"]]["bbox"].tolist() == made[row["url"]]["bbox"].tolist()


def test_update_counts_the_boxes_its_kept_records_lost_as_a_fresh_pack(tmp_path):
    """A record --update keeps from its held shard is not fetched, so no worker sees its boxes
    dropped: they are carried from the held shard's tally, which names every record that lost
    boxes (a split's summary, the first 20 of each reason). With every held URL failing now,
    in 1 shard of 22 such records as in 2 of ~11, the changed URL alone is fetched, every held
    record stays as it was, and the summary reads as a fresh pack's (a record past the first
    20 its shard named was fetched again: lost, as its URL failed). A shard an older shardpack
    wrote names the first 20 alone: its other records are kept too, their boxes uncounted."""
    outside, inside = [1.1, 0.0, 1.4, 0.5], [0.1, 0.1, 0.6, 0.6]
    given = {"workers": 1, "path_column": "url", "allow_private_urls": True}
    with serving() as site:
        rows = [{"url": site.url(f"/img/{i:02d}.png"),
                 "bbox": [outside] * (1 + i % 2) * (i < 22) + [inside]}
                for i in range(24)]  # fmt: skip
        src = helpers.write_jsonl(tmp_path / "urls.jsonl", rows)
        for shards in (1, 2):
            pack(src, tmp_path / f"out{shards}", PackOptions(**given, shards=shards))
        before = _records(tmp_path / "out1")
        shutil.copytree(tmp_path / "out1", tmp_path / "older")
        _named_as_before(tmp_path / "older")
        rows[23]["url"] = site.url("/img/30.png")
        helpers.write_jsonl(src, rows)
        pack(src, tmp_path / "fresh", PackOptions(**given))
        fresh = _index(tmp_path / "fresh")["summaries"]["train"]
        assert sum(fresh["boxes_dropped"].values()) == 33
        assert len(fresh["boxes_dropped_in"]["outside the image"]) == 20
        site.gone = {f"/img/{i:02d}.png" for i in range(24)}
        fetched = {}
        for name in ("out1", "out2", "older"):
            site.hits.clear()
            pack(src, tmp_path / name, PackOptions(**given, grow="update"))
            fetched[name] = sorted(site.hits)
    for name in ("out1", "out2", "older"):
        after = _records(tmp_path / name)
        assert sorted(after) == sorted(row["url"] for row in rows), name
        for row in rows[:23]:
            kept, held = after[row["url"]], before[row["url"]]
            assert (kept["image"], kept["bbox"].tolist()) == (held["image"], held["bbox"].tolist())
        summary = _index(tmp_path / name)["summaries"]["train"]
        assert summary["boxes_dropped_in"] == fresh["boxes_dropped_in"], name
        # the older shard named not /img/20.png (1 box) nor /img/21.png (2)
        assert sum(summary["boxes_dropped"].values()) == 33 - 3 * (name == "older"), name
    assert fetched == {name: ["/img/30.png"] for name in ("out1", "out2", "older")}


def _named_as_before(out: Path) -> None:
    """contents.json as a shardpack before this one wrote it: each shard's tally names the
    first 20 records by key of each reason boxes were dropped for (its rows sorted)."""
    doc = json.loads((out / "contents.json").read_text())
    for entry in doc["shards"].values():
        named: Counter[str] = Counter()
        for row in list(entry["tally"]):
            if row[0] == "boxes_dropped_in":
                named[reason := row[1].partition(": ")[0]] += 1
                if named[reason] > 20:
                    entry["tally"].remove(row)
    (out / "contents.json").write_text(json.dumps(doc))
