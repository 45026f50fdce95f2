"""OUT/README.md: a Hugging Face dataset card (YAML front matter with dataset_info, features
for a Parquet pack alone, and configs, then a short summary between two marks) written from
the index. What the user added is kept when a run rewrites it, as `datasets`' push_to_hub keeps
a card: the header's other top-level keys (a license, tags, pretty_name...) as they are written,
comments included, and the Markdown outside the marks; OWNED_KEYS and the marked part are
rewritten. A card whose header does not parse, or whose marks are broken, is refused in one
line before anything is written."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from shardpack.cardheader import MAX_CARD_BYTES, load_header, opens_header, split_card
from shardpack.errors import OutputError, classes_said, plural
from shardpack.hffeatures import card_form, hf_feature
from shardpack.index import Index, ShardInfo
from shardpack.layout import CARD_NAME
from shardpack.packing.duplicates import LABELLED_DIFFERENTLY, all_removed, also_in
from shardpack.packing.objects import num_object_classes
from shardpack.schema import Feature
from shardpack.storage import Storage

# The header's top-level keys pack writes (as push_to_hub does): any other is the user's.
OWNED_KEYS = ("dataset_info", "configs")
# The header's first line, a YAML comment (an earlier card's, found by its start, is dropped).
_MARKER_START = "# written by shardpack pack"
MARKER = f"{_MARKER_START}, which rewrites dataset_info, configs and the marked part below"
# The Markdown pack writes lies between these (HTML comments: the Hub shows neither).
BEGIN = "<!-- shardpack: begin (rewritten at each run; write your own text outside) -->"
END = "<!-- shardpack: end -->"
_BEGIN_START = "<!-- shardpack: begin"
# A top-level line that goes on with the key above it: a sequence item ("- x"), indented.
_GOES_ON = r"(-([ \t]|$)|[ \t]|$)"
_OWNED_LINE = rf"({'|'.join(OWNED_KEYS)})[ \t]*:(\s|$)"
_SIZE_LINE = r"size_categories[ \t]*:(\s|$)"
_FIX = "; fix it, or move it out of OUT, then run again"


@dataclass(frozen=True)
class UsersCard:
    """What a user wrote in OUT's README.md: the header's lines other than ours, and the
    Markdown before and after the marked part."""

    header: str = ""
    before: str = ""
    after: str = ""


def users_card(out: Storage) -> UsersCard:
    """The user's part of OUT's README.md (nothing where there is none); no link followed, a
    bounded read.

    Raises:
        OutputError: the card cannot be read, is not UTF-8, its header does not parse (or
            PyYAML, needed to read a header holding keys of the user's, is missing), or its
            marks are not one BEGIN before one END.
    """
    path = out.path(CARD_NAME)
    text = _card_text(out, path)
    if text is None:
        return UsersCard()
    header, body, line = split_card(text)
    if header is None and opens_header(text):
        raise OutputError(f"{path}: its YAML header has no closing '---' line{_FIX}")
    header, ours = _users_header(header or "", path, line)
    before, after = _users_text(body, path, ours)
    return UsersCard(header, before, after)


def _card_text(out: Storage, path: str) -> str | None:
    """OUT's README.md (None where there is none), within MAX_CARD_BYTES, as UTF-8 text."""
    try:
        with out.open(CARD_NAME) as blob:
            if blob.size > MAX_CARD_BYTES:
                raise OutputError(f"{path}: over {MAX_CARD_BYTES:,} bytes, more than a "
                                  f"dataset card holds{_FIX}")  # fmt: skip
            return blob.pread(blob.size, 0).decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise OutputError(f"{path}: cannot be read as the dataset card ({e.strerror or e}); "
                          "move it out of OUT, then run again") from None  # fmt: skip
    except UnicodeDecodeError as e:
        raise OutputError(f"{path}: is not UTF-8 text (byte {e.start:,}); save it as UTF-8, "
                          "or move it out of OUT, then run again") from None  # fmt: skip


def _blocks(header: str, first: int) -> tuple[list[list[str]], list[int], list[str], bool]:
    """The header's top-level keys, each with the lines that go on with it and the comments
    before it; the file's line each begins on (`first`: the header's); the comments after the
    last; and whether it holds MARKER."""
    blocks: list[list[str]] = []
    starts: list[int] = []  # the file's line each block begins on, for its parse errors
    comments: list[str] = []  # comments and blank lines, kept with the key that follows
    ours = False
    for number, line in enumerate(header.split("\n"), first):
        if line.startswith(_MARKER_START):
            ours = True
        elif line.startswith("#") or not line.strip():
            comments.append(line)
        elif re.match(_GOES_ON, line) and blocks:
            blocks[-1] += [*comments, line]
            comments = []
        else:
            blocks.append([*comments, line])
            starts.append(number - len(comments))
            comments = []
    return blocks, starts, comments, ours


def _users_header(header: str, path: str, first: int) -> tuple[str, bool]:
    """The header's lines that are not pack's (each top-level key with the lines that go on
    with it, comments kept), and whether it holds MARKER; `first`: the file's line the header
    begins on. Each key's lines must parse alone to that one key, and together as the whole
    header does: then keeping them as written keeps exactly the user's keys."""
    blocks, starts, comments, ours = _blocks(header, first)
    owned = [bool(re.match(_OWNED_LINE, _key(block))) for block in blocks]
    if not all(owned):  # a key of the user's: the header read as the Hub reads it
        owned = [key in OWNED_KEYS for key in _keys(header, blocks, path, first, starts)]
    kept = [line for block, own in zip(blocks, owned, strict=True) if not own for line in block]
    return "\n".join(kept + comments).strip("\r\n"), ours


def _key(block: list[str]) -> str:
    """A block's key line (after the comments that lead it)."""
    return next(line for line in block if not line.startswith("#") and line.strip())


def _keys(
    header: str, blocks: list[list[str]], path: str, first: int, starts: list[int]
) -> list[object]:
    """Each block's key, refusing a header that does not parse to a mapping whose keys are
    the blocks' keys, each block parsed alone (`first`, `starts`: the file's lines the header
    and each block begin on)."""
    whole = load_header(header, path, OutputError, first)
    keys = []
    for block, start in zip(blocks, starts, strict=True):
        if (own := re.match(_OWNED_LINE, _key(block))) is not None:
            # pack's own key, rewritten: not parsed again alone (dataset_info lists every
            # class name: of a card of thousands, most of the header, ~3 s a MiB in PyYAML)
            keys.append(own.group(1))
            continue
        alone = load_header("\n".join(block), path, OutputError, start)
        keys += list(alone) if isinstance(alone, dict) else [None]
    if not isinstance(whole, dict) or keys != list(whole):
        raise OutputError(f"{path}: its YAML header is not one top-level key a line, each "
                          "written once; write it so (as huggingface_hub's DatasetCard saves "
                          "it), or move it out of OUT, then run again")  # fmt: skip
    return keys


def _users_text(body: str, path: str, ours: bool) -> tuple[str, str]:
    """The Markdown before and after the marked part; a card of pack's without marks (an
    earlier version's) is all pack's, a card without MARKER or marks all the user's."""
    begins, ends = body.count(_BEGIN_START), body.count(END)
    if begins == ends == 0:
        return ("", "") if ours else (body.strip("\r\n"), "")
    start = body.find(_BEGIN_START)
    if begins != 1 or ends != 1 or body.find(END) < start:
        raise OutputError(f"{path}: does not hold one '{_BEGIN_START} ...' line and after it "
                          f"one '{END}' line; put them back around the part shardpack writes, "
                          "or remove both, then run again")  # fmt: skip
    stop = body.find(END) + len(END)
    return body[:start].strip("\r\n"), body[stop:].strip("\r\n")


def card(index: Index, kept: UsersCard = UsersCard(), present: Collection[str] = ()) -> bytes:
    """The dataset card of an index, with what the user wrote in it `kept` (users_card) and
    the names of OUT's files `present` (see data_files). A
    split without records (every image of it skipped) is left out: `datasets` refuses to load
    a dataset one of whose splits holds no data. The features are declared only where they are
    the files' columns (Parquet): `datasets` casts what it loads to them, and a tar's samples
    (columns jpg, cls, json) cast so are all None."""
    listed = {split: entry for split, entry in index.splits.items() if entry.num_records}
    lines = ["dataset_info:"]
    if index.container.tabular:
        lines.append("  features:")
        for feature, spec in index.schema.items():
            lines += _feature(feature, spec)
    # As push_to_hub writes them: a split's num_bytes and dataset_size count the records as
    # Arrow holds them in memory, download_size the files. `datasets` takes no split without
    # num_bytes, so where a shard's Arrow bytes are unknown (no table, an older pack's) the
    # splits are not listed: the files' bytes would be read as the records'.
    arrow = {split: [s.arrow_bytes for s in entry.shards] for split, entry in listed.items()}
    if all(None not in sizes for sizes in arrow.values()):
        lines.append("  splits:")
        for split, entry in listed.items():
            lines += [f"  - name: {_q(split)}", f"    num_bytes: {sum(arrow[split])}",
                      f"    num_examples: {entry.num_records}"]  # fmt: skip
        lines.append(f"  dataset_size: {sum(map(sum, arrow.values()))}")
    total = sum(s.num_bytes for entry in index.splits.values() for s in entry.shards)
    lines += [f"  download_size: {total}", "configs:", "- config_name: default", "  data_files:"]
    for split, entry in listed.items():
        lines += [f"  - split: {_q(split)}", "    path:"]
        lines += [f"    - {_q(file)}" for file in data_files(entry.shards, present)]
    return _card(kept, lines, [f"# {index.name}", "", summary(index)])


def users_part(kept: UsersCard) -> bytes:
    """A card of what the user wrote alone (its marks kept, nothing between them): what stands
    while the dataset the card described is replaced."""
    return _card(kept, [], [])


def _card(kept: UsersCard, header: list[str], text: list[str]) -> bytes:
    """The card of pack's `header` lines and `text` lines, what the user wrote around them."""
    lines = ["---", MARKER, *([kept.header] if kept.header else []), *header, "---",
             *([kept.before, ""] if kept.before else []), BEGIN, *text, END,
             *(["", kept.after] if kept.after else []), ""]  # fmt: skip
    return "\n".join(lines).encode("utf-8", "backslashreplace")


# What YAML refuses anywhere in a document, even quoted (YAML 1.1's printable set, which
# PyYAML and so the Hub check), and the line breaks a double-quoted scalar would fold (NEL,
# U+2028, U+2029): escaped instead. Spelled as those characters, not as the negation of the
# printable ranges: compiling that class walks its 60,000 code points (~10 ms of every pack's
# start, python -X importtime), and this one matches the same characters.
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _q(text: str) -> str:
    """A YAML scalar that parses back to `text`: JSON's double-quoted string (which YAML reads
    alike) with what YAML would refuse or fold escaped as YAML's \\x or \\u."""
    return _UNSAFE.sub(_escape, json.dumps(text, ensure_ascii=False))


def _escape(found: re.Match) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"  # none is past U+FFFF


def _feature(name: str, feature: Feature) -> list[str]:
    """A feature of the schema as the Hub's features list writes it."""
    form = card_form(hf_feature(name, feature))
    return [f"  - name: {_q(name)}", *_yaml(form, "    ")]


def _yaml(mapping: dict, indent: str) -> list[str]:
    """A nested mapping of card_form's as YAML lines: keys and texts quoted, numbers bare."""
    lines = []
    for key, value in mapping.items():
        head = f"{indent}{_q(str(key)) if isinstance(key, int) else key}:"
        if isinstance(value, dict):
            lines += [head, *_yaml(value, indent + "  ")]
        else:
            lines.append(f"{head} {value if isinstance(value, int) else _q(value)}")
    return lines


def data_files(shards: Sequence[ShardInfo], present: Collection[str] = ()) -> list[str]:
    """A split's shards as data_files: one pattern for the numbered names, else each name. Also
    each name where the pattern matches a file among `present` (OUT's files' names) that is no
    shard of the split (another's file named like one): `datasets` and mlcroissant would read it."""
    patterns = {re.sub(r"-\d+-of-\d+(?=(\.parquet)?$)", "-*", s.file) for s in shards}
    ours = {s.file for s in shards}
    if len(patterns) == 1 and not any(
        fnmatchcase(name, *patterns) for name in present if name not in ours
    ):
        return sorted(patterns)
    return [s.file for s in shards]


# The Hub's size_categories of a dataset card, by its records: (the count it is under, name).
_SIZE_CATEGORIES = ((10**3, "n<1K"), (10**4, "1K<n<10K"), (10**5, "10K<n<100K"),
                    (10**6, "100K<n<1M"), (10**7, "1M<n<10M"), (10**8, "10M<n<100M"),
                    (10**9, "100M<n<1B"), (10**10, "1B<n<10B"), (10**11, "10B<n<100B"),
                    (10**12, "100B<n<1T"))  # fmt: skip
_MOST_CATEGORY = "n>1T"


def size_category(records: int) -> str:
    """The Hub's size_categories value for a dataset of `records` records."""
    return next((name for under, name in _SIZE_CATEGORIES if records < under), _MOST_CATEGORY)


def size_notes(out: Storage, index: Index) -> tuple[str, ...]:
    """A line where the card's size_categories (the user's key, kept as written) names none
    that holds the records of `index`: a grow past 1,000 records leaves 'n<1K' behind."""
    path = out.path(CARD_NAME)
    try:  # the run is committed: a card read no more (gone, an alias of another key's) says none
        header, _, first = split_card(_card_text(out, path) or "")
        blocks, starts, _, _ = _blocks(header or "", first)
        sized = [(b, n) for b, n in zip(blocks, starts, strict=True)
                 if re.match(_SIZE_LINE, _key(b))]  # fmt: skip
        if len(sized) != 1:  # users_card read the card whole; this key alone is read again
            return ()
        read = load_header("\n".join(sized[0][0]), path, OutputError, sized[0][1])
    except OutputError:
        return ()
    said = read.get("size_categories") if isinstance(read, dict) else None
    if said is None:
        return ()
    records = sum(split.num_records for split in index.splits.values())
    right = size_category(records)
    listed = said if isinstance(said, list) else [said]
    if right in listed:
        return ()
    return (f"{path}: its size_categories says "
            f"{', '.join(map(str, listed)) or 'none'}, but the dataset holds "
            f"{plural(records, 'record')}: set it to {right}",)  # fmt: skip


def summary(index: Index) -> str:
    """Where the shards came from, their counts, and the duplicates found."""
    counts = ", ".join(f"{split} {entry.num_records:,}"
                       for split, entry in index.splits.items())  # fmt: skip
    said = [
        f"Packed by shardpack from a {index.source} source into "
        f"{index.container_name} shards (encoding {index.encoding}): "
        f"{counts} images, {classes_said(len(index.classes), num_object_classes(index.schema))}; "
        f"{index.num_skipped:,} skipped (listed in index.json)."
    ]
    duplicates = index.duplicates
    if duplicates:
        copies, groups = duplicates["copies"], duplicates["groups"]
        near = f"Near duplicates (perceptual hashes within {duplicates.get('near_distance')} bits)"
        said.append(f"{near if duplicates.get('method') == 'near' else 'Exact duplicates'}: "
                    f"{plural(copies, 'copy', 'copies')} of {plural(groups, 'image')} "
                    f"({duplicates['removed']:,} removed).")  # fmt: skip
        said += [f"{plural(a['images'], 'image')} of {a['split']} "
                 f"{also_in(a['images'], duplicates)} {a['also_in']}"
                 f"{' before deduplication' * all_removed(duplicates)}."
                 for a in duplicates["across_splits"]]  # fmt: skip
        if conflicts := duplicates.get("label_conflicts"):
            which = "group of copies is" if conflicts == 1 else "groups of copies are"
            said.append(f"{conflicts:,} {which} {LABELLED_DIFFERENTLY} (label "
                        "conflicts, named in index.json).")  # fmt: skip
    return "\n".join(said)
