"""The shardpack command line: parse, call the library, print. Nothing else lives here."""

from __future__ import annotations

import json
import signal
import sys
import time
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from shardpack.errors import ShardpackError
from shardpack.options import (
    BACKENDS,
    CHECKS,
    COMPRESSIONS,
    DEFAULT_MAX_PIXELS,
    ENCODINGS,
    ON_ERROR,
    SOURCE_KINDS,
    PackOptions,
    parse_resize,
    parse_size,
)

app = typer.Typer(
    help="Pack image datasets into sharded TFRecords, in parallel, and read them back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# A bar appears only for runs that last longer than this: short runs just print the summary.
_BAR_DELAY_S = 1.0


def _stderr():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


@contextmanager
def _user_errors():
    """Turn a ShardpackError into one line on stderr and exit code 2; a traceback is a bug."""
    try:
        yield
    except ShardpackError as e:
        _stderr().print(f"[bold red]error:[/] {e}", markup=True, soft_wrap=True)
        raise typer.Exit(2) from None


class _Bar:
    """A rich progress bar on stderr with images/s and ETA, shown once a run passes one second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.start = time.monotonic()
        self.progress = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or time.monotonic() - self.start < _BAR_DELAY_S:
            return
        if self.progress is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("packing"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>8.0f} images/s"),
                TimeRemainingColumn(),
                console=_stderr(),
            )
            self.progress.start()
            self.task = self.progress.add_task("pack", total=total, rate=0.0)
        rate = done / max(time.monotonic() - self.start, 1e-9)
        self.progress.update(self.task, completed=done, rate=rate)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _print_json(document: object) -> None:
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False))


def _human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _print_pack_summary(summary: dict) -> None:
    total = sum(s["num_bytes"] for s in summary["splits"].values())
    shards = sum(s["num_shards"] for s in summary["splits"].values())
    typer.echo(
        f"packed {summary['records']} images into {shards} shards ({_human_bytes(total)}) in "
        f"{summary['seconds']:.2f} s: {summary['images_per_second'] or 0:.0f} images/s with "
        f"{summary['workers']} workers"
    )
    for name, split in summary["splits"].items():
        typer.echo(
            f"  {name:<6} {split['num_records']:>9} records  {split['num_shards']:>5} shards  "
            f"{_human_bytes(split['num_bytes']):>10}"
        )
    if summary["skipped"]:
        typer.echo(f"skipped {summary['skipped']} bad files (all listed in index.json):")
        for item in summary["skipped_items"][:5]:
            typer.echo(f"  {item['key']}: {item['reason']}")
    if summary["ignored"]:
        typer.echo(f"ignored {summary['ignored']} files that are not images")
    if not summary["tfds_metadata"]:
        typer.echo("no TFDS metadata: TFDS cannot read GZIP shards (pack without compression)")
    typer.echo(f"index: {summary['out']}/index.json")


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that a run cleans up as it does on Ctrl-C."""


def _on_sigterm(signum, frame) -> None:
    raise _Terminated


def _stopped(what: str, code: int) -> None:
    print(f"{what}: no index written; rerun with --resume to continue", file=sys.stderr)
    raise typer.Exit(code)


def _run_pack(src: Path, out: Path, options: PackOptions, progress: bool, as_json: bool) -> None:
    from shardpack.packer import pack

    bar = _Bar(progress)
    try:
        result = pack(src, out, options, progress=bar)
    except KeyboardInterrupt:
        _stopped("interrupted", 130)
    except _Terminated:
        _stopped("terminated", 143)
    finally:
        bar.close()
    summary = result.to_json()
    _print_json(summary) if as_json else _print_pack_summary(summary)


def _choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """An Enum typer can show as a choice list, built from the library's own tuple."""
    return Enum(name, {v: v for v in values}, type=str)


Source = _choices("Source", SOURCE_KINDS)
Backend = _choices("Backend", BACKENDS)
Encoding = _choices("Encoding", ENCODINGS)
Check = _choices("Check", CHECKS)
OnError = _choices("OnError", ON_ERROR)
Compression = _choices("Compression", COMPRESSIONS)

_JSON = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
_NO_PROGRESS = Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")]


@app.command()
def pack(
    src: Annotated[Path, typer.Argument(help="Class-folder tree or folder of CIFAR batches.")],
    out: Annotated[Path, typer.Argument(help="Output folder (created if missing).")],
    source: Annotated[Source, typer.Option(help="Layout of SRC.")] = Source.auto,
    name: Annotated[
        Optional[str], typer.Option(help="Dataset name in shard file names [default: SRC's].")
    ] = None,
    shards: Annotated[
        Optional[int], typer.Option(min=1, help="Shards per split [default: by --shard-size].")
    ] = None,
    shard_size: Annotated[
        str, typer.Option(help="Target shard size when --shards is not given.")
    ] = "128MiB",
    workers: Annotated[
        Optional[int], typer.Option(min=1, help="Worker processes [default: all cores].")
    ] = None,
    backend: Annotated[
        Backend, typer.Option(help="loky: this machine's cores; dask: a Dask cluster.")
    ] = Backend.loky,
    scheduler: Annotated[
        Optional[str],
        typer.Option(help="Dask scheduler address [default: a local cluster of --workers]."),
    ] = None,
    encode: Annotated[
        Encoding,
        typer.Option(
            help="keep: JPEG/PNG bytes untouched, others to PNG; raw: uint8 HWC RGB pixels.",
        ),
    ] = Encoding.keep,
    quality: Annotated[int, typer.Option(min=1, max=100, help="JPEG/WebP quality.")] = 95,
    max_side: Annotated[
        Optional[int], typer.Option(min=1, help="Shrink so the longer side is at most N.")
    ] = None,
    resize: Annotated[Optional[str], typer.Option(help="Resize every image to WxH.")] = None,
    check: Annotated[
        Check,
        typer.Option(
            help="header: check structure without decoding kept bytes; decode: every pixel.",
        ),
    ] = Check.header,
    on_error: Annotated[
        OnError,
        typer.Option(
            help="skip: record a bad image in the index and go on; fail: stop the run.",
        ),
    ] = OnError.skip,
    compression: Annotated[
        Compression, typer.Option(help="TFRecord compression.")
    ] = Compression.none,
    seed: Annotated[int, typer.Option(help="Shuffle seed.")] = 0,
    shuffle: Annotated[
        bool, typer.Option("--shuffle/--no-shuffle", help="Shuffle before sharding.")
    ] = True,
    max_pixels: Annotated[
        int, typer.Option(min=1, help="Refuse images claiming more pixels (decompression bombs).")
    ] = DEFAULT_MAX_PIXELS,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a different dataset already in OUT.")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Keep the shards an interrupted run of this job finished."),
    ] = False,
    index_files: Annotated[
        bool, typer.Option("--index-files", help="Also write DALI index files (OUT/idx/).")
    ] = False,
    no_progress: _NO_PROGRESS = False,
    as_json: _JSON = False,
) -> None:
    """Pack SRC into sharded TFRecords and OUT/index.json."""
    with _user_errors():
        options = PackOptions(
            name=name,
            source=source.value,
            shards=shards,
            shard_size=parse_size(shard_size),
            workers=workers,
            backend=backend.value,
            scheduler=scheduler,
            encode=encode.value,
            quality=quality,
            max_side=max_side,
            resize=parse_resize(resize) if resize else None,
            check=check.value,
            on_error=on_error.value,
            compression=compression.value,
            seed=seed,
            shuffle=shuffle,
            max_pixels=max_pixels,
            overwrite=overwrite,
            resume=resume,
            index_files=index_files,
        )
        _run_pack(src, out, options, not no_progress, as_json)


@app.command()
def verify(
    out: Annotated[Path, typer.Argument(help="Output folder of a pack run.")],
    decode: Annotated[bool, typer.Option("--decode", help="Also decode every image.")] = False,
    as_json: _JSON = False,
) -> None:
    """Re-read every shard and check CRCs, counts, sizes and sha256 against the index."""
    from shardpack.verifier import verify as run_verify

    with _user_errors():
        report = run_verify(out, decode=decode)
    if as_json:
        _print_json(report.to_json())
    else:
        for fault in report.faults:
            typer.echo(f"FAULT {fault}", err=True)
        verdict = "OK" if report.ok else f"{len(report.faults)} FAULTS"
        checks = "CRC, counts, sha256" + (", decode" if decode else "")
        typer.echo(f"{verdict}: {report.shards} shards, {report.records} records ({checks})")
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def inspect(
    out: Annotated[Path, typer.Argument(help="Output folder of a pack run.")],
    records: Annotated[int, typer.Option(min=0, help="Records to show per split.")] = 3,
    as_json: _JSON = False,
) -> None:
    """Summarize a pack output: splits, shards, sizes, class histogram, a few records."""
    from shardpack.inspection import describe, printable

    with _user_errors():
        summary = describe(out, records)
    if as_json:
        _print_json(summary)
        return
    typer.echo(
        f"{summary['name']}  ({summary['source']}, encoding {summary['encoding']}, "
        f"compression {summary['compression']}, {summary['num_classes']} classes)"
    )
    for name, split in summary["splits"].items():
        typer.echo(
            f"\nsplit {printable(name)}: {split['num_records']} records in "
            f"{split['num_shards']} shards, {_human_bytes(split['num_bytes'])}"
        )
        for shard in split["shards"][:8]:
            typer.echo(f"  {shard['file']}  {shard['num_records']:>8} records  "
                       f"{_human_bytes(shard['num_bytes']):>10}")  # fmt: skip
        if len(split["shards"]) > 8:
            typer.echo(f"  ... {len(split['shards']) - 8} more shards")
        most = max(split["class_counts"].values(), default=0) or 1
        typer.echo("  classes:")
        for cls, count in list(split["class_counts"].items())[:20]:
            bar = "#" * round(30 * count / most)
            typer.echo(f"    {printable(cls)[:20]:<20} {count:>8}  {bar}")
        if len(split["class_counts"]) > 20:
            typer.echo(f"    ... {len(split['class_counts']) - 20} more classes")
        for record in split["samples"]:
            typer.echo(
                f"  record {printable(record['key'])}: label {record['label']} "
                f"({printable(record['class'])}), "
                f"{record['format']} {record['width']}x{record['height']}x{record['channels']}, "
                f"{record['image_bytes']} bytes"
            )
    if summary["skipped"]:
        typer.echo(f"\nskipped {len(summary['skipped'])} files at pack time")
    if summary["ignored"]:
        typer.echo(f"ignored {summary['ignored']} files that are not images")


@app.command("index-files")
def index_files(out: Annotated[Path, typer.Argument(help="Output folder of a pack run.")]) -> None:
    """Write one DALI tfrecord2idx index file per shard (OUT/idx/), for random access."""
    from shardpack.recordindex import write_index_files

    with _user_errors():
        written = write_index_files(out)
    typer.echo(f"wrote {len(written)} index files in {out / 'idx'}")


@app.command()
def preview(
    out: Annotated[Path, typer.Argument(help="Output folder of a pack run.")],
    split: Annotated[str, typer.Option(help="Split to draw from.")] = "train",
    n: Annotated[int, typer.Option("--n", min=1, help="Records to show.")] = 64,
    dest: Annotated[Path, typer.Option("--out", help="PNG to write.")] = Path("preview.png"),
    seed: Annotated[int, typer.Option(help="Which random records.")] = 0,
) -> None:
    """Draw a contact sheet of random records with their class names under each."""
    from shardpack.preview import make_preview

    with _user_errors():
        path = make_preview(out, dest, split, n, seed)
    typer.echo(f"wrote {path}")


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def bench(ctx: typer.Context) -> None:
    """Benchmark against the single-writer baseline (options: shardpack bench --help).

    Runs the harness in benchmarks/ of a source checkout, e.g.
    `shardpack bench photos --encode jpeg --workers 1,2 --repeat 3 --json out.json`.
    """
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "benchmarks" / "run.py").is_file():
        _stderr().print("error: shardpack bench runs from a source checkout (benchmarks/ missing)")
        raise typer.Exit(2)
    sys.path.insert(0, str(checkout))
    from benchmarks.run import main as run_benchmarks

    with _user_errors():
        code = run_benchmarks(ctx.args)
    raise typer.Exit(code)


@app.command()
def demo(
    out: Annotated[Path, typer.Argument(help="Folder for the sample images and shards.")],
    per_class: Annotated[int, typer.Option(min=1, help="Images per class.")] = 200,
    workers: Annotated[
        Optional[int], typer.Option(min=1, help="Worker processes [default: all cores].")
    ] = None,
    no_progress: _NO_PROGRESS = False,
    as_json: _JSON = False,
) -> None:
    """Draw a small labelled sample set (OUT/sample) and pack it (OUT/shards)."""
    from shardpack.demo import make_sample

    with _user_errors():
        sample = make_sample(out / "sample", per_class=per_class)
        if not as_json:
            typer.echo(f"drew {per_class * 5} sample images in {sample}")
        options = PackOptions(workers=workers, shards=4, overwrite=True)
        _run_pack(Path(sample), out / "shards", options, not no_progress, as_json)
    if not as_json:
        typer.echo(
            f"next: shardpack verify {out / 'shards'}  |  shardpack inspect {out / 'shards'}"
        )


def main() -> None:
    """Console entry point: usage errors and interrupts end in one line, never a traceback.

    Exit codes: 0 done, 1 verify found faults, 2 bad input, 130 Ctrl-C, 143 SIGTERM.
    """
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(standalone_mode=False)
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    except _Terminated:
        sys.exit(143)
    except Exception as e:
        # Usage errors come from click (vendored inside newer typer): they carry these two.
        if not (hasattr(e, "format_message") and hasattr(e, "exit_code")):
            raise
        ctx = getattr(e, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        print(f"error: {e.format_message()}{hint}", file=sys.stderr)
        sys.exit(e.exit_code)
    sys.exit(code or 0)
