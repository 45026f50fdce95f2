"""What the command line prints for people: the pack summary, inspect's report, the progress
bar or lines, counts and byte sizes in words."""

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

import typer

from shardpack.errors import RESTORE_SHARD, classes_said, plural, printable, shortened
from shardpack.index import MAX_NAMED_SKIPPED, UNWRITTEN

# A bar appears only for runs that last longer than this: short runs just print the summary.
_BAR_DELAY_S = 1.0
# Where stderr is no terminal (a log file, CI), a progress line this often instead of the bar.
_LINE_EVERY_S = 10.0


def _own_stderr() -> TextIO:
    """A stream of the bar's own on what stderr is now: a decoder that points fd 2 at a sink
    for a moment (images._imdecode) must not swallow a progress line printed meanwhile. Where
    stderr has no descriptor (a test's capture), stderr itself."""
    try:
        fd = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return sys.stderr
    return os.fdopen(fd, "w", buffering=1, encoding="utf-8", errors="replace")


class Bar:
    """A rich progress bar on stderr with images/s and ETA, shown once a run passes one second;
    a line every _LINE_EVERY_S where stderr is no terminal. The rate counts from the first
    report, which holds the images of the shards a resume kept: new work only. `verb` says
    what the run does to the images (pack's, verify's, report's)."""

    def __init__(self, enabled: bool, verb: str = "packing") -> None:
        self.enabled = enabled
        self.verb = verb
        self.start = time.monotonic()
        self.progress = None
        self.first: tuple[float, int] | None = None  # (time, images done) of the first report
        self.line_due = self.start + _BAR_DELAY_S
        self.scan_line = False  # a terminal's "scanning" line is open: end it before the bar
        self.stream = _own_stderr() if enabled else sys.stderr

    def scanned(self, listed: int) -> None:
        """The scan's count of files listed, as a line: every _LINE_EVERY_S where stderr is no
        terminal, else one line rewritten in place; both once the run passes a second."""
        now = time.monotonic()
        if not self.enabled or now - self.start < _BAR_DELAY_S:
            return
        line = f"scanning: {plural(listed, 'file')} listed"
        if self.stream.isatty():
            self.scan_line = True
            print(f"\r{line}", end="", file=self.stream, flush=True)
        elif now >= self.line_due:
            self.line_due = now + _LINE_EVERY_S
            print(line, file=self.stream, flush=True)

    def _end_scan_line(self) -> None:
        """Ends the terminal's "scanning" line, so that what follows starts on its own."""
        if self.scan_line:
            self.scan_line = False
            print(file=self.stream, flush=True)

    def __call__(self, done: int, total: int) -> None:
        self._end_scan_line()
        now = time.monotonic()
        self.first = self.first or (now, done)
        if not self.enabled or now - self.start < _BAR_DELAY_S:
            return
        rate = (done - self.first[1]) / max(now - self.first[0], 1e-9)
        if not self.stream.isatty():
            if now >= self.line_due:
                self.line_due = now + _LINE_EVERY_S
                eta = f"{(total - done) / rate:,.0f} s" if rate > 0 else "unknown"
                print(f"{self.verb}: {done:,}/{total:,} images, {rate:,.0f} images/s, ETA {eta}",
                      file=self.stream, flush=True)  # fmt: skip
            return
        if self.progress is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn(self.verb),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>8.0f} images/s"),
                TimeRemainingColumn(),
                console=Console(file=self.stream, highlight=False),
            )
            self.progress.start()
            # from `done`: the kept shards' images are no progress for the ETA to count
            self.task = self.progress.add_task(self.verb, total=total, completed=done, rate=rate)
        self.progress.update(self.task, completed=done, rate=rate)

    def close(self) -> None:
        self._end_scan_line()
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        if self.stream is not sys.stderr:
            self.stream.close()
            self.stream = sys.stderr


def print_json(document: object) -> None:
    """The document as JSON text, UTF-8 throughout: a lone surrogate (a file name's byte that is
    no UTF-8, as os.fsdecode keeps it) as its JSON escape, which json.loads gives back."""
    text = json.dumps(document, indent=2, ensure_ascii=False)
    typer.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def _human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _order(shuffle: str, seed: int | None) -> str:
    """Which shuffle a pack used (index.json's `shuffle`), in words."""
    if shuffle == "none":
        return "none, as listed (no shuffle)"
    if shuffle == "window":
        return f"window shuffle, seed {seed} (ranges of the list's files, rows within a shard)"
    return f"global shuffle, seed {seed}"


def print_pack_summary(summary: dict, resumed: bool) -> None:
    total = sum(s["num_bytes"] for s in summary["splits"].values())
    shards = sum(s["num_shards"] for s in summary["splits"].values())
    rate = f"{summary['images_per_second'] or 0:,.0f} images/s with " + plural(
        summary["workers"], "worker"
    )
    head = (
        f"packed {plural(summary['records'], 'image')} into {plural(shards, 'shard')} "
        f"({_human_bytes(total)}) in {summary['seconds']:.2f} s"
    )
    grow = summary["grow"]
    if grow:  # this run's work: the new items, their count and rate (or none at all)
        dataset = (f"{plural(summary['records'], 'image')} in {plural(shards, 'shard')} "
                   f"({_human_bytes(total)})")  # fmt: skip
        if grow.get("nothing"):
            restored = grow.get("restored")
            what = ("no shard written; index.json now tells SRC's classes, copies, skips and "
                    "other files" if grow.get("retold") else "no shard written" if restored
                    else f"{summary['out']} is unchanged")  # fmt: skip
            if restored:  # removed by hand: made again from index.json
                what += f"; wrote again what OUT lacked ({', '.join(map(printable, restored))})"
            typer.echo(f"nothing to {'add' if grow['mode'] == 'append' else 'update'}: "
                       f"{what}, {dataset}")  # fmt: skip
        else:
            typer.echo(f"{grow['mode']}: wrote {plural(summary['new_records'], 'image')} in "
                       f"{summary['seconds']:.2f} s at {rate}; the dataset: {dataset}")  # fmt: skip
    elif resumed or summary["shards_kept"]:  # the rate is the new work's: kept shards cost
        # nothing this time (kept without --resume: the same job again over its dataset)
        kept = (
            f"kept {summary['shards_kept']:,} of {plural(shards, 'shard')} from an earlier run"
            if summary["shards_kept"]  # else a fresh folder, or another plan's: say so
            else "found no finished shard of this job to keep, packed from the start"
        )
        wrote = (f"wrote {plural(summary['new_records'], 'image')} at {rate}"
                 if summary["shards_kept"] < shards else "nothing left to write")  # fmt: skip
        typer.echo(f"{head}: {kept}, {wrote}")
    else:
        typer.echo(f"{head}: {rate}")
    if not grow and summary.get("shuffle"):
        typer.echo(f"order: {_order(summary['shuffle'], summary['seed'])}")
    width = max(map(len, [*summary["splits"], *summary["unwritten_splits"]]), default=0)
    for name, split in summary["splits"].items():
        typer.echo(
            f"  {name:<{width}} {plural(split['num_records'], 'record'):>17}  "
            f"{plural(split['num_shards'], 'shard'):>12}  {_human_bytes(split['num_bytes']):>10}"
        )
    for name in summary["unwritten_splits"]:
        typer.echo(f"  {name:<{width}} {UNWRITTEN}")
    _print_classes_and_features(summary)
    if grow and not grow.get("nothing"):
        typer.echo(f"{grow['mode']}: added {grow['added']:,}, changed {grow['changed']:,}, "
                   f"removed {grow['removed']:,}; {plural(grow['shards_rewritten'], 'shard')} "
                   "rewritten")  # fmt: skip
    if summary["lossless"]:
        made = plural(summary["lossless"], "image")
        typer.echo(f"re-encoded {made} TensorFlow cannot decode (CMYK JPEG, GIF, ...) as "
                   "PNG, losslessly")  # fmt: skip
    if turned := summary["turned_upright"]:
        typer.echo(f"re-encoded {plural(turned, 'image')} with an EXIF orientation upright, "
                   "its objects with it: datasets shows images upright")  # fmt: skip
    if summary["skipped"]:
        _print_skipped(summary)
    if dropped := summary.get("boxes_dropped"):
        said = ", ".join(f"{printable(reason)} {n:,}" for reason, n in dropped.items())
        typer.echo(f"boxes dropped: {said}")  # the reasons say why: not all are "nothing left"
    if failures := summary.get("url_failures"):
        said = ", ".join(f"{printable(kind)} {n:,}" for kind, n in failures.items())
        # failures.jsonl's rows: the URLs that failed and the list's bad rows (some name none)
        typer.echo(f"URL list rows skipped: {said} (each in {summary['out']}/failures.jsonl)")
    _print_duplicates_and_ignored(summary["duplicates"], summary["ignored"],
                                  summary["ignored_files"])  # fmt: skip
    if not summary["tfds_metadata"]:
        what = "GZIP" if summary["compression"] == "gzip" else summary["container"]
        typer.echo(f"no TFDS metadata: TFDS cannot read {what} shards")
    typer.echo(f"index: {summary['out']}/index.json")


def _print_skipped(summary: dict) -> None:
    """The skipped items' count, the first few named, and the reasons of all counted."""
    many = summary["skipped"] > MAX_NAMED_SKIPPED
    listed = f"the first {MAX_NAMED_SKIPPED:,}" if many else "all"
    typer.echo(f"skipped {plural(summary['skipped'], 'item')} ({listed} listed in index.json):")
    for item in summary["skipped_items"][:_SHOWN_SKIPPED]:
        typer.echo(f"  {printable(item['key'])}: {printable(item['reason'])}")
    if summary["skipped"] > _SHOWN_SKIPPED:  # the others' reasons may be none of those
        said = ", ".join(f"{printable(kind)} {n:,}" for kind, n in
                         summary["skip_reasons"].items())  # fmt: skip
        of = f" (of the first {MAX_NAMED_SKIPPED:,})" if many else ""
        typer.echo(f"  by reason{of}: {said}")


def _print_classes_and_features(summary: dict) -> None:
    """The class list (the first few) and every feature beyond the image's: a changed class list
    or a lost label column shows in the summary."""
    objects = summary.get("object_classes")
    if summary["num_classes"]:
        typer.echo(_classes_line(summary["num_classes"], summary["classes"], "class", "classes"))
    elif objects:  # COCO, YOLO, VOC: the images hold no label, their objects do
        of = f"({printable(objects['feature'])})"
        said = _classes_line(objects["num_classes"], objects["classes"], f"object class {of}",
                             f"object classes {of}")  # fmt: skip
        typer.echo(f"no image classes; {said}")
    else:
        typer.echo("no classes: unlabeled")
    features = [f"{printable(name)} ({kind})" for name, kind in summary["features"].items()]
    typer.echo(f"features: {', '.join(features) or 'the image only'}")


_SHOWN_SKIPPED = 5  # of a summary's skipped items, named one a line
_SHOWN_CLASSES = 8  # of a summary's class list: one line on a terminal


def _classes_line(count: int, names: list, one: str, many: str) -> str:
    """'3 classes: a, b, c', the first few names (_SHOWN_CLASSES) of `count`."""
    shown = names[:_SHOWN_CLASSES]
    more = ", ..." if count > len(shown) else ""
    return f"{plural(count, one, many)}: {', '.join(map(printable, shown))}{more}"


def print_inspect(summary: dict) -> None:
    """inspect's report: splits, shards, the class histogram, sample records, what is missing."""
    from shardpack.read.describe import history_lines, summary_lines  # numpy: not for --help

    classes = classes_said(summary["num_classes"], summary.get("num_object_classes", 0))
    typer.echo(
        f"{printable(summary['name'])}  ({printable(str(summary['source']))}, encoding "
        f"{printable(summary['encoding'])}, compression {summary['compression']}, "
        f"{summary['container']} shards, {classes})"
    )
    for line in history_lines(summary["history"]):  # a grown dataset's runs
        typer.echo(line)
    for name, split in summary["splits"].items():
        typer.echo(
            f"\nsplit {printable(name)}: {plural(split['num_records'], 'record')} in "
            f"{plural(split['num_shards'], 'shard')}, {_human_bytes(split['num_bytes'])}"
        )
        for shard in split["shards"][:8]:
            typer.echo(f"  {shard['file']}  {plural(shard['num_records'], 'record'):>16}  "
                       f"{_human_bytes(shard['num_bytes']):>10}"
                       f"{'  gen ' + str(shard['generation']) if shard['generation'] else ''}"
                       f"{_shard_fault(shard)}")  # fmt: skip
        if len(split["shards"]) > 8:
            typer.echo(f"  ... {plural(len(split['shards']) - 8, 'more shard')}")
        most = max(split["class_counts"].values(), default=0) or 1
        if split["class_counts"]:  # none for an unlabeled or objects-only dataset: no heading
            typer.echo("  classes:")
        for cls, count in list(split["class_counts"].items())[:20]:
            bar = "#" * round(30 * count / most)
            typer.echo(f"    {printable(cls)[:20]:<20} {count:>8,}  {bar}")
        if len(split["class_counts"]) > 20:
            more = len(split["class_counts"]) - 20
            typer.echo(f"    ... {plural(more, 'more class', 'more classes')}")
        for line in summary_lines(summary["summaries"].get(name)):
            typer.echo(line)
        for record in split["samples"]:
            typer.echo(_record_line(record))
    for name in summary["unwritten_splits"]:
        typer.echo(f"\nsplit {printable(name)}: {UNWRITTEN}")
    missing = [s["file"] for split in summary["splits"].values() for s in split["shards"]
               if s["missing"]]  # fmt: skip
    for fault in summary["index_faults"]:  # the shards' own total shown instead
        print(f"warning: {printable(fault)} (shown: what the shards hold, as every reader reads "
              "them)", file=sys.stderr)  # fmt: skip
    if missing:
        print(f"warning: {plural(len(missing), 'shard')} the index lists not in OUT "
              f"({missing[0]}{', ...' if len(missing) > 1 else ''}); shardpack verify checks "
              "every shard", file=sys.stderr)  # fmt: skip
    resized = [s["file"] for split in summary["splits"].values() for s in split["shards"]
               if not s["missing"] and s["size_on_disk"] != s["num_bytes"]]  # fmt: skip
    if resized:
        print(f"warning: {plural(len(resized), 'shard')} of another size than the index says "
              f"({resized[0]}{', ...' if len(resized) > 1 else ''}): cut short or replaced; "
              f"for each, {RESTORE_SHARD} (shardpack verify checks every shard)",
              file=sys.stderr)  # fmt: skip
    if summary["num_skipped"]:
        typer.echo(f"\nskipped {plural(summary['num_skipped'], 'item')} at pack time")
    _print_duplicates_and_ignored(summary["duplicates"], summary["ignored"])


def _shard_fault(shard: dict) -> str:
    """inspect's mark of a shard missing from OUT or of another size than the index says."""
    if shard["missing"]:
        return "  MISSING"
    if shard["size_on_disk"] != shard["num_bytes"]:  # cut short or replaced
        return f"  WRONG SIZE ({shard['size_on_disk']:,} bytes; index.json: {shard['num_bytes']:,})"
    return ""


def _print_duplicates_and_ignored(duplicates: dict, ignored: int, named: Sequence = ()) -> None:
    """The copies found, and how many files the scan passed over (the first few named)."""
    from shardpack.packing.duplicates import lines  # pack or inspect imported it: no cost

    for line in lines(duplicates):
        typer.echo(line)
    if ignored:
        # not "not images": a JPEG without an extension, or one a COCO JSON does not list, is one
        what = plural(ignored, "file not taken for an image", "files not taken for images")
        more = ", ..." if ignored > 5 else ""
        shown = f": {', '.join(map(printable, named[:5]))}{more}" if named else ""
        typer.echo(f"ignored {what}{shown}")
        from shardpack.sources.folder import unread_photos  # the CLI imported it: no cost

        if hint := unread_photos(named):
            typer.echo(f"  {hint}")


# What a sample record's line names on its own; any other feature is shown as name=value.
_SHOWN = {"key", "label", "class", "format", "height", "width", "channels", "image_bytes"}


def _short(value: object) -> str:
    """A feature value for one line: floats to 4 significant digits, lists element-wise."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)


def _record_line(record: dict) -> str:
    """One line for a sample record of `inspect`: key, label(s) and class(es), image, extras."""
    names = record.get("class")
    if names is None:
        label = "no label"
    elif isinstance(names, list):  # multi-label
        label = f"labels {record['label']} ({', '.join(printable(n) for n in names)})"
    else:
        label = f"label {record['label']} ({printable(names)})"
    extras = "".join(
        f", {printable(name)}={shortened(printable(_short(value)), 60)}"
        for name, value in record.items()
        if name not in _SHOWN
    )
    return (
        f"  record {printable(record['key'])}: {label}, {record['format']} "
        f"{record['height']}x{record['width']}x{record['channels']} (HxWxC), "
        f"{plural(record['image_bytes'], 'byte')}{extras}"
    )
