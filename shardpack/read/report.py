"""report: one self-contained HTML data card of a pack output (charts as inline SVG drawn by
matplotlib, thumbnails as inline JPEG), from its index and one bounded pass over its records."""

from __future__ import annotations

import base64
import html
import io
import itertools
import os
import warnings
from collections.abc import Callable, Iterable

import numpy as np

from shardpack import images
from shardpack.containers import is_shard_name
from shardpack.errors import (
    MissingPackageError,
    OutputError,
    check_progress,
    classes_said,
    install_hint,
    os_error_fix,
    printable,
    shortened,
)
from shardpack.index import UNWRITTEN, Index, Skipped, load_index
from shardpack.layout import REPORT_NAME
from shardpack.packing import facts
from shardpack.packing.duplicates import LABELLED_DIFFERENTLY, all_removed, record_name
from shardpack.packing.objects import SIZES, Objects, num_object_classes, objects_of
from shardpack.packing.outdir import OUTPUTS
from shardpack.packing.stats import NOT_NOTED, reasons_of
from shardpack.read.preview import draw_objects, exists_error, no_file_there
from shardpack.read.stream import check_sizes, decode_pixels, iter_examples
from shardpack.storage import storage_at
from shardpack.storage.atomic import write_atomic
from shardpack.storage.locations import local_file, shell_slip

THUMB = 96  # pixels, the longer side of a thumbnail
PER_CLASS = 8  # thumbnails of each class in its contact sheet
SHOWN_GROUPS = 12  # duplicate groups drawn, each its first SHOWN_COPIES
SHOWN_COPIES = 4
SHOWN_CLASSES = 50  # classes with a contact sheet (and a bar each in the balance chart)
SHOWN_SKIPPED = 50  # skipped items named
SHOWN_COUNTS = 100  # rows of the objects-per-image table (the fewest objects first)
# Records read per split for thumbnails: a bound on the time a report takes on a large split.
MAX_SCANNED = 20_000
# Characters of a class or split name drawn in a chart: matplotlib lays out each character
# (a 100,000-character name cost 7 s); the tables hold the whole name.
DRAWN_CHARS = 40
# Records read between two calls of a progress callback.
PROGRESS_EVERY = 64
# What --out may be named: the card is HTML, and a browser opens it by its extension.
EXTENSIONS = (".html", ".htm")
_STYLE = """body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:right}th{background:#f4f4f4}td:first-child{text-align:left}
.group,.sheet{display:flex;flex-wrap:wrap;gap:6px;align-items:flex-end;margin:.5em 0}
figure{margin:0;font-size:11px;text-align:center;max-width:200px}svg{max-width:100%;height:auto}
td,figcaption,h3{overflow-wrap:anywhere}"""


def write_report(
    out: str | os.PathLike,
    dest: str | os.PathLike | None = None,
    storage_options: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
    overwrite: bool = False,
) -> str:
    """Write the data card of OUT: splits and class balance, image sizes, aspect ratios, bytes,
    formats, objects (per class, per image, box sizes, boxes dropped), skipped images,
    duplicates and leaks across splits (with thumbnails), shard sizes, and a contact sheet per
    class.

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run.
        dest: the HTML file to write (.html or .htm); None: OUT/report.html (the report's own,
            replaced).
        storage_options: options for OUT's fsspec filesystem, when it is a URL.
        progress: called as records are read for thumbnails with (records read, records to
            read), first with (0, records to read) as the reading starts.
        overwrite: replace a file already at dest (else it is refused, and kept).

    Returns:
        The path or URL written.

    Raises:
        MissingPackageError: matplotlib is not installed.
        OutputError: dest is a URL, is not named .html or .htm, exists (without overwrite), or
            cannot be written.
        RecordError: a shard is missing, of another size than the index says, or damaged
            where the card reads it (render); nothing is written.
        TypeError: progress is not callable.
    """
    check_progress(progress)
    _require_matplotlib()
    if why := shell_slip(dest, "--out", "an HTML file name, or none for OUT/report.html"):
        raise OutputError(why)
    index = load_index(out, storage_options)
    if dest is not None and local_file(dest) is None:
        raise OutputError(f"{dest}: report writes a local file; pass a local path for --out")
    if dest is not None and (own := _dataset_file(os.fspath(dest), index)) is not None:
        raise OutputError(f"{os.fspath(dest)}: is the dataset's {printable(own)}; pass another "
                          f"--out (without one the card is {REPORT_NAME} in OUT)")  # fmt: skip
    if dest is not None and (no_file := no_file_there(os.fspath(dest), REPORT_NAME)):
        raise no_file
    if dest is not None and _extension(dest) not in EXTENSIONS:  # as preview refuses a .gif
        raise OutputError(f"{os.fspath(dest)}: a report is written as HTML ({', '.join(EXTENSIONS)}"
                          f"), not {_extension(dest) or 'a file without extension'}; name the "
                          "file with one of those")  # fmt: skip
    if dest is not None and not overwrite and os.path.lexists(dest):  # before reading a record
        raise exists_error(os.fspath(dest))
    page = render(index, progress).encode("utf-8")
    where = index.storage.path(REPORT_NAME) if dest is None else os.fspath(dest)
    try:
        if dest is None:
            index.storage.put(REPORT_NAME, page)
        else:
            write_atomic(where, page, new=not overwrite)
    except FileExistsError:  # made while the records were read
        raise exists_error(where) from None
    except OSError as e:
        raise OutputError(f"{where}: cannot write the report ({e.strerror or e}); "
                          f"{os_error_fix(e)}") from None  # fmt: skip
    return where


def _extension(dest: str | os.PathLike) -> str:
    return os.path.splitext(os.fspath(dest))[1].lower()


def _dataset_file(dest: str, index: Index) -> str | None:
    """The name of the file of OUT's own that `dest` is (its index, a shard, the Hub card...:
    never replaced by a report, even with --overwrite), by whatever path; else None."""
    folder = storage_at(os.path.dirname(os.path.abspath(dest)))
    if not (folder.holds(index.storage) and index.storage.holds(folder)):
        return None
    name = os.path.basename(dest)
    return name if name in OUTPUTS or is_shard_name(name) else None


def _require_matplotlib() -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        raise MissingPackageError(
            "shardpack report draws its charts with matplotlib, which is not installed; "
            + install_hint("report")
        ) from None


def render(index: Index, progress: Callable[[int, int], None] | None = None) -> str:
    """The whole HTML page of an index's data card; `progress` as write_report's.

    Raises:
        RecordError: a shard is missing or of another size than the index says (one listing,
            before a record is read), or a record read for the thumbnails is damaged: a card
            of its counts and charts would present a damaged dataset as whole.
    """
    check_sizes(index, index.shards)
    summaries, duplicates = index.summaries or {}, index.duplicates or {}
    wanted = _wanted_keys(duplicates)
    sheets, found = _thumbnails(index, wanted, progress)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(index.name)}: data card"
        f"</title><style>{_STYLE}</style></head><body><h1>{_e(index.name)}</h1>",
        _described(index),
        _splits_section(index),
        _images_section(summaries),
        _objects_section(index, summaries),
        _skipped_section(index.skipped, summaries),
        _duplicates_section(duplicates, found),
        _shards_section(index),
        _sheets_section(index, sheets),
        "</body></html>",
    ]
    return "\n".join(parts)


def _e(value: object) -> str:
    """Text as the page shows it: as inspect prints it (a control or format character such as
    a right-to-left override escaped, never turning the text after it), then HTML-escaped."""
    return html.escape(printable(str(value)))


def _attr(value: object) -> str:
    """A name as a data- attribute holds it, whole and exact, for readers of the page."""
    return html.escape(str(value))


def _drawn(text: object) -> str:
    """A name as a chart draws it: printable, shortened, its `$` taken literally (matplotlib
    reads text between two as math, and a class named `$^$` is no formula)."""
    return shortened(printable(str(text)), DRAWN_CHARS).replace("$", r"\$")


def _number(value: object) -> object:
    """A count with thousands separators; a median of sizes (48409.5) or a ratio (1.3333)
    rounded for reading, the digits a median of whole numbers has kept whole."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, int) or value.is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def _td(value: object, name: str = "") -> str:
    """A table cell; `name` marks a number a reader (and the test) can find: data-value."""
    shown = _number(value)
    mark = f" data-value='{_attr(name)}'" if name else ""
    return f"<td{mark}>{_e(shown)}</td>"


def _table(head: Iterable[str], rows: Iterable[str]) -> str:
    cells = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f"<table><tr>{cells}</tr>{''.join(rows)}</table>"


def _svg(fig) -> str:
    """A matplotlib figure as inline SVG (text kept as text), the figure closed."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    with warnings.catch_warnings():  # a class named in a script the font lacks: boxes drawn
        warnings.filterwarnings("ignore", "Glyph .* missing from font")
        fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _figure(width: float = 9, height: float = 3.2):
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"
    return plt.subplots(figsize=(width, height))


def _splits_table(index: Index) -> str:
    """A row a split: its records (its shards' counts: what a reader reads, whatever the
    split's own total says), shards and bytes; a split whose every image was skipped
    (UNWRITTEN) says so."""
    rows = []
    for name, split in index.splits.items():
        size = sum(s.num_bytes for s in split.shards)
        rows.append(f"<tr data-split='{_attr(name)}'>{_td(name)}"
                    f"{_td(split.shard_records, 'records')}{_td(len(split.shards), 'shards')}"
                    f"{_td(size, 'bytes')}</tr>")  # fmt: skip
    rows += [f"<tr data-split='{_attr(name)}'>{_td(name)}<td colspan='3' data-value='unwritten'>"
             f"{_e(UNWRITTEN)}</td></tr>" for name in index.unwritten_splits]  # fmt: skip
    return _table(("split", "records", "shards", "bytes"), rows)


def _described(index: Index) -> str:
    """The card's first line: the source, encoding and container, and the classes as pack's
    summary says them (an object dataset's: 'no image classes, 6 object classes')."""
    classes = classes_said(len(index.classes), num_object_classes(index.schema))
    return (f"<p>{_e(index.source)} source, encoding {_e(index.encoding)}, "
            f"{_e(index.container_name)} shards, {_e(classes)}.</p>")  # fmt: skip


def _splits_section(index: Index) -> str:
    classes = index.classes[:SHOWN_CLASSES]
    balance = []
    for i, cls in enumerate(classes):
        cells = "".join(
            _td(split.class_counts[i] if i < len(split.class_counts) else 0, f"class:{name}")
            for name, split in index.splits.items()
        )
        balance.append(f"<tr data-class='{_attr(cls)}'>{_td(cls)}{cells}</tr>")
    chart = ""
    if classes:
        fig, ax = _figure()
        width = 0.8 / max(1, len(index.splits))
        for k, (name, split) in enumerate(index.splits.items()):
            counts = [split.class_counts[i] if i < len(split.class_counts) else 0
                      for i in range(len(classes))]  # fmt: skip
            ax.bar(np.arange(len(classes)) + k * width, counts, width, label=_drawn(name))
        ax.set_xticks(np.arange(len(classes)) + 0.4 - width / 2, [_drawn(c) for c in classes],
                      rotation=60, ha="right")  # fmt: skip
        ax.set_ylabel("images")
        if index.splits:  # matplotlib warns of a legend of nothing
            ax.legend()
        chart = _svg(fig)
    if not classes:  # a table of no row: what the records hold instead
        where = " (their objects' classes: Objects, below)" if num_object_classes(
            index.schema) else ""  # fmt: skip
        return ("<section id='splits'><h2>Splits</h2>" + _splits_table(index)
                + f"<p>The images have no classes{where}.</p></section>")  # fmt: skip
    return (
        "<section id='splits'><h2>Splits</h2>"
        + _splits_table(index)
        + "<h3>Class balance per split</h3>"
        + chart
        + _table(("class", *index.splits), balance)
        + "</section>"
    )


def _images_section(summaries: dict) -> str:
    parts = ["<section id='images'><h2>Images</h2>"]
    for name, summary in summaries.items():
        try:
            parts.append(_split_images(name, summary))
        except (KeyError, TypeError, ValueError, IndexError):
            continue  # a summary not as pack writes it: left out
    return "".join(parts) + "</section>"


# What a summary's column is called on the page, where its key says less.
_SHOWN = {"bytes": "source bytes", "stored_bytes": "stored bytes"}


def _split_images(name: str, summary: dict) -> str:
    """One split's sizes (width x height histogram), aspect ratios, bytes (the source's and
    as stored, each with its total), formats, modes; a figure the summary leaves out (records
    packed before shardpack noted it) is said unknown, its chart left empty."""
    rows = [
        _spread_row(summary, what) if what in summary or what == "bytes" else _unknown_row(what)
        for what in ("width", "height", "aspect", "bytes", "stored_bytes")
    ]
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"
    fig, (sizes, aspect, size) = plt.subplots(1, 3, figsize=(11, 3.2))
    if "size_histogram" in summary:
        grid = summary["size_histogram"]
        counts = np.array(grid["counts"], np.float64).T  # rows: height bins
        mesh = sizes.pcolormesh(grid["width_edges"], grid["height_edges"],
                                np.ma.masked_equal(counts, 0), cmap="viridis")  # fmt: skip
        fig.colorbar(mesh, ax=sizes)
    sizes.set(xlabel="width (px)", ylabel="height (px)", title="image sizes")
    drawn = [(aspect, "aspect_histogram", None), (size, "bytes_histogram", "source"),
             (size, "stored_bytes_histogram", "stored")]  # fmt: skip
    for ax, what, label in drawn:
        if what in summary:
            edges, heights = summary[what]["edges"], summary[what]["counts"]
            ax.stairs(heights, edges, fill=label != "stored", label=label)
    aspect.set(xlabel="aspect ratio (w/h)", ylabel="images")
    size.set(xlabel="bytes per image", ylabel="images")
    size.legend()
    counts = [
        f"<tr>{_td(what)}<td>{_e(', '.join(f'{k}: {n:,}' for k, n in summary[what].items()))}"
        "</td></tr>"
        for what in ("formats", "channels", "orientations")
        if isinstance(summary.get(what), dict)
    ]
    return (
        f"<div data-split='{_attr(name)}'><h3>{_e(name)}: {summary['records']:,} images</h3>"
        + _table(("", "min", "median", "max", "total"), rows)
        + _svg(fig)
        + _table(("", "counts"), counts)
        + "</div>"
    )


def _unknown_row(what: str) -> str:
    """A row of figures the summary leaves out: records packed before shardpack noted them."""
    return (f"<tr>{_td(_SHOWN.get(what, what))}<td colspan='4' data-value='{what}'>"
            f"{_e(NOT_NOTED)}</td></tr>")  # fmt: skip


def _spread_row(summary: dict, what: str) -> str:
    """A row of a summary's figures: min, median, max, and the total of bytes."""
    figures = summary[what]
    total = _td(figures["total"], f"{what}:total") if "total" in figures else "<td></td>"
    return (f"<tr>{_td(_SHOWN.get(what, what))}{_td(figures['min'], f'{what}:min')}"
            f"{_td(figures['median'], f'{what}:median')}{_td(figures['max'], f'{what}:max')}"
            f"{total}</tr>")  # fmt: skip


def _objects_section(index: Index, summaries: dict) -> str:
    """Each split's objects (packing/facts.py's tallies): per class, per image, box sizes,
    boxes dropped."""
    objects = objects_of(index.schema)
    if objects is None:
        return ""
    parts = [f"<section id='objects'><h2>Objects ({_e(objects.boxes)})</h2>"]
    for name, summary in summaries.items():
        try:
            parts.append(_split_objects(name, summary, objects.classes or ()))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            continue  # a summary not as pack writes it (or of a pack before objects): left out
    return "".join(parts) + "</section>"


# The head of the table of the records that lost boxes (facts.DROPPED_IN).
_NAMED_HEAD = f"record that lost boxes (of each reason, the first {facts.MAX_NAMED_DROPS} by key)"


def _split_objects(name: str, summary: dict, classes: tuple[str, ...]) -> str:
    """One split's objects: how many, images without, objects per image (quantiles and the
    counts), objects per class (named), COCO's box sizes, the boxes dropped by reason and the
    records that lost them."""
    count, without = facts.object_counts(summary)
    per_image = sorted((int(k), int(n)) for k, n in summary[facts.PER_IMAGE].items())
    values = np.repeat([k for k, _ in per_image], [n for _, n in per_image])
    quantiles = [("min", values.min()), ("median", np.median(values)),
                 ("90%", np.percentile(values, 90)), ("max", values.max())]  # fmt: skip
    ids = {str(i): c for i, c in enumerate(classes)}
    by_class = sorted(((ids.get(k, k), n) for k, n in summary.get(facts.CLASSES, {}).items()),
                      key=lambda kv: -kv[1])  # fmt: skip
    sizes = summary.get(facts.SIZES, {})
    histogram = [f"<tr>{_td(k)}{_td(n, f'images:{k}')}</tr>" for k, n in per_image[:SHOWN_COUNTS]]
    spread = "".join(_td(float(v), f"per_image:{q}") for q, v in quantiles)
    size_rows = [f"<tr>{_td(k)}{_td(sizes.get(k, 0), f'size:{k}')}</tr>" for k, _ in SIZES]
    class_rows = [f"<tr>{_td(c)}{_td(n, f'class:{c}')}</tr>" for c, n in by_class]
    dropped = {str(k): int(n) for k, n in summary.get(facts.DROPPED, {}).items()}
    dropped_rows = [f"<tr>{_td(k)}{_td(n, f'dropped:{k}')}</tr>" for k, n in dropped.items()]
    named = [f"<tr>{_td(str(key))}{_td(str(why))}{_td(int(n), f'dropped_in:{why}:{key}')}</tr>"
             for why, keys in summary.get(facts.DROPPED_IN, {}).items()
             for key, n in keys.items()]  # fmt: skip
    return (
        f"<div data-split='{_attr(name)}'><h3>{_e(name)}: <span data-value='objects'>{count:,}"
        f"</span> objects, <span data-value='without'>{without:,}</span> images without, "
        f"<span data-value='dropped'>{sum(dropped.values()):,}</span> boxes dropped</h3>"
        + _table(("", *(q for q, _ in quantiles)), [f"<tr>{_td('objects per image')}{spread}</tr>"])
        + _table(("objects in an image", "images"), histogram)
        + _table(("box size (COCO)", "boxes"), size_rows)
        + _table(("class", "objects"), class_rows)
        + (_table(("box dropped (pack's reason)", "boxes"), dropped_rows) if dropped else "")
        + (_table((_NAMED_HEAD, "reason", "boxes"), named) if named else "")
        + "</div>"
    )


def _skipped_section(items: tuple[Skipped, ...], summaries: dict) -> str:
    kinds = reasons_of(item.reason for item in items)
    rows = [f"<tr>{_td(kind)}{_td(n, f'skipped:{kind}')}</tr>" for kind, n in sorted(kinds.items())]
    named = [f"<tr>{_td(item.key)}{_td(item.reason)}</tr>" for item in items[:SHOWN_SKIPPED]]
    return (
        f"<section id='skipped'><h2>Skipped images: <span data-value='skipped'>{len(items):,}"
        "</span></h2>"
        + (_table(("reason", "images"), rows) + _table(("key", "reason"), named) if items else "")
        + "</section>"
    )


def _wanted_keys(duplicates: dict) -> set[str]:
    """`<split>/<key>` of each copy drawn in the duplicates section."""
    listed = duplicates.get("listed")
    groups = listed[:SHOWN_GROUPS] if isinstance(listed, list) else []
    return {
        k for g in groups if isinstance(g, list) for k in g[:SHOWN_COPIES] if isinstance(k, str)
    }


def _duplicates_section(duplicates: dict, found: dict[str, str]) -> str:
    parts = ["<section id='duplicates'><h2>Duplicates</h2>"]
    totals = [(what, duplicates.get(what)) for what in ("groups", "images", "copies", "removed")]
    if not all(type(n) is int for _, n in totals):
        return parts[0] + "<p>not recorded (an index from before)</p></section>"
    conflicts = duplicates.get("label_conflicts")
    if type(conflicts) is int:  # an index from before has none
        totals.append(("label conflicts", conflicts))
    parts.append(
        _table(("", "count"), (f"<tr>{_td(w)}{_td(n, f'dup:{w}')}</tr>" for w, n in totals))
    )
    across = duplicates.get("across_splits")
    rows = [
        f"<tr>{_td(a.get('split'))}{_td(a.get('also_in'))}"
        f"{_td(a.get('images'), 'leak:{}:{}'.format(a.get('split'), a.get('also_in')))}</tr>"
        for a in (across if isinstance(across, list) else [])
        if isinstance(a, dict)
    ]
    if rows:
        gone = all_removed(duplicates)  # every copy --dedup removed: the leaks were SRC's
        parts.append(f"<h3>Leaks across splits{' before deduplication' * gone}</h3>")
        parts.append(_table(("images of", "also in", "images"), rows))
    named = duplicates.get("conflicts_listed")
    named = [g for g in (named if isinstance(named, list) else []) if isinstance(g, list)]
    if conflicts:
        parts.append(f"<h3>Label conflicts: the same image {LABELLED_DIFFERENTLY}</h3>")
        parts.append(_table(("copies",), (f"<tr>{_td(', '.join(map(str, g)))}</tr>"
                                          for g in named)))  # fmt: skip
    listed = duplicates.get("listed")
    groups = [g for g in (listed if isinstance(listed, list) else []) if isinstance(g, list)]
    if groups:
        shown = min(len(groups), SHOWN_GROUPS)
        parts.append(f"<p data-value='dup:shown'>The first {shown:,} of {duplicates['groups']:,} "
                     f"{'group' if duplicates['groups'] == 1 else 'groups'} of copies, each its "
                     f"first {SHOWN_COPIES} copies:</p>")  # fmt: skip
    for group in groups[:SHOWN_GROUPS]:
        copies = [c for c in group[:SHOWN_COPIES] if isinstance(c, str)]
        parts.append("<div class='group'>" + "".join(_thumb(found.get(c), c) for c in copies)
                     + "</div>")  # fmt: skip
    return "".join(parts) + "</section>"


def _thumb(uri: str | None, caption: str) -> str:
    picture = f"<img src='{uri}' alt='{_e(caption)}'>" if uri else "<div>(not in the shards)</div>"
    return f"<figure>{picture}<figcaption>{_e(caption)}</figcaption></figure>"


def _shards_section(index: Index) -> str:
    fig, ax = _figure(9, 2.6)
    start = 0
    for name, split in index.splits.items():
        sizes = [s.num_bytes for s in split.shards]
        ax.bar(np.arange(start, start + len(sizes)), sizes, label=_drawn(name))
        start += len(sizes)
    ax.set(xlabel="shard", ylabel="bytes")
    ax.xaxis.get_major_locator().set_params(integer=True)
    if index.splits:
        ax.legend()
    return "<section id='shards'><h2>Shard sizes</h2>" + _svg(fig) + "</section>"


def _sheets_section(index: Index, sheets: dict[str, list[tuple[str, str]]]) -> str:
    parts = ["<section id='classes'><h2>Examples per class</h2>"]
    for cls in [*index.classes[:SHOWN_CLASSES], ""]:
        if sheets.get(cls):
            parts.append(f"<h3>{_e(cls or '(unlabeled)')}</h3><div class='sheet'>")
            parts.extend(_thumb(uri, key) for key, uri in sheets[cls])
            parts.append("</div>")
    return "".join(parts) + "</section>"


def _thumbnails(
    index: Index, wanted: set[str], progress: Callable[[int, int], None] | None = None
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, str]]:
    """One pass over each split's first MAX_SCANNED records: PER_CLASS thumbnails of each
    class, drawn from every split in turn, (record name, data URI) by class name, and those of
    the `wanted` duplicates by record name."""
    shown = set(index.classes[:SHOWN_CLASSES]) | {""}
    per_split: list[dict[str, list[tuple[str, str]]]] = []
    found: dict[str, str] = {}
    total = sum(min(split.shard_records, MAX_SCANNED) for split in index.splits.values())
    done = 0
    if progress is not None:  # where the reading starts: a rate counts from this report
        progress(0, total)
    objects = objects_of(index.schema)
    for split in index.splits:
        sheets: dict[str, list[tuple[str, str]]] = {}
        per_split.append(sheets)
        # a damaged record raises (RecordError), as every reader's does: no card drawn over it
        for record in itertools.islice(iter_examples(index.storage, split), MAX_SCANNED):
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(done, max(total, done))
            key = str(record["key"])
            name = record_name(split, key)
            # an index from before named every record <split>/<key>
            named = {name, f"{split}/{key}"} & wanted
            classes = [c for c in _classes(index, record.get("label")) if c in shown]
            room = [c for c in classes if len(sheets.setdefault(c, [])) < PER_CLASS]
            if room or named:
                uri = _data_uri(record, objects)
                for cls in room:
                    sheets[cls].append((name, uri))
                found.update(dict.fromkeys(named, uri))
    if progress is not None:
        progress(done, max(total, done))
    return {cls: _in_turn([sheets.get(cls, []) for sheets in per_split])[:PER_CLASS]
            for cls in shown}, found  # fmt: skip


def _in_turn(lists: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """The first of each list, then the second of each, ...: every split in a class's sheet."""
    return [x for row in itertools.zip_longest(*lists) for x in row if x is not None]


def _classes(index: Index, label: object) -> list[str]:
    """The class names of a record's label ("" for none): one, or each of a multi-label."""
    if label is None:
        return [""]
    labels = label.tolist() if isinstance(label, np.ndarray) else [label]
    return [index.classes[i] for i in labels if isinstance(i, int) and 0 <= i < len(index.classes)]


def _data_uri(record: dict, objects: Objects | None = None) -> str:
    """A record's image as a THUMB-pixel JPEG data URI, its `objects` drawn as preview draws
    them; "" when it does not decode."""
    try:
        pixels = decode_pixels(record)
        scale = THUMB / max(pixels.shape[:2])
        if scale < 1:
            size = (max(1, round(pixels.shape[0] * scale)), max(1, round(pixels.shape[1] * scale)))
            pixels = images.resize(pixels, size)
        pixels = np.ascontiguousarray(pixels[..., ::-1])  # BGR, as OpenCV draws
        if objects is not None:
            draw_objects(pixels, record, objects)
        data = images.encode(pixels, "jpeg", 85)
    except images.BadImage:
        return ""
    return "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
