"""The shardpack command line: parse, call the library, print. Nothing else lives here.

Start-up stays light (`shardpack --help` imports typer and this module, nothing heavy): each
command imports the library modules it needs, and help is plain text, without rich.
"""

import difflib
import functools
import inspect
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

from shardpack import __version__
from shardpack.console import Bar, print_inspect, print_json, print_pack_summary
from shardpack.containers import CONTAINERS
from shardpack.errors import (
    RESTORE_SHARD,
    FileAccessError,
    Option,
    RecordError,
    ShardpackError,
    plural,
    printable,
)
from shardpack.index import UNWRITTEN
from shardpack.options import (
    FLAGS,
    RESIZE_ALIASES,
    RESIZE_MODES,
    PackOptions,
    as_flags,
    choice_options,
    flag,
    option_types,
    said_as_flag,
)
from shardpack.packing.collector import long_lived
from shardpack.sources import source_choices, sources_described
from shardpack.sources.classlist import parse_classes
from shardpack.storage import parse_options, store_failure
from shardpack.storage.locations import local_file
from shardpack.storage.urlpolicy import stray_timeouts

app = typer.Typer(
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
    """Pack image datasets into shards (TFRecord, ArrayRecord, WebDataset, Hugging Face
    Parquet) in parallel, and read them back.

    Exit codes, every command: 0 done; 1 verify found a fault; 2 a usage error, input refused
    or a run that failed (a worker killed, a full disk), in one line on stderr naming the file
    and the fix; 130 Ctrl-C; 143 SIGTERM; 141 the reader of stdout went away (`| head`).
    """
    if version:
        typer.echo(f"shardpack {__version__}")
        raise typer.Exit
    if ctx.invoked_subcommand is None:  # bare `shardpack`: the help, not an error
        typer.echo(ctx.get_help())
        raise typer.Exit


def _error(message: str) -> None:
    """One line on stderr: a name from SRC or OUT in it (a control character, a line break)
    is escaped, never sent to the terminal as it is."""
    # red on a terminal (click drops the colour elsewhere) unless NO_COLOR is set (no-color.org)
    label = "error:" if os.environ.get("NO_COLOR") else typer.style("error:", fg="red", bold=True)
    typer.echo(f"{label} {printable(message)}", err=True)


@contextmanager
def _user_errors():
    """The error boundary of every command: a ShardpackError, an OSError from any file
    operation, or what an object store's client raised, ends in one line on stderr naming the
    path and the fix, and exit code 2; Ctrl-C, in one line and exit code 130."""
    try:
        yield
    except RecordError as e:  # a damaged shard: how to find the others, and the mend
        folder = e.path.rpartition("/")[0] or "."
        mend = "" if RESTORE_SHARD in str(e) else ": restore them from a copy or pack again"
        _error(f"{e}; `{_command_name()} verify {shlex.quote(folder)}` lists every damaged "
               f"shard{mend}")  # fmt: skip
        raise typer.Exit(2) from None
    except ShardpackError as e:
        _error(as_flags(e))  # the options it names as flags
        raise typer.Exit(2) from None
    except KeyboardInterrupt:  # pack's own line says what it left (_stopped): others stop here
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
    except BrokenPipeError:
        raise  # the reader of our output went away (`| head`): not a file of the user's
    except OSError as e:
        _error(str(FileAccessError.from_os_error(e)))
        raise typer.Exit(2) from None
    except Exception as e:  # from an object store's client: refused, unreachable, misnamed
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


@contextmanager
def _closing(bar: Bar) -> Iterator[Bar]:
    """A progress bar for a command that reads: closed however the command ends, so that what
    it prints next starts on a line of its own."""
    try:
        yield bar
    finally:
        bar.close()


def _stopped(
    what: str, code: int, bar: Bar, undo: Callable[[], None] | None, grow: bool
) -> NoReturn:
    bar.close()  # its last frame before the line that says why, not after it
    if undo is not None:  # the demo's: nothing it made is left to resume
        undo()
        print(what, file=sys.stderr)
    elif grow:  # the dataset's index stands until the grow's lands: nothing to resume by flag
        print(f"{what}: the dataset in OUT stays whole; run the same command again to finish "
              "(the shards this run finished are kept)", file=sys.stderr)  # fmt: skip
    else:
        print(f"{what}: no index written; rerun with --resume to continue", file=sys.stderr)
    raise typer.Exit(code)


def _run_pack(
    src: str,
    out: str,
    options: PackOptions,
    progress: bool,
    as_json: bool,
    storage_options: dict | None = None,
    undo: Callable[[], None] | None = None,
) -> None:
    """Pack, print the summary; a stop (Ctrl-C, SIGTERM) ends in one line, after `undo` if
    given (the demo's), else saying to resume."""
    with long_lived():
        from shardpack.packing.packer import pack  # numpy, the workers' code: not for --help

    bar = Bar(progress)
    try:
        result = pack(src, out, options, progress=bar, storage_options=storage_options,
                      scan_progress=bar.scanned)  # fmt: skip
    except KeyboardInterrupt:
        _stopped("interrupted", 130, bar, undo, options.grow != "none")
    except _Terminated:
        _stopped("terminated", 143, bar, undo, options.grow != "none")
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
    if options and local_file(out) is not None:
        print(f"warning: --storage-option is for a URL (s3://...), and {out} is a local path: "
              "it is not used", file=sys.stderr)  # fmt: skip
    return options


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

# What options.FLAGS leaves to the CLI: the choices of the options whose values are a list the
# registries and the library's tuples hold, the format's readers, and the class list's parser
# (a file of names: the sources read it).
_CHOICES = {"source": source_choices()} | {
    option: allowed for option, (allowed, _) in choice_options().items()
}
_MORE_HELP = {"format": " " + "; ".join(f"{n} ({CONTAINERS.readers(n)})" for n in CONTAINERS) + "."}
_PARSE = {"classes": parse_classes}
_OPTION_FIELDS = {field.name: field for field in fields(PackOptions)}
_WORKERS = Annotated[
    Optional[int],
    typer.Option(FLAGS["workers"].flag, metavar="N", min=1, help=FLAGS["workers"].help),
]


def _declared(option: str) -> list[inspect.Parameter]:
    """The typer declarations of one PackOptions field, from options.FLAGS and the field's own
    type and default: a choice, a parsed text, a switch pair, or a value of its type."""
    spec, field = FLAGS[option], _OPTION_FIELDS[option]
    if spec.switches:  # one switch a value: --append, --update
        return [_parameter(value, bool, False, typer.Option(f"--{value}", help=text))
                for value, text in spec.switches]  # fmt: skip
    hint, default = option_types()[option], field.default
    limits = {key: getattr(spec, key) for key in ("min", "max") if getattr(spec, key) is not None}
    metavar = spec.metavar
    if option in _CHOICES:  # shown as a list, taken as text: the library reads an alias or
        metavar = f"<{'|'.join(_CHOICES[option])}>"  # names the choice meant (options.chosen)
    elif spec.parse is not None or option in _PARSE:  # text, parsed: its default as said
        hint, default = Optional[str], spec.shown
    said = spec.help + _MORE_HELP.get(option, "")
    info = typer.Option(spec.flag, metavar=metavar, help=said, **limits)
    return [_parameter(option, hint, default, info)]


def _parameter(name: str, hint: object, default: object, info: object) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[hint, info])  # fmt: skip


def _pack_options(given: dict[str, object]) -> PackOptions:
    """PackOptions of the flags given (each parsed as FLAGS says)."""
    grow = [value for value, _ in FLAGS["grow"].switches if given.pop(value)]
    if len(grow) > 1:
        raise ShardpackError("--append and --update exclude each other; pass one")
    chosen: dict[str, object] = {"grow": grow[0]} if grow else {}
    for option, value in given.items():
        parse = _PARSE.get(option, FLAGS[option].parse)
        if parse is None:
            chosen[option] = value
        elif value is not None:  # "" given is parsed (and refused), not taken for left out
            chosen[option] = parse(value)
    return PackOptions(**chosen)


def _pack(
    src: str,
    out: str,
    *,
    storage_option: list[str] | None = None,
    no_progress: bool = False,
    as_json: bool = False,
    **given: object,
) -> None:
    """Pack SRC into shards in OUT (TFRecord unless --format says otherwise).

    Scans SRC (class or split folders, a manifest table, or a dataset in another format:
    see SRC below), shuffles with a seed, writes the shards in parallel, and writes
    OUT/index.json last.
    """
    with _user_errors():
        with long_lived():  # the check imports the container's module, and numpy
            options = _pack_options(given)
        storage_options = parse_options(storage_option or ())
        for warning in stray_timeouts(storage_options):  # now: not after a long run's fetches
            print(f"warning: {printable(warning)}", file=sys.stderr)
        _run_pack(src, out, options, not no_progress, as_json, storage_options)


def _pack_signature() -> inspect.Signature:
    """pack's arguments: SRC, OUT, every PackOptions field as FLAGS spells it, then the run's."""
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    where = typer.Argument(metavar="SRC", help=f"A path or a URL: {sources_described()}.")
    made = typer.Argument(metavar="OUT", help="Output folder or URL (created if missing).")
    return inspect.Signature([
        inspect.Parameter("src", positional, annotation=Annotated[str, where]),
        inspect.Parameter("out", positional, annotation=Annotated[str, made]),
        *(declared for option in FLAGS for declared in _declared(option)),
        _parameter("storage_option", Optional[list[str]], None, _STORAGE_OPTIONS.__metadata__[0]),
        _parameter("no_progress", bool, False, _NO_PROGRESS.__metadata__[0]),
        _parameter("as_json", bool, False, _JSON.__metadata__[0]),
    ])  # fmt: skip


_pack.__signature__ = _pack_signature()
_pack.__annotations__ = {p.name: p.annotation for p in _pack.__signature__.parameters.values()}
pack = app.command("pack", cls=_Command)(_pack)


@app.command(cls=_Command)
def verify(
    out: _OUT,
    decode: Annotated[bool, typer.Option("--decode", help="Also decode every image.")] = False,
    as_json: _JSON = False,
    storage_option: _STORAGE_OPTIONS = None,
    no_progress: _NO_PROGRESS = False,
) -> None:
    """Check every shard against the index.

    Re-reads every shard: its framing (TFRecord CRCs, tar headers, Parquet page checksums),
    record counts, sizes and sha256 (and with --decode, every image). Exit code 1 when a
    fault is found.
    """
    with _user_errors():
        from shardpack.read.verify import verify as run_verify  # numpy: not for --help

        with _closing(Bar(not no_progress, "verifying")) as bar:
            options = _out_options(out, storage_option)
            report = run_verify(out, decode=decode, storage_options=options, progress=bar)
    if as_json:
        print_json(report.to_json())
    else:
        for fault in report.faults:
            typer.echo(f"FAULT {fault}", err=True)
        if report.damaged:  # the mend, once (each fault line names what is wrong)
            first = ", ".join(map(printable, report.damaged[:3]))
            more = ", ..." if len(report.damaged) > 3 else ""
            typer.echo(f"damaged: {plural(len(report.damaged), 'shard')} ({first}{more}); "
                       f"for each, {RESTORE_SHARD}", err=True)  # fmt: skip
        for name in report.unwritten:
            typer.echo(f"split {printable(name)}: {UNWRITTEN}")
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

    Splits, shards, sizes, the class histogram, each split's statistics (image sizes, source
    and stored bytes per image, formats, objects, skips), the copies found and a few records.
    """
    with _user_errors():
        from shardpack.read.describe import describe  # numpy: not for --help

        summary = describe(out, records, _out_options(out, storage_option))
    print_json(summary) if as_json else print_inspect(summary)


@app.command("index-files", cls=_Command)
def index_files(out: _OUT, storage_option: _STORAGE_OPTIONS = None) -> None:
    """Write DALI index files for random access.

    One tfrecord2idx file per shard, in OUT/idx/.
    """
    from shardpack.packing.daliindex import write_index_files  # this command's alone

    with _user_errors():
        written = write_index_files(out, storage_options=_out_options(out, storage_option))
    typer.echo(f"wrote {plural(len(written), 'index file')} in {os.path.join(out, 'idx')}")


@app.command(cls=_Command)
def preview(
    out: _OUT,
    split: Annotated[
        Optional[str],
        typer.Option(
            metavar="NAME", help="Split to draw from.  [default: train, else the first by name]"
        ),
    ] = None,
    n: Annotated[int, typer.Option("-n", metavar="N", min=1, help="Records to show.")] = 64,
    n_long: Annotated[Optional[int], typer.Option("--n", hidden=True, min=1)] = None,  # as before
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
        from shardpack.read.preview import make_preview  # numpy: not for --help

        storage_options = _out_options(out, storage_option)
        n = n if n_long is None else n_long
        drawn = make_preview(out, dest, split, n, seed, storage_options, overwrite)
    typer.echo(f"wrote {drawn.path}")
    if short := drawn.short_of(n):
        typer.echo(printable(short))


@app.command(cls=_Command)
def report(
    out: _OUT,
    dest: Annotated[
        Optional[str],
        typer.Option(
            "--out", metavar="FILE", help="HTML file (.html or .htm).  [default: OUT/report.html]"
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the file at --out if there is one.")
    ] = False,
    storage_option: _STORAGE_OPTIONS = None,
    no_progress: _NO_PROGRESS = False,
) -> None:
    """Write a data card: one self-contained HTML page.

    Splits, class balance, image sizes, bytes, formats, skipped images, duplicates and leaks
    across splits, shard sizes and examples of each class (needs matplotlib).
    """
    with _user_errors():
        from shardpack.read.report import write_report  # numpy: not for --help

        with _closing(Bar(not no_progress, "reading")) as bar:
            path = write_report(out, dest, _out_options(out, storage_option), progress=bar,
                                overwrite=overwrite)  # fmt: skip
    typer.echo(f"wrote {path}")


@app.command(cls=_Command)
def demo(
    out_given: Annotated[
        str,
        typer.Argument(
            metavar="OUT", show_default=False, help="Folder for the sample images and shards."
        ),
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
    both, never a file of yours; a stopped run (Ctrl-C) or a failed one leaves nothing it
    made.
    """
    with _user_errors():
        # numpy, OpenCV: not for --help
        from shardpack import demo as sample_set
        from shardpack.packing.packer import refuse_shell_slips

        refuse_shell_slips(out_given, "OUT")  # "" would be the current folder, "~" a folder
        out = Path(out_given)
        shards = out / "shards"
        sample_set.refuse_links(out / sample_set.SAMPLE_NAME, shards)
        undo = sample_set.Undo.before(out)  # a stopped or failed demo leaves nothing it made
        try:
            sample = sample_set.make_sample(out / sample_set.SAMPLE_NAME, per_class=per_class)
            if not as_json:
                drew = plural(per_class * len(sample_set.SHAPES), "sample image")
                typer.echo(f"drew {drew} in {sample}")
            overwrite = overwrite or sample_set.earlier_demo(shards)
            options = PackOptions(workers=workers, shards=4, overwrite=overwrite)
            _run_pack(Path(sample), shards, options, not no_progress, as_json, undo=undo)
        except BaseException as e:  # a stop or a failure (a full disk): what it made goes
            undo()  # (a stop as it packs: _run_pack's undo went first; this one finds nothing)
            if isinstance(e, ShardpackError):  # nor is there a run to resume
                raise e.without_resume("run the demo again") from None
            raise
    if not as_json:
        shards, prog = shlex.quote(str(out / "shards")), _command_name()
        typer.echo(f"next: {prog} verify {shards}  |  {prog} inspect {shards}")


def _usage_said(error: Exception) -> str:
    """click's message, with what a number flag takes in words: `--workers two` is "not a whole
    number of 1 or more", where click says "not a valid int range"."""
    said = _mode_meant(error) or error.format_message()
    kind = getattr(getattr(error, "param", None), "type", None)
    name = str(getattr(kind, "name", ""))
    if not name.startswith(("int", "float")) or f" is not a valid {name}." not in said:
        return said
    low, high = getattr(kind, "min", None), getattr(kind, "max", None)
    bounds = (f" from {low} to {high}" if low is not None and high is not None
              else f" of {low} or more" if low is not None
              else f" of {high} or less" if high is not None else "")  # fmt: skip
    what = "a whole number" if name.startswith("int") else "a number"
    return said.replace(f" is not a valid {name}.", f" is not {what}{bounds}")


# Words an unknown option may be that name a --resize-mode, not an option (`--crop`, `--pad`).
_MODE_WORDS = {"crop": "center-crop", **{m: m for m in RESIZE_MODES}, **RESIZE_ALIASES}


def _mode_meant(error: Exception) -> str:
    """For an unknown option nearer a --resize-mode than any option of the command (`--corp`,
    where click names `--root`): how to ask for that mode."""
    name, ctx = getattr(error, "option_name", None) or "", getattr(error, "ctx", None)
    if not name.startswith("--") or ctx is None or "resize_mode" not in {
            p.name for p in ctx.command.params}:  # fmt: skip
        return ""
    word = name[2:].lower().replace("_", "-")
    near = difflib.get_close_matches(word, _MODE_WORDS, n=1, cutoff=0.6)
    longs = [o[2:] for p in ctx.command.params for o in p.opts if o.startswith("--")]
    real = max((difflib.SequenceMatcher(None, word, o).ratio() for o in longs), default=0.0)
    if not near or difflib.SequenceMatcher(None, word, near[0]).ratio() <= real:
        return ""
    mode = said_as_flag(Option("resize_mode", _MODE_WORDS[near[0]]))
    return f"No such option: {name}; for that resize, write {flag('resize')} WxH {mode}"


def _dash_path(error: Exception) -> str:
    """What to write instead where an unknown one-letter option (shardpack has none) is a path
    that starts with '-' (`pack SRC -weird`, click read it as -w -e ...)."""
    name = getattr(error, "option_name", None) or ""
    if not name.startswith("-") or name.startswith("--"):
        return ""
    given = next((a for a in sys.argv[1:] if a.startswith(name) and a[1:2] != "-"), name)
    return f"; for a path that starts with '-', write './{given}' (or put '--' before the paths)"


def main() -> None:
    """Console entry point: usage errors and interrupts end in one line, never a traceback;
    the exit codes are those `shardpack --help` names (141 as for a process SIGPIPE stopped)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _main()
    except BrokenPipeError:  # of stdout, or of stderr saying why it stops (`2>&1 | head`)
        # Python flushes both again at exit: point them at /dev/null so that is silent too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            os.dup2(devnull, stream.fileno())
        sys.exit(141)


@functools.cache
def _command() -> typer.main.TyperGroup:
    """The command typer builds of app (~5 ms of CPU), once a process: for the runs that a
    notebook or a test suite makes in one, as for the one the command line makes."""
    return typer.main.get_command(app)


def _main() -> NoReturn:
    """The app, its exit code, and one line for a usage error or a stop from outside."""
    try:
        code = _command()(standalone_mode=False)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is seen by main
    except SystemExit:
        # typer meets a closed pipe inside a command with exit(1), verify's fault code, after
        # wrapping stdout to keep the exit quiet: that wrapper is how it can be told apart.
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            sys.exit(141)
        raise
    except (KeyboardInterrupt, typer.Abort):  # outside a command's boundary (_user_errors)
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except _Terminated:
        print("terminated", file=sys.stderr)
        sys.exit(143)
    except Exception as e:
        # Usage errors come from click (vendored inside newer typer): they carry these two;
        # anything else (a BrokenPipeError: main's) goes on.
        if not (hasattr(e, "format_message") and hasattr(e, "exit_code")):
            raise
        ctx = getattr(e, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        print(f"error: {_usage_said(e)}{_dash_path(e)}{hint}", file=sys.stderr)
        sys.exit(e.exit_code)
    sys.exit(code or 0)
