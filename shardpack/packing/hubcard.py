"""OUT/README.md: a Hugging Face dataset card (YAML front matter with dataset_info, features
for a Parquet pack alone, and configs, then a short summary) written from the index. A
README.md that is not ours (no MARKER) is the user's and is never replaced unasked
(outdir.prepare refuses)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from shardpack.errors import classes_said, plural
from shardpack.hffeatures import card_form, hf_feature
from shardpack.index import Index, ShardInfo
from shardpack.layout import CARD_NAME
from shardpack.packing.duplicates import LABELLED_DIFFERENTLY
from shardpack.packing.objects import num_object_classes
from shardpack.schema import Feature
from shardpack.storage import Storage

# The card's second line (a YAML comment) says it is shardpack's to rewrite; what is read of a
# README.md to find it.
MARKER = "# written by shardpack pack, which rewrites it at each run"
_MARKER_BYTES = 4096


def is_ours(out: Storage) -> bool:
    """Whether OUT's README.md is a card pack wrote (its first bytes hold MARKER); no link
    followed, a bounded read."""
    try:
        with out.open(CARD_NAME) as blob:
            head = blob.pread(min(blob.size, _MARKER_BYTES), 0)
    except OSError:
        return False
    return MARKER.encode() in head


def card(index: Index) -> bytes:
    """The dataset card of an index. A split without records (every image of it skipped) is
    left out: `datasets` refuses to load a dataset one of whose splits holds no data. The
    features are declared only where they are the files' columns (Parquet): `datasets` casts
    what it loads to them, and a tar's samples (columns jpg, cls, json) cast so are all None."""
    listed = {split: entry for split, entry in index.splits.items() if entry.num_records}
    lines = ["---", MARKER, "dataset_info:"]
    if index.container.tabular:
        lines.append("  features:")
        for feature, spec in index.schema.items():
            lines += _feature(feature, spec)
    lines.append("  splits:")
    for split, entry in listed.items():
        lines += [f"  - name: {_q(split)}", f"    num_bytes: {_bytes(entry.shards)}",
                  f"    num_examples: {entry.num_records}"]  # fmt: skip
    total = sum(_bytes(entry.shards) for entry in index.splits.values())
    lines += [f"  download_size: {total}", f"  dataset_size: {total}", "configs:",
              "- config_name: default", "  data_files:"]  # fmt: skip
    for split, entry in listed.items():
        lines += [f"  - split: {_q(split)}", "    path:"]
        lines += [f"    - {_q(file)}" for file in data_files(entry.shards)]
    lines += ["---", "", f"# {index.name}", "", summary(index), ""]
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


def _bytes(shards: Sequence[ShardInfo]) -> int:
    return sum(s.num_bytes for s in shards)


def data_files(shards: Sequence[ShardInfo]) -> list[str]:
    """A split's shards as data_files: one pattern for the numbered names, else each name."""
    patterns = {re.sub(r"-\d+-of-\d+(?=(\.parquet)?$)", "-*", s.file) for s in shards}
    return sorted(patterns) if len(patterns) == 1 else [s.file for s in shards]


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
                 f"{'is' if a['images'] == 1 else 'are'} also in {a['also_in']}."
                 for a in duplicates["across_splits"]]  # fmt: skip
        if conflicts := duplicates.get("label_conflicts"):
            which = "group of copies is" if conflicts == 1 else "groups of copies are"
            said.append(f"{conflicts:,} {which} {LABELLED_DIFFERENTLY} (label "
                        "conflicts, named in index.json).")  # fmt: skip
    return "\n".join(said)
