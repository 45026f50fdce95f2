"""What a run fetched of its image URLs, kept for its workers (storage.urlspool): given back as
kept, failures with their reasons; its files read as hostile and bounded; written by the
process that made it alone; and gone when the pack ends, however it ends (a real SIGINT to a
real process, which stops the --dedup pass at once), for a local OUT and an object store's,
or, when a run is SIGKILLed, as the next run starts (in OUT, or in the system's temporary
folder for a store's OUT), a live run's never; and the pass fetches as the pack's workers."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shardpack import PackOptions, iter_examples, pack
from shardpack.layout import FETCHED_PREFIX
from shardpack.storage import storage_at
from shardpack.storage.fetch import UrlFailed
from shardpack.storage.srcfiles import FileTooLarge, RefusedFile
from shardpack.storage.urlspool import UrlSpool
from tests import forkserver, helpers
from tests.storage.test_fetch import _manifest, _png, serving

URL, OTHER = "http://127.0.0.1/a.png", "http://127.0.0.1/b\u00e9.png"


def _file(spool: UrlSpool) -> Path:
    (path,) = Path(spool.folder).iterdir()
    return path


def test_a_spool_gives_back_what_it_kept_and_why_a_fetch_failed(tmp_path):
    spool = UrlSpool(str(tmp_path))
    assert spool.read(URL, 100) is None and not spool.holds(URL)
    assert not list(tmp_path.iterdir())  # no folder before the first URL kept
    spool.put(URL, b"\x89PNG body")
    assert spool.holds(URL) and spool.read(URL, 100) == b"\x89PNG body"
    folder = Path(spool.folder)
    assert folder.parent == tmp_path and folder.name.startswith(FETCHED_PREFIX)
    assert oct(folder.stat().st_mode & 0o777) == "0o700"  # the run's alone
    with pytest.raises(FileTooLarge, match="over the limit of 4 bytes"):
        spool.read(URL, 4)  # as the fetch refuses a body over its limit
    spool.fail(OTHER, UrlFailed("HTTP Not Found (HTTP 404)"))
    with pytest.raises(RefusedFile) as refused:
        spool.read(OTHER, 100)
    assert str(refused.value) == "HTTP Not Found (HTTP 404)"
    assert not isinstance(refused.value, FileTooLarge)
    spool.fail(OTHER, FileTooLarge("over the limit of 5 bytes (Content-Length: 9)"))
    with pytest.raises(FileTooLarge, match=r"^over the limit of 5 bytes \(Content-Length: 9\)$"):
        spool.read(OTHER, 100)
    spool.remove()
    assert not list(tmp_path.iterdir()) and spool.read(URL, 100) is None


def test_a_spool_reads_its_files_as_hostile_and_bounded(tmp_path):
    """A link is not followed, a FIFO not waited on, a file naming another URL not taken for
    this one's; a file past the limit is refused unread (a sparse GB: no read of it)."""
    spool = UrlSpool(str(tmp_path))
    spool.put(URL, b"image")
    path = _file(spool)
    kept = tmp_path / "kept"
    os.rename(path, kept)
    path.symlink_to(kept)
    assert spool.read(URL, 100) is None  # fetched, then: not read through the link
    path.unlink()
    os.mkfifo(path)
    assert spool.read(URL, 100) is None
    path.unlink()
    path.write_bytes(kept.read_bytes().replace(b"/a.png", b"/c.png"))
    assert spool.read(URL, 100) is None
    path.write_bytes(kept.read_bytes())
    os.truncate(path, 1 << 30)
    with pytest.raises(FileTooLarge):
        spool.read(URL, 1 << 20)


def test_only_the_process_that_made_a_spool_writes_to_it(tmp_path):
    """A worker's copy (pickled, or forked: another pid) reads what the packing process kept
    and keeps nothing itself: no folder of its own for no one to remove."""
    spool = UrlSpool(str(tmp_path))
    copy = pickle.loads(pickle.dumps(spool))
    copy.put(URL, b"image")
    assert not list(tmp_path.iterdir())
    spool.put(URL, b"image")
    copy = pickle.loads(pickle.dumps(spool))
    copy.put(OTHER, b"other")
    assert copy.read(URL, 100) == b"image" and not spool.holds(OTHER)


def _dead_spool(parent: Path) -> Path:
    """A spool a run left in `parent` as it ended unremoved (a process of its own, gone)."""
    made = subprocess.run([sys.executable, "-c", "import sys\n"
                           "from shardpack.storage.urlspool import UrlSpool\n"
                           "spool = UrlSpool(sys.argv[1])\n"
                           f"spool.put({URL!r}, b'image')\n"
                           "print(spool.folder)", str(parent)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return Path(made.stdout.strip())


def test_a_run_removes_the_spools_dead_runs_left_and_nothing_else(tmp_path, monkeypatch):
    """As a run starts (clear_scratch) a spool folder left by a run that is gone is removed,
    without following the links it holds; a live run's stays (its flock held: this process's
    here); a link named like a spool (to a folder outside OUT) and a file so named are not
    ours: they stay, and so does what the link names. An object store's OUT clears the
    system's temporary folder so (its spools are there)."""
    out, outside, tmp = tmp_path / "out", tmp_path / "outside", tmp_path / "tmp"
    out.mkdir(), outside.mkdir(), tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    (outside / "precious").write_bytes(b"the user's")
    dead, dead_in_tmp = _dead_spool(out), _dead_spool(tmp)
    live = UrlSpool(str(out))
    live.put(URL, b"image")
    (dead / "link").symlink_to(outside)
    (out / f"{FETCHED_PREFIX}link").symlink_to(outside, target_is_directory=True)
    (out / f"{FETCHED_PREFIX}file").write_bytes(b"not ours")
    (out / "shard-00000").write_bytes(b"a shard")
    storage_at(str(tmp_path / "elsewhere")).clear_scratch()  # not OUT: nothing of it touched
    assert dead.is_dir() and dead_in_tmp.is_dir()
    storage_at("memory://urlspool/clear").clear_scratch()
    assert not dead_in_tmp.exists() and dead.is_dir()
    storage_at(str(out)).clear_scratch()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{FETCHED_PREFIX}link", f"{FETCHED_PREFIX}file", "shard-00000",
         Path(live.folder).name])  # fmt: skip
    assert (outside / "precious").read_bytes() == b"the user's"
    assert (out / f"{FETCHED_PREFIX}file").read_bytes() == b"not ours"
    assert live.read(URL, 100) == b"image"
    live.remove()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{FETCHED_PREFIX}link", f"{FETCHED_PREFIX}file", "shard-00000"])  # fmt: skip


PATHS = [f"/twin/{i}.png" for i in range(8)]


@pytest.mark.slow  # a loopback server, as tests/storage/test_fetch's
def test_a_failed_pack_leaves_no_spool_and_asked_its_url_once(tmp_path):
    """--on-error fail stops at the 404 its worker was told of by the spool, not asked again
    (before, asked twice); the spool goes with the run."""
    with serving() as site:
        src = _manifest(tmp_path, [site.url(path) for path in [*PATHS, "/404.png"]])
        out = tmp_path / "out"
        done = helpers.run_cli("pack", str(src), str(out), "--path-column", "url",
                               "--allow-private-urls", "--workers", "1", "--dedup", "exact",
                               "--on-error", "fail", "--no-progress")  # fmt: skip
    assert done.returncode == 2 and "HTTP Not Found" in done.stderr, done.stderr
    assert site.hits["/404.png"] == 1, site.hits
    assert not list(out.glob(f"{FETCHED_PREFIX}*"))


@pytest.mark.slow  # a loopback server, as tests/storage/test_fetch's
def test_an_object_store_outs_spool_is_in_the_temporary_folder_and_goes(tmp_path, monkeypatch):
    """OUT on a store: the spool is a folder of the system's temporary one, there while the
    shards are written and gone after; each URL asked once."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    seen = []

    def spools(*_) -> None:  # the progress callback: called while the shards are written
        seen.extend((tmp_path / "tmp").glob(f"{FETCHED_PREFIX}*"))

    with serving() as site:
        src = _manifest(tmp_path, [site.url(path) for path in PATHS])
        options = PackOptions(workers=1, path_column="url", allow_private_urls=True,
                              dedup="exact")  # fmt: skip
        pack(src, "memory://urlspool/out", options, progress=spools)
    assert seen and sorted(site.hits.values()) == [1] * len(PATHS), site.hits
    assert not list((tmp_path / "tmp").iterdir())


@pytest.mark.slow  # a loopback server answering with latency
def test_the_dedup_pass_fetches_as_the_workers_together_and_no_more_to_a_host(tmp_path):
    """--dedup's pass keeps as many requests in flight as the run's workers would: workers x
    --per-host to one host, never more (before, one worker's: 2), and each worker's
    --url-threads apiece (one thread each: 2 in flight, not 1)."""
    paths = [f"/img/{i}.png" for i in range(24)]
    for threads, most in ((4, 2 * 2), (1, 2 * 1)):
        with serving(latency=0.05) as site:
            src = _manifest(tmp_path, [site.url(path) for path in paths])
            options = PackOptions(workers=2, per_host=2, url_threads=threads, dedup="exact",
                                  path_column="url", allow_private_urls=True)  # fmt: skip
            result = pack(src, tmp_path / f"out{threads}", options)
        assert result.num_records == len(paths)
        assert site.most == most, (threads, site.most)
        assert sorted(site.hits.values()) == [1] * len(paths), site.hits  # the pass's alone


@pytest.mark.slow  # a loopback server answering with latency
def test_the_dedup_pass_fetches_as_the_workers_the_pack_chose(tmp_path):
    """Without --workers, the pass fetches as the workers the pack then runs (chosen once, from
    the work: one for 24 small images), workers x --per-host to one host; before, as this
    machine's cores (2 x 2 here, where the pack ran 1)."""
    paths = [f"/img/{i}.png" for i in range(24)]
    with serving(latency=0.05) as site:
        src = _manifest(tmp_path, [site.url(path) for path in paths])
        options = PackOptions(per_host=2, url_threads=8, dedup="exact", path_column="url",
                              allow_private_urls=True)  # fmt: skip
        result = pack(src, tmp_path / "out", options)
    assert result.num_records == len(paths)
    assert site.most == result.index.stats.workers * 2, (site.most, result.index.stats)
    assert sorted(site.hits.values()) == [1] * len(paths), site.hits  # the pass's alone


def _interrupted(site, args: list[str], ready) -> forkserver.Child:
    """`shardpack ARGS` in a process of its own, sent SIGINT once `ready()` holds, while the
    site holds its held paths (60 s); it must end well before (20 s). The site's held paths
    are answered after."""
    run = forkserver.start(forkserver.SHARDPACK, *args, "--no-progress")
    try:
        helpers.wait_for(ready)
        run.send_signal(signal.SIGINT)
        stderr = run.communicate(timeout=20)[1]
        answered = set(site.held) & set(site.finished)  # none: the gate is shut
    finally:
        run.kill()
        site.gate.set()
    assert run.returncode == 130, stderr
    assert not answered, answered
    assert stderr.splitlines()[-1].startswith("interrupted") and "Traceback" not in stderr, stderr
    return run


@pytest.mark.slow  # a real process and a real signal
def test_ctrl_c_mid_pack_stops_at_once_and_leaves_no_spool(tmp_path):
    """Stopped by SIGINT while its --dedup pass waits for a URL the server holds (60 s), a
    pack ends before the server answers (its requests in flight cut, as a worker's are; before,
    it waited for the answer), says so in one line, exits 130 and leaves nothing it kept."""
    paths = [f"/img/{i}.png" for i in range(12)]
    with serving() as site:
        site.held = frozenset({"/img/5.png"})
        src, out = _manifest(tmp_path, [site.url(path) for path in paths]), tmp_path / "out"
        # once the URLs before the held one are read and kept, and the held one is asked
        _interrupted(site, ["pack", str(src), str(out), "--path-column", "url",
                            "--allow-private-urls", "--workers", "1", "--dedup", "exact"],
                     lambda: len(list(out.glob(f"{FETCHED_PREFIX}*/*"))) >= 5
                     and site.hits["/img/5.png"] == 1)  # fmt: skip
    assert not list(out.glob(f"{FETCHED_PREFIX}*")) and not (out / "index.json").exists()


@pytest.mark.slow  # a real process and a real signal
def test_ctrl_c_while_a_grows_dedup_pass_confirms_a_copy_stops_at_once(tmp_path):
    """A grow's --dedup pass fetches a held image to confirm a new copy of it (on the packing
    process's thread, the last URL it reads): stopped by SIGINT while the server holds that,
    the run ends before it answers (before, Prefetch.close waited for the request under way
    once no URL was left ahead of it)."""
    given = {"path_column": "url", "allow_private_urls": True, "workers": 1, "dedup": "exact"}
    with serving() as site:
        urls = [site.url(f"/twin/{i}.png") for i in range(4)]
        src, out = _manifest(tmp_path, urls), tmp_path / "out"
        pack(src, out, PackOptions(**given))
        site.hits.clear(), site.finished.clear()
        site.held = frozenset({"/twin/0.png", "/twin/1.png"})  # image 0's
        _manifest(tmp_path, [*urls, site.url("/img/10.png"), site.url("/img/0.png")])
        _interrupted(site, ["pack", str(src), str(out), "--path-column", "url",
                            "--allow-private-urls", "--workers", "1", "--dedup", "exact",
                            "--append"],
                     lambda: site.hits["/twin/0.png"] + site.hits["/twin/1.png"] == 1)  # fmt: skip
    assert not list(out.glob(f"{FETCHED_PREFIX}*"))


@pytest.mark.slow  # a real process and a real signal
def test_a_killed_runs_spool_is_removed_by_the_next_run(tmp_path):
    """SIGKILLed mid --dedup pass, a pack leaves its spool in OUT; the next run (under OUT's
    lock) removes it and packs every image as fetched by itself, each URL asked once more."""
    paths = [f"/img/{i}.png" for i in range(12)]
    with serving() as site:
        site.held = frozenset({"/img/5.png"})
        src, out = _manifest(tmp_path, [site.url(path) for path in paths]), tmp_path / "out"
        args = ["pack", str(src), str(out), "--path-column", "url", "--allow-private-urls",
                "--workers", "1", "--dedup", "exact", "--no-progress"]  # fmt: skip
        run = forkserver.start(forkserver.SHARDPACK, *args)
        try:
            # every URL asked (its answer kept or not), five kept: the next run asks each again
            helpers.wait_for(lambda: len(site.hits) == len(paths)
                             and len(list(out.glob(f"{FETCHED_PREFIX}*/*"))) >= 5)  # fmt: skip
            run.kill()
            run.wait()
        finally:
            run.kill()
            site.gate.set()
        (left,) = out.glob(f"{FETCHED_PREFIX}*")  # the killed run's
        done = helpers.run_cli(*args)
    assert done.returncode == 0, done.stderr
    assert not left.exists() and not list(out.glob(f"{FETCHED_PREFIX}*"))
    assert sorted(site.hits.values()) == [2] * len(paths), site.hits
    images = {record["caption"]: record["image"] for record in iter_examples(out)}
    assert images == {f"photo {i}": _png(i) for i in range(len(paths))}


@pytest.mark.slow  # real processes, a real signal, the loopback S3 server
def test_a_killed_runs_spool_for_a_store_is_removed_by_a_later_run_not_a_live_ones(
    tmp_path, s3, monkeypatch
):
    """OUT on a store: a run SIGKILLed mid --dedup pass leaves its spool in the system's
    temporary folder; a later run (of another OUT) removes it (before, it stayed for good),
    and not the spool of a run of yet another OUT alive all the while (its flock held)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the runs' processes'
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # this one's
    paths = [f"/img/{i}.png" for i in range(12)]

    def spools(fetched: int = 0) -> set[Path]:
        return {path for path in tmp.glob(f"{FETCHED_PREFIX}*")
                if len(list(path.iterdir())) >= fetched}  # fmt: skip

    with serving() as site:
        site.held = frozenset({"/img/5.png"})
        src = _manifest(tmp_path, [site.url(path) for path in paths])
        runs = []

        def start(out: str) -> None:  # the URLs before the held one fetched and kept, then
            runs.append(subprocess.Popen([sys.executable, "-m", "shardpack", "pack", str(src),
                                          s3.url(out), "--path-column", "url",
                                          "--allow-private-urls", "--workers", "1", "--dedup",
                                          "exact", "--no-progress"]))  # fmt: skip
            helpers.wait_for(lambda: len(spools(5)) == len(runs))

        try:
            start("alive")
            (alive,) = spools()
            start("killed")
            runs[1].kill()
            runs[1].wait()
            (left,) = spools() - {alive}
            other = _manifest(tmp_path, [site.url(f"/img/{i}.png") for i in range(20, 24)],
                              "other.csv")  # fmt: skip
            options = PackOptions(workers=1, path_column="url", allow_private_urls=True,
                                  dedup="exact")  # fmt: skip
            assert pack(other, s3.url("later"), options).num_records == 4
            assert not left.exists() and spools() == {alive} and len(list(alive.iterdir())) >= 5
        finally:
            for run in runs:
                run.kill()
                run.wait()
            site.gate.set()
