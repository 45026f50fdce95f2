"""The shardpack command line: parse, call the library, print. Nothing else lives here.

Start-up stays light (`shardpack --help` imports typer and this module, nothing heavy): each
command imports the library modules it needs, and help is plain text, without rich.
"""

import os
import shlex
import shutil
import signal
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

from shardpack import __version__
from shardpack.console import Bar, plural, print_inspect, print_json, print_pack_summary
from shardpack.containers import CONTAINERS
from shardpack.errors import FileAccessError, OutputError, ShardpackError, printable
from shardpack.options import (
    BACKEND_ALIASES,
    BACKENDS,
    CHECKS,
    DEDUP,
    DEFAULT_FORMAT,
    DEFAULT_MAX_PIXELS,
    ENCODINGS,
    NEAR_DISTANCE,
    ON_ERROR,
    SPLIT_NAMES,
    PackOptions,
    as_flags,
    parse_color,
    parse_resize,
    parse_size,
    parse_split,
)
from shardpack.sources import source_choices, sources_described
from shardpack.sources.classlist import parse_classes
from shardpack.storage import is_url, parse_options

app = typer.Typer(
    help="Pack image datasets into shards (TFRecord, ArrayRecord, WebDataset) in parallel, "
    "and read them back.",
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: rich's formatter costs ~0.1 s of imports on every start, and shows flags as
    # if they took a <bool> value.
    rich_markup_mode=None,
)


class _Command(typer.core.TyperCommand):
    """A command whose usage line reads `pack [OPTIONS] SRC OUT` (typer writes `{SRC} {OUT}`)."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p[:1] == "{" and p[-1:] == "}" else p for p in pieces]


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Pack image datasets into shards (TFRecord, ArrayRecord, WebDataset) in parallel, and read
    them back."""
    if version:
        typer.echo(f"shardpack {__version__}")
        raise typer.Exit
    if ctx.invoked_subcommand is None:  # bare `shardpack`: the help, not an error
        typer.echo(ctx.get_help())
        raise typer.Exit


def _error(message: str) -> None:
    """One line on stderr: a name from SRC or OUT in it (a control character, a line break)
    is escaped, never sent to the terminal as it is."""
    typer.echo(f"{typer.style('error:', fg='red', bold=True)} {printable(message)}", err=True)


@contextmanager
def _user_errors():
    """The error boundary of every command: a ShardpackError, an OSError from any file
    operation, or what an object store's client raised, ends in one line on stderr naming the
    path and the fix, and exit code 2."""
    try:
        yield
    except ShardpackError as e:
        _error(str(e))
        raise typer.Exit(2) from None
    except BrokenPipeError:
        raise  # the reader of our output went away (`| head`): not a file of the user's
    except OSError as e:
        _error(str(FileAccessError.from_os_error(e)))
        raise typer.Exit(2) from None
    except Exception as e:  # from an object store's client: refused, unreachable, misnamed
        from shardpack.storage import store_failure

        message = store_failure(e)
        if message is None:
            raise
        _error(message)
        raise typer.Exit(2) from None


def _command_name() -> str:
    """How to run shardpack again as this process was run, for the lines that suggest a next
    command: `.venv/bin/shardpack` stays so when it is not on PATH."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "__main__.py":  # python -m shardpack
        python = "python" if shutil.which("python") == sys.executable else sys.executable
        return f"{shlex.quote(python)} -m shardpack"
    if not argv0 or shutil.which("shardpack") == os.path.abspath(argv0):
        return "shardpack"
    return shlex.quote(argv0)


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that a run cleans up as it does on Ctrl-C."""


def _on_sigterm(signum, frame) -> None:
    raise _Terminated


def _stopped(what: str, code: int, bar: Bar) -> NoReturn:
    bar.close()  # its last frame before the line that says why, not after it
    print(f"{what}: no index written; rerun with --resume to continue", file=sys.stderr)
    raise typer.Exit(code)


def _run_pack(
    src: str,
    out: str,
    options: PackOptions,
    progress: bool,
    as_json: bool,
    storage_options: dict | None = None,
) -> None:
    from shardpack.packing.outdir import PlanChanged
    from shardpack.packing.packer import pack

    bar = Bar(progress)
    try:
        result = pack(src, out, options, progress=bar, storage_options=storage_options,
                      scan_progress=bar.scanned)  # fmt: skip
    except PlanChanged as e:  # phrased for Python callers: name the flags
        raise OutputError(as_flags(str(e))) from None
    except KeyboardInterrupt:
        _stopped("interrupted", 130, bar)
    except _Terminated:
        _stopped("terminated", 143, bar)
    finally:
        bar.close()
    summary = result.to_json()
    for warning in summary["warnings"]:
        print(f"warning: {printable(warning)}", file=sys.stderr)
    print_json(summary) if as_json else print_pack_summary(summary, options.resume)


def _out_options(out: str, pairs: list[str] | None) -> dict[str, object]:
    """--storage-option of a command that reads OUT; a warning when OUT is a local path, for
    which they mean nothing (pack's may be for a manifest's image URLs: no warning there)."""
    options = parse_options(pairs or ())
    if options and not is_url(out):
        print(f"warning: --storage-option is for a URL (s3://...), and {out} is a local path: "
              "it is not used", file=sys.stderr)  # fmt: skip
    return options


def _choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """An Enum typer can show as a choice list, built from the library's own tuple."""
    return Enum(name, {v: v for v in values}, type=str)


Source = _choices("Source", source_choices())
Backend = _choices("Backend", (*BACKENDS, *BACKEND_ALIASES))
Encoding = _choices("Encoding", ENCODINGS)
Check = _choices("Check", CHECKS)
OnError = _choices("OnError", ON_ERROR)
Format = _choices("Format", tuple(CONTAINERS))
_FORMAT_HELP = "Shard container: " + "; ".join(f"{n} ({CONTAINERS.readers(n)})" for n in CONTAINERS)
_FORMAT_HELP += "."
Dedup = _choices("Dedup", DEDUP)

_JSON = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
_NO_PROGRESS = Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")]
_OUT = Annotated[
    str, typer.Argument(metavar="OUT", help="Output folder or URL (s3://...) of a pack run.")
]
_STORAGE_OPTIONS = Annotated[
    Optional[list[str]],
    typer.Option(
        "--storage-option",
        metavar="KEY=VALUE",
        help="An option for a URL's filesystem (s3fs, gcsfs, ...); repeatable.",
    ),
]
_WORKERS = Annotated[
    Optional[int],
    typer.Option(metavar="N", min=1, help="Worker processes.  [default: by the work]"),
]
_ROOT = Annotated[
    Optional[str],
    typer.Option(
        metavar="DIR",
        help="Folder a manifest's relative image paths are under.  [default: its folder]",
    ),
]


@app.command(cls=_Command)
def pack(
    src: Annotated[
        str,
        typer.Argument(
            metavar="SRC",
            help=f"A path or a URL: {sources_described()}.",
        ),
    ],
    out: Annotated[
        str, typer.Argument(metavar="OUT", help="Output folder or URL (created if missing).")
    ],
    source: Annotated[Source, typer.Option(help="Layout of SRC.")] = Source.auto,
    name: Annotated[
        Optional[str],
        typer.Option(
            metavar="NAME",
            help="Dataset name in shard file names.  [default: SRC's name, without a "
            "manifest's extension; a run of characters but ASCII letters, digits, '_' and '.' as "
            "one '_']",
        ),
    ] = None,
    shards: Annotated[
        Optional[int],
        typer.Option(metavar="N", min=1, help="Shards per split.  [default: by --shard-size]"),
    ] = None,
    shard_size: Annotated[
        str, typer.Option(metavar="SIZE", help="Target shard size when --shards is not given.")
    ] = "128MiB",
    workers: _WORKERS = None,
    backend: Annotated[
        Backend,
        typer.Option(help="local: this machine's cores (loky: the same); dask: a Dask cluster."),
    ] = Backend("local"),
    scheduler: Annotated[
        Optional[str],
        typer.Option(
            metavar="ADDRESS",
            help="Dask scheduler address.  [default: a local cluster of --workers]",
        ),
    ] = None,
    encode: Annotated[
        Encoding,
        typer.Option(
            help="keep: JPEG/PNG bytes untouched, others to PNG; raw: uint8 HWC RGB pixels.",
        ),
    ] = Encoding.keep,
    quality: Annotated[
        int, typer.Option(metavar="Q", min=1, max=100, help="JPEG/WebP quality.")
    ] = 95,
    max_side: Annotated[
        Optional[int],
        typer.Option(metavar="N", min=1, help="Shrink so the longer side is at most N pixels."),
    ] = None,
    resize: Annotated[
        Optional[str], typer.Option(metavar="WxH", help="Resize every image to W x H pixels.")
    ] = None,
    resize_mode: Annotated[
        str,
        typer.Option(
            metavar="MODE",
            help="How --resize meets the aspect: stretch, center-crop, pad, keep-ratio "
            "(shorter side to the size), keep-ratio-largest (longer side); img2dataset's "
            "names too.",
        ),
    ] = "stretch",
    pad_color: Annotated[
        str, typer.Option(metavar="COLOR", help="pad's border: white, black, #RRGGBB or R,G,B.")
    ] = "white",
    upscale: Annotated[
        bool,
        typer.Option("--upscale/--no-upscale", help="Enlarge images smaller than --resize."),
    ] = True,
    min_side: Annotated[
        Optional[int],
        typer.Option(metavar="N", min=1, help="Skip images whose shorter side is under N."),
    ] = None,
    max_aspect: Annotated[
        Optional[float],
        typer.Option(metavar="R", help="Skip images whose long side is over R x the short."),
    ] = None,
    max_area: Annotated[
        Optional[int], typer.Option(metavar="P", min=1, help="Skip images of over P pixels.")
    ] = None,
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
        str,
        typer.Option(
            metavar="NAME", help="Shard compression, one the --format takes (none: any format)."
        ),
    ] = "none",
    fmt: Annotated[
        Format,
        typer.Option("--format", help=_FORMAT_HELP),
    ] = Format(DEFAULT_FORMAT),
    seed: Annotated[int, typer.Option(metavar="N", help="Shuffle seed.")] = 0,
    shuffle: Annotated[
        bool, typer.Option("--shuffle/--no-shuffle", help="Shuffle before sharding.")
    ] = True,
    max_pixels: Annotated[
        int,
        typer.Option(
            metavar="N", min=1, help="Refuse images claiming more pixels (decompression bombs)."
        ),
    ] = DEFAULT_MAX_PIXELS,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a different dataset already in OUT.")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Keep the shards an interrupted run of this job finished."),
    ] = False,
    append: Annotated[
        bool,
        typer.Option("--append", help="Add SRC's new items to the dataset in OUT, in new shards."),
    ] = False,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Make OUT hold exactly SRC's items: --append, and rewrite the shards of "
            "changed or removed ones.",
        ),
    ] = False,
    index_files: Annotated[
        bool, typer.Option("--index-files", help="Also write DALI index files (OUT/idx/).")
    ] = False,
    classes: Annotated[
        str | None,
        typer.Option(
            metavar="NAMES|FILE",
            help="Pin the class list and order: a,b,c or a file with one name a line.",
        ),
    ] = None,
    splits: Annotated[
        str | None,
        typer.Option(
            metavar="NAMES",
            help="Folder names that make SRC a split tree (default: train, val, ...).",
        ),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            metavar="NAME=FRACTION,...",
            help="Split a one-split source: train=0.9,validation=0.1 (seeded, stratified).",
        ),
    ] = None,
    path_column: Annotated[
        Optional[str],
        typer.Option(
            metavar="NAME",
            help="A manifest's column of image paths.  [default: "
            "path, image, file, file_name or filename]",
        ),
    ] = None,
    root: _ROOT = None,
    dedup: Annotated[
        Dedup,
        typer.Option(
            help="none: report exact copies; exact: also keep one (test's first); "
            "near: also of resized, re-compressed copies (--near-distance)."
        ),
    ] = Dedup.none,
    near_distance: Annotated[
        int,
        typer.Option(
            metavar="BITS",
            help="--dedup near: the most bits two images' perceptual hashes differ in.",
        ),
    ] = NEAR_DISTANCE,
    retries: Annotated[
        int,
        typer.Option(
            metavar="N",
            min=0,
            help="More tries of an image URL after a transient failure (reset, timeout, 5xx, "
            "429), with backoff.",
        ),
    ] = 2,
    allow_private_urls: Annotated[
        bool,
        typer.Option(
            "--allow-private-urls",
            help="Fetch image URLs on loopback and private addresses (never link-local or "
            "cloud metadata ones).",
        ),
    ] = False,
    ignore_opt_out: Annotated[
        bool,
        typer.Option(
            "--ignore-opt-out",
            help="Fetch images whose X-Robots-Tag says noai, noimageai, noindex or noimageindex.",
        ),
    ] = False,
    user_agent: Annotated[
        Optional[str],
        typer.Option(metavar="TEXT", help="User-Agent of image requests.  [default: shardpack's]"),
    ] = None,
    url_threads: Annotated[
        int, typer.Option(metavar="N", min=1, help="Image URL requests in flight per worker.")
    ] = 64,
    per_host: Annotated[
        int, typer.Option(metavar="N", min=1, help="Of those, to one host at most.")
    ] = 16,
    storage_option: _STORAGE_OPTIONS = None,
    no_progress: _NO_PROGRESS = False,
    as_json: _JSON = False,
) -> None:
    """Pack SRC into shards in OUT (TFRecord unless --format says otherwise).

    Scans SRC (class or split folders, a manifest table, or a dataset in another format:
    see SRC below), shuffles with a seed, writes the shards in parallel, and writes
    OUT/index.json last.
    """
    with _user_errors():
        options = _pack_options(
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
            resize_mode=resize_mode,
            pad_color=parse_color(pad_color),
            upscale=upscale,
            min_side=min_side,
            max_aspect=max_aspect,
            max_area=max_area,
            check=check.value,
            on_error=on_error.value,
            compression=compression,
            format=fmt.value,
            seed=seed,
            shuffle=shuffle,
            max_pixels=max_pixels,
            overwrite=overwrite,
            resume=resume,
            index_files=index_files,
            # "" given is refused as empty, not taken for the option left out
            classes=parse_classes(classes) if classes is not None else None,
            split_names=_split_names(splits) if splits is not None else SPLIT_NAMES,
            split=parse_split(split) if split is not None else None,
            path_column=path_column,
            root=root if root is None or is_url(root) else os.path.abspath(root),
            dedup=dedup.value,
            grow="update" if update else "append" if append else "none",
            near_distance=near_distance,
            retries=retries,
            allow_private_urls=allow_private_urls,
            ignore_opt_out=ignore_opt_out,
            user_agent=user_agent,
            url_threads=url_threads,
            per_host=per_host,
        )
        if append and update:
            raise ShardpackError("--append and --update exclude each other; pass one")
        _run_pack(src, out, options, not no_progress, as_json, parse_options(storage_option or ()))


def _pack_options(**given: object) -> PackOptions:
    """PackOptions of the flags given; its errors, phrased for Python callers, name the flags."""
    try:
        return PackOptions(**given)
    except ShardpackError as e:
        raise ShardpackError(as_flags(str(e))) from None


def _split_names(text: str) -> tuple[str, ...]:
    """--splits a,b,c: the names, each checked by PackOptions."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ShardpackError(f"--splits names no split, got: {text!r}; pass a,b,c")
    return names


@app.command(cls=_Command)
def verify(
    out: _OUT,
    decode: Annotated[bool, typer.Option("--decode", help="Also decode every image.")] = False,
    as_json: _JSON = False,
    storage_option: _STORAGE_OPTIONS = None,
) -> None:
    """Check every shard against the index.

    Re-reads every shard: record CRCs, counts, sizes and sha256 (and with --decode, every
    image). Exit code 1 when a fault is found.
    """
    with _user_errors():
        from shardpack.read.verify import verify as run_verify

        report = run_verify(out, decode=decode, storage_options=_out_options(out, storage_option))
    if as_json:
        print_json(report.to_json())
    else:
        for fault in report.faults:
            typer.echo(f"FAULT {fault}", err=True)
        verdict = "OK" if report.ok else plural(len(report.faults), "FAULT")
        checks = f"{report.framing}, counts, sha256" + (", decode" if decode else "")
        typer.echo(
            f"{verdict}: {plural(report.shards, 'shard')}, {plural(report.records, 'record')} "
            f"({checks})"
        )
    if not report.ok:
        raise typer.Exit(1)


@app.command(cls=_Command)
def inspect(
    out: _OUT,
    records: Annotated[
        int, typer.Option(metavar="N", min=0, help="Records to show per split.")
    ] = 3,
    as_json: _JSON = False,
    storage_option: _STORAGE_OPTIONS = None,
) -> None:
    """Summarize a pack output.

    Splits, shards, sizes, the class histogram and a few records.
    """
    with _user_errors():
        from shardpack.read.inspect import describe

        summary = describe(out, records, _out_options(out, storage_option))
    print_json(summary) if as_json else print_inspect(summary)


@app.command("index-files", cls=_Command)
def index_files(out: _OUT, storage_option: _STORAGE_OPTIONS = None) -> None:
    """Write DALI index files for random access.

    One tfrecord2idx file per shard, in OUT/idx/.
    """
    with _user_errors():
        from shardpack.read.random_access import write_index_files

        written = write_index_files(out, storage_options=_out_options(out, storage_option))
    typer.echo(f"wrote {plural(len(written), 'index file')} in {os.path.join(out, 'idx')}")


@app.command(cls=_Command)
def preview(
    out: _OUT,
    split: Annotated[str, typer.Option(metavar="NAME", help="Split to draw from.")] = "train",
    n: Annotated[int, typer.Option("--n", metavar="N", min=1, help="Records to show.")] = 64,
    dest: Annotated[
        str,  # not a Path, which would make s3://b/x.png s3:/b/x.png before preview refuses it
        typer.Option(
            "--out",
            metavar="FILE",
            help="Image to write; .png, .jpg/.jpeg or .webp picks the format.",
        ),
    ] = "preview.png",
    seed: Annotated[int, typer.Option(metavar="N", min=0, help="Which random records.")] = 0,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the image at --out if there is one.")
    ] = False,
    storage_option: _STORAGE_OPTIONS = None,
) -> None:
    """Draw a contact sheet of random records.

    Each thumbnail has its class name under it, to eyeball the labels.
    """
    with _user_errors():
        from shardpack.read.preview import make_preview

        storage_options = _out_options(out, storage_option)
        path = make_preview(out, dest, split, n, seed, storage_options, overwrite)
    typer.echo(f"wrote {path}")


@app.command(cls=_Command)
def report(
    out: _OUT,
    dest: Annotated[
        Optional[str],
        typer.Option("--out", metavar="FILE", help="HTML file.  [default: OUT/report.html]"),
    ] = None,
    storage_option: _STORAGE_OPTIONS = None,
) -> None:
    """Write a data card: one self-contained HTML page.

    Splits, class balance, image sizes, bytes, formats, skipped images, duplicates and leaks
    across splits, shard sizes and examples of each class (needs matplotlib).
    """
    with _user_errors():
        from shardpack.read.report import write_report

        path = write_report(out, dest, _out_options(out, storage_option))
    typer.echo(f"wrote {path}")


@app.command(cls=_Command)
def demo(
    out: Annotated[
        Path, typer.Argument(metavar="OUT", help="Folder for the sample images and shards.")
    ],
    per_class: Annotated[int, typer.Option(metavar="N", min=1, help="Images per class.")] = 200,
    workers: _WORKERS = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace files of yours in OUT/shards.")
    ] = False,
    no_progress: _NO_PROGRESS = False,
    as_json: _JSON = False,
) -> None:
    """Draw a sample set and pack it.

    Five classes of drawn shapes in OUT/sample, packed into OUT/shards; a rerun replaces
    both, never a file of yours.
    """
    with _user_errors():
        from shardpack.demo import SAMPLE_NAME, SHAPES, earlier_demo, make_sample, refuse_links

        shards = out / "shards"
        refuse_links(out / SAMPLE_NAME, shards)
        sample = make_sample(out / SAMPLE_NAME, per_class=per_class)
        if not as_json:
            typer.echo(f"drew {plural(per_class * len(SHAPES), 'sample image')} in {sample}")
        overwrite = overwrite or earlier_demo(shards)
        options = PackOptions(workers=workers, shards=4, overwrite=overwrite)
        _run_pack(Path(sample), shards, options, not no_progress, as_json)
    if not as_json:
        shards, prog = shlex.quote(str(out / "shards")), _command_name()
        typer.echo(f"next: {prog} verify {shards}  |  {prog} inspect {shards}")


def main() -> None:
    """Console entry point: usage errors and interrupts end in one line, never a traceback.

    Exit codes: 0 done, 1 verify found faults, 2 bad input, 130 Ctrl-C, 143 SIGTERM, 141 the
    reader of stdout went away (`| head`), as for a process that SIGPIPE stopped.
    """
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(standalone_mode=False)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is seen below
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that is silent too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except SystemExit:
        # typer meets a closed pipe inside a command with exit(1), verify's fault code, after
        # wrapping stdout to keep the exit quiet: that wrapper is how it can be told apart.
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            sys.exit(141)
        raise
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
