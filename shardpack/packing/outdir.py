"""The state of OUT: one run at a time (lock), what may be replaced, and per-shard completion
records (the journal) that let an interrupted run resume.

Everything in OUT that this run did not just write is treated as hostile: no link is followed,
no special file is opened, reads are bounded, and only regular files under shard names (or our
own temporary names) are ever removed.
"""

from __future__ import annotations

import base64
import binascii
import json
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from shardpack.containers import Container, is_shard_name
from shardpack.contentsfile import tally_fits
from shardpack.errors import (
    IndexFormatError,
    Option,
    OutputError,
    earlier,
    printable,
    python_value,
    shortened,
)
from shardpack.index import MAX_COUNT, Index, load_index
from shardpack.layout import (
    CARD_NAME,
    CONTENTS_NAME,
    CROISSANT_NAME,
    FAILURES_NAME,
    INDEX_FILES_DIR,
    INDEX_NAME,
    JOURNAL_FOLDER,
    JOURNAL_NAME,
    LOCK_NAME,
    METADATA_NAMES,
    STAMPS_NAME,
)
from shardpack.packing.croissant import users_keys
from shardpack.packing.facts import facts_of
from shardpack.packing.hubcard import UsersCard, users_card, users_part
from shardpack.packing.plan import Plan, ShardResult, ShardSpec
from shardpack.schema import MAX_ROW
from shardpack.sources.folder import is_image_name
from shardpack.storage import Storage
from shardpack.storage.atomic import json_bytes

if TYPE_CHECKING:
    from shardpack.options import PackOptions

# A journal holds one line of a few hundred bytes per shard (more with many skipped images):
# 256 MiB is far past any real one; past it, the rest counts as a torn tail.
_JOURNAL_CAP = 256 << 20
# Journal records read at most beyond twice the shard files OUT holds (each record vouches for
# one; shards removed by hand leave theirs): a planted flood of records costs a listing.
_JOURNAL_SLACK = 16
# The most shard entries a journal is read for: a plan of more shards is none anyone makes.
_MAX_JOURNAL_LINES = 1_000_000
# OUT's folders looked into for images before a fresh pack (refuse_images): a dataset's class
# or split folders show in the first few, and a listing each is all it costs.
_FOLDERS_LOOKED_INTO = 8


# A journal as read (OutState's head and finished shards), to be put back as it was.
Found = tuple[dict, tuple[ShardResult, ...]]


@dataclass(frozen=True)
class OutState:
    """What earlier runs left in OUT, read once before a run touches it."""

    names: frozenset[str]  # OUT's entries
    sizes: dict[str, int]  # the size the listing gives each file of them (0: a link, a fifo)
    folders: frozenset[str]  # those that are folders (not links to one)
    has_index: bool  # an index.json is there, readable or not
    digests: tuple[str | None, ...]  # plan digest of each record found; None where unreadable
    journal_digest: str | None  # the journal's plan digest, when it has a readable one
    journal_head: dict | None  # its first line (plan_record's and the digest), if an object
    finished: tuple[ShardResult, ...]  # the journal's well-formed shard entries
    listed: frozenset[str]  # shard file names the old index or journal say shardpack wrote
    beside: frozenset[str]  # OUT's files that the old index's splits imply (wids' lists)

    @property
    def ours(self) -> bool:
        """OUT holds an index.json or a journal: shardpack wrote here."""
        return bool(self.digests)

    @property
    def journal(self) -> Found | None:
        """The journal as read, if its head is readable: what a run that replaces it and
        finishes nothing puts back (Journal.put_back)."""
        return None if self.journal_head is None else (self.journal_head, self.finished)


def read_state(out: Storage) -> OutState:
    """Read OUT's index.json and journal once (no link followed, bounded reads).

    Raises:
        OutputError: the journal's name holds a link, a folder or another special file.
    """
    entries = out.listdir()
    names = frozenset(e.name for e in entries)
    digests: list[str | None] = []
    listed: set[str] = set()
    has_index = INDEX_NAME in names
    beside: frozenset[str] = frozenset()
    if has_index:
        index = _old_index(out)
        digests.append(index.plan_digest if index is not None else None)
        if index is not None:  # load_index checked its shape
            listed |= {s.file for s in index.shards}
            beside = split_file_names(index.container, index.name, index.splits)
    # a record vouches for a shard file in OUT: a planted flood of them is not fetched whole
    # (the lock this run holds is no shard, and a fresh OUT holds it alone: matching its name
    # would import every container's module)
    held = sum(1 for name in names - {LOCK_NAME} if is_shard_name(name))
    header, finished = _read_journal(out, 2 * held + _JOURNAL_SLACK)
    journal_digest = None
    if header is not None:
        digest = header.get("plan_digest") if isinstance(header, dict) else None
        journal_digest = digest if isinstance(digest, str) else None
        digests.append(journal_digest)
    listed |= {r.file for r in finished}
    return OutState(
        names=names,
        sizes={e.name: e.size for e in entries if not e.is_dir},
        folders=frozenset(e.name for e in entries if e.is_dir),
        # only OUT's own entries: a crafted split name ("a/../..") names nothing outside
        beside=beside & {e.name for e in entries if not e.is_dir},
        has_index=has_index,
        digests=tuple(digests),
        journal_digest=journal_digest,
        journal_head=header if isinstance(header, dict) else None,
        finished=finished,
        listed=frozenset(f for f in listed if is_shard_name(f)),  # never anyone else's file
    )


def refuse_images(out: Storage) -> None:
    """Refuse, before anything is scanned or written, a fresh pack into a folder shardpack never
    wrote that holds images itself or in its first folders: most likely SRC and OUT swapped
    (`pack out/flowers ~/data/flowers`). Its shards and index.json would land among the
    images, and the next pack of that folder would take it for a shardpack output."""
    if out.kind() != "dir" or (entries := _listed(out)) is None:
        return
    entries = [e for e in entries if not e.name.startswith(".")]
    if {e.name for e in entries} & {INDEX_NAME, JOURNAL_NAME, JOURNAL_FOLDER}:
        return  # shardpack's: prepare decides
    found = next((e.name for e in entries if not e.is_dir and _is_image(e.name)), None)
    for folder in [e.name for e in entries if e.is_dir][:_FOLDERS_LOOKED_INTO]:
        if found is not None:
            break
        inside = _listed(out.child(folder)) or []
        found = next((f"{folder}/{e.name}" for e in inside if not e.is_dir and
                      _is_image(e.name)), None)  # fmt: skip
    if found is not None:
        raise OutputError(f"{out.root}: holds images ({printable(found)}, ...), as a "
                          "dataset's folder does: were SRC and OUT given the other way round? "
                          "Pass SRC first, then an empty or new folder for the shards")  # fmt: skip


def _listed(folder: Storage) -> list | None:
    """The folder's entries; None where it is gone since it was seen (an object store's
    folder is its keys: it goes with the last of them)."""
    try:
        return folder.listdir()
    except FileNotFoundError:
        return None


def _is_image(name: str) -> bool:
    """Whether a file's name is an image's, as a class folder's images are named."""
    return not name.startswith(".") and is_image_name(name)


def split_file_names(container: Container, name: str, splits: Iterable[str]) -> frozenset[str]:
    """The files a pack of `splits` writes beside its shards (container.split_files)."""
    return frozenset(file for split in splits for file in container.split_files(name, split, []))


_OVERWRITE = Option("overwrite", True)  # the way past what OUT holds
# What every pack and grow writes beside its shards (and the split files its container lists).
OUTPUTS = frozenset({INDEX_NAME, *METADATA_NAMES, CARD_NAME, CONTENTS_NAME, STAMPS_NAME,
                     CROISSANT_NAME, FAILURES_NAME})  # fmt: skip
# Those of OUTPUTS a run writes into, keeping what the user wrote there (a license, prose),
# never replaces: no clash with the user's files, and kept while a new dataset is packed.
KEPT_IN = frozenset({CARD_NAME, CROISSANT_NAME})


def check_kept(out: Storage, state: OutState) -> None:
    """Refuse, before anything is written, a file of KEPT_IN whose user's part the run would
    lose: a card or a croissant.json it cannot read as such."""
    if CARD_NAME in state.names:
        users_card(out)
    if CROISSANT_NAME in state.names:
        users_keys(out)


def cut_to_users(out: Storage) -> None:
    """Cut each file of KEPT_IN to what the user wrote in it (removed where that is nothing):
    the dataset it described is going."""
    kept = users_card(out)
    if kept == UsersCard():
        out.remove([CARD_NAME])
    else:
        out.put(CARD_NAME, users_part(kept))
    keys = users_keys(out)
    if keys:
        out.put(CROISSANT_NAME, json_bytes(keys))
    else:
        out.remove([CROISSANT_NAME])


def refuse_folders(out: Storage, state: OutState, written: Iterable[str]) -> None:
    """A folder under a name the run writes would stop that write at the end of the run, its
    shards written: refused before anything in OUT is touched."""
    blocked = sorted(state.folders & set(written))
    if blocked:
        raise OutputError.folder_at(out.path(blocked[0]))


def prepare(
    out: Storage,
    plan: Plan,
    overwrite: bool,
    resume: bool,
    beside: frozenset[str],
    record: dict[str, object],
    unchanged: Callable[[list[ShardResult]], list[bool]],
) -> tuple[list[ShardResult], bool]:
    """Make OUT ready for `plan`, touching only files shardpack wrote or will write.

    OUT is shardpack's when it holds an index.json or a journal; then the shard files they
    list, and the split files (split_file_names) its index implies, are ours. Otherwise any
    file under a name pack is about to write (a shard, `beside`, the index or the TFDS
    metadata) is the user's, and is replaced only with overwrite; README.md and croissant.json
    (KEPT_IN) are never replaced: written into, the user's part kept. `record` is the plan's
    plan_record: a refused resume says what differs from the one the journal kept.
    `unchanged` tells whether each finished shard's files are as its worker read them: the
    same job run again (no resume) keeps only those.

    An earlier dataset (a different plan, with overwrite) goes before a shard of this one is
    written: its index first, then its TFDS metadata and the shards only it listed, its card
    and croissant.json cut to what the user wrote in them (cut_to_users). A run that then
    fails leaves no dataset that is half the old one, and no old shard that nothing lists.

    Returns:
        ShardResults of finished shards of this very plan whose sha256 matches, with resume
        or when OUT's index or journal is this plan's (the same job again); and whether OUT
        held an index or a journal.

    Raises:
        OutputError: OUT holds a different dataset or files of the user's under names pack
            writes (without overwrite), or a resume finds the options or the source changed.
    """
    state = read_state(out)
    planned = {spec.file for spec in plan.shards}
    written = planned | beside | OUTPUTS
    refuse_folders(out, state, written)  # first: --overwrite would not help
    if state.ours and set(state.digests) != {plan.digest} and not overwrite:
        if state.has_index and state.digests[0] is None:  # broken, or not ours at all
            raise OutputError(f"{out.path(INDEX_NAME)}: not an index shardpack can read; pass ",
                              _OVERWRITE, " to replace it, or choose another output "
                              "folder")  # fmt: skip
        landed = state.has_index and state.digests[0] == state.journal_digest
        raise PlanChanged(f"{out.root}: ", *_what_changed(state.journal_head, record, landed),
                          "; pass ", _OVERWRITE, " to start over, or choose another output "
                          "folder")  # fmt: skip
    check_kept(out, state)
    if not state.ours and not overwrite:
        clash = sorted(state.names & (written - KEPT_IN))
        if INDEX_FILES_DIR in state.folders:  # index files of these shards are replaced too
            idx = {e.name for e in out.child(INDEX_FILES_DIR).listdir()}
            clash += sorted(f"{INDEX_FILES_DIR}/{n}" for n in idx & {f"{f}.idx" for f in planned})
        if clash:
            such = "1 such file" if len(clash) == 1 else f"{len(clash)} such files"
            raise OutputError(f"{out.path(clash[0])}: exists and was not written by shardpack "
                              f"({such}); choose an empty folder, or pass ", _OVERWRITE,
                              " to replace what is there")  # fmt: skip
    # Only shards of this very plan are kept, whatever --overwrite says: with resume, or when
    # OUT holds this plan's dataset or stopped run (the same job again), whose index stands
    # until the new one lands if every shard is kept (a stop leaves the user's dataset)
    again = state.ours and state.digests[0] == plan.digest and not overwrite
    same_plan = (resume or again) and state.journal_digest == plan.digest
    reused = _reusable(out, state.finished, plan) if same_plan else []
    if again and not resume:  # a file edited since (even to the same size) is packed again
        reused = [result for result, same in zip(reused, unchanged(reused), strict=True) if same]
    whole = again and {r.file for r in reused} == planned
    if state.has_index and not whole:  # with it go the split files, TFDS's, its descriptions
        out.remove([INDEX_NAME, *state.beside, *METADATA_NAMES, CONTENTS_NAME, STAMPS_NAME,
                    FAILURES_NAME])  # fmt: skip
        cut_to_users(out)
    out.remove(state.listed - planned)
    rewritten = planned | state.listed
    out.remove_partial(rewritten | written)
    if INDEX_FILES_DIR in state.folders:  # never into a folder a link points at
        kept = {r.file for r in reused}
        idx = out.child(INDEX_FILES_DIR)
        idx.remove_partial({f"{f}.idx" for f in rewritten})
        idx.remove(f"{f}.idx" for f in rewritten - kept)
    return reused, state.ours


def prepare_growth(out: Storage, plan: Plan, listed: set[str]) -> list[ShardResult]:
    """Make OUT ready for a grow plan (--append, --update) beside the shards of its index
    (`listed`), which stay untouched: remove what an interrupted grow of another plan left (the
    journal's shards no index lists) and partial files; keep the finished shards of this very
    plan (a rerun resumes, with or without --resume).

    Returns:
        ShardResults of finished shards of this plan whose sha256 matches.
    """
    state = read_state(out)
    planned = {spec.file for spec in plan.shards}
    same_plan = state.journal_digest == plan.digest
    reused = _reusable(out, state.finished, plan) if same_plan else []
    out.remove(state.listed - listed - {r.file for r in reused})
    out.remove_partial(planned)
    return reused


def growing(out: Storage) -> bool:
    """Whether an --append or --update is in progress (or stopped) in OUT: the shards it wrote
    (journaled or not: a kill may fall between a shard's rename and its journal line) are in
    no index yet, and its rerun keeps or replaces them."""
    header, _ = _read_journal(out, 0)
    return isinstance(header, dict) and header.get("grow") in ("append", "update")


def plan_record(plan: Plan, options: PackOptions) -> dict[str, object]:
    """What a journal keeps of how its plan was made, for a refused resume to say what changed:
    the output options and each split's shard count (without --shards it follows --workers)."""
    shards = {spec.split: spec.num_shards for spec in plan.shards}
    return json.loads(json.dumps({"options": options.output_fields(), "shards": shards}))


class PlanChanged(OutputError):
    """OUT holds a run of another plan (a refused resume or a rerun)."""


def _what_changed(head: dict | None, now: dict, landed: bool) -> list[str | Option]:
    """Why a run into an earlier run's OUT is refused, from the journal's first line (read
    as untrusted: only the options there are now are compared, and values are shown cut
    short): a grow's run (`landed`: its index is OUT's), else the options that differ, else
    the shard counts, else the source."""
    grow = head.get("grow") if head is not None else None
    if grow in ("append", "update") and not landed:  # the dataset is as it was before it
        return ["holds an ", Option("grow", grow), " stopped before it finished (the dataset "
                "is as it was before it); run the pack again with ", Option("grow", grow),
                " to finish it, its finished shards kept"]  # fmt: skip
    if grow in ("append", "update"):  # its options are the grow's, not a fresh pack's
        return ["holds a dataset grown by ", Option("grow", grow), " since it was packed; grow "
                "it with ", Option("grow", "append"), " or ", Option("grow", "update")]  # fmt: skip
    then = head.get("options") if head is not None else None
    if not isinstance(then, dict):  # a journal of an older version, or none (an index only)
        return ["was packed with other options or from a changed source"]
    changed = [key for key, value in now["options"].items() if key in then and then[key] != value]
    if changed:
        said: list[str | Option] = ["was packed with other options ("]
        for key in changed:
            said += [Option(key, python_value(now["options"][key])), " (the journal's: ",
                     earlier(key, then[key]), "); "]  # fmt: skip
        said[-1] = said[-1].removesuffix("; ") + ")"
        return said
    if head.get("shards") != now["shards"]:
        return [f"was planned into other shard counts (then {_shown(head.get('shards'))}, now "
                f"{_shown(now['shards'])}: without ", Option("shards"), " the count follows ",
                Option("workers"), " and the source's size); resume with that run's ",
                Option("workers"), " or ", Option("shards")]  # fmt: skip
    said: list[str | Option] = ["was packed from a changed source (other files, sizes or rows)"]
    if landed and then.get("shuffle") is True and not then.get("shuffle_window"):  # growable
        said += ["; ", Option("grow", "update"), " packs only what changed (a URL list's held "
                 "images unfetched)"]  # fmt: skip
    return said


def _shown(value: object) -> str:
    """A value from a journal, for a message: JSON, escaped, at most 40 characters."""
    return "unset" if value is None else shortened(printable(json.dumps(value, ensure_ascii=False)))


def _old_index(out: Storage) -> Index | None:
    """The old index, or None when it is unreadable or not a plain file."""
    try:
        return load_index(out)
    except (IndexFormatError, OSError):
        return None


def _read_journal(out: Storage, most: int) -> tuple[object, tuple[ShardResult, ...]]:
    """The journal's first line (its header) and its well-formed shard entries, up to the first
    line that is not JSON (a crash's torn line), the `most`-th or the _MAX_JOURNAL_LINES-th.
    (None, ()) for an empty journal. A line at a time, each kept only as a ShardResult: a
    planted journal of millions of short lines would hold gigabytes as parsed objects."""
    header, results = None, []
    for number, line in enumerate(out.read_journal(_JOURNAL_CAP, most)):
        if number > _MAX_JOURNAL_LINES:
            break
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):  # UnicodeDecodeError included; nested too deeply
            break
        if number == 0:
            header = entry
        elif (result := _shard_result(entry)) is not None:
            results.append(result)
    return header, tuple(results)


_RESULT_FIELDS = frozenset(f.name for f in fields(ShardResult))


def _shard_result(entry: object) -> ShardResult | None:
    """A journal line as a ShardResult, or None when it is not one this version wrote."""
    if not isinstance(entry, dict) or set(entry) != _RESULT_FIELDS:
        return None
    counted = ("arrow_bytes",) if entry["arrow_bytes"] is not None else ()  # None: no table
    ints = ("index", "num_records", "num_bytes", "lossless", *counted)
    good = (
        all(type(entry[k]) is int and entry[k] >= 0 for k in ints)
        and all(isinstance(entry[k], str) for k in ("split", "file", "sha256"))
        and is_shard_name(entry["file"])
        and isinstance(entry["seconds"], int | float)
        and isinstance(entry["label_counts"], list)
        and all(type(c) is int for c in entry["label_counts"])
        and isinstance(entry["skipped"], list)
        and all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s)
            for s in entry["skipped"]
        )
    )
    content = _content(entry["content"])
    if not good or content is None or not tally_fits(entry["tally"], entry["num_records"]):
        return None
    return ShardResult(**{**entry, "label_counts": tuple(entry["label_counts"]),
                          "skipped": tuple(map(tuple, entry["skipped"])), "content": content,
                          "tally": tuple(map(tuple, entry["tally"]))})  # fmt: skip


def _content(value: object) -> bytes | None:
    """A journal's base64 content (facts.FACT_DTYPE rows), or None if it is not base64."""
    try:
        return base64.b64decode(value, validate=True) if isinstance(value, str) else None
    except binascii.Error:
        return None


def _reusable(out: Storage, finished: tuple[ShardResult, ...], plan: Plan) -> list[ShardResult]:
    """Finished shards the plan still has whose bytes are intact (a regular file, same sha256),
    each once (a journal's repeated line would count its records twice), and whose line counts
    what the plan's shard can hold (a lie would go into index.json as it is)."""
    specs = {spec.file: spec for spec in plan.shards}
    reused: dict[str, ShardResult] = {}
    for result in finished:
        spec = specs.get(result.file)
        if spec is None or result.file in reused or not _holds(result, spec, plan.classes):
            continue
        try:  # no link is followed and nothing but a regular file opened: OSError otherwise
            intact = out.sha256(result.file, result.num_bytes) == result.sha256
        except OSError:
            continue
        if intact:
            reused[result.file] = result
    return list(reused.values())


def _holds(result: ShardResult, spec: ShardSpec, classes: int) -> bool:
    """Whether a journal line's counts fit its planned shard: its split and number, no more
    records than the shard's items and as many as its facts table notes written (where it
    notes any: another version's table is read as noting none), no more of them made PNG than
    it holds, a count for each of the `classes` (index.json sums them class by class), none
    more often than its records' labels can name it (MAX_ROW a record), each its written
    items' labels count (_labels_agree), its Arrow bytes a count index.json takes."""
    noted = facts_of(result.content, len(spec.items))["size"] > 0
    written = int(np.count_nonzero(noted))
    return (
        (result.split, result.index) == (spec.split, spec.index)
        and result.num_records <= len(spec.items)
        and written in (0, result.num_records)
        and result.lossless <= result.num_records
        and len(result.label_counts) == classes
        and all(0 <= n <= result.num_records * MAX_ROW for n in result.label_counts)
        and (result.arrow_bytes is None or result.arrow_bytes <= MAX_COUNT)
        and _labels_agree(result, spec, noted if written else None, classes)
    )


def _labels_agree(
    result: ShardResult, spec: ShardSpec, noted: np.ndarray | None, classes: int
) -> bool:
    """Whether a journal line's label_counts are its planned items' labels, counted over the
    records its facts table notes written (`noted`; None: it notes none, so all the items, or
    no check can be made and the shard is written again). Counts of the right length but
    swapped between classes would otherwise go into index.json as they are."""
    if noted is None and result.num_records not in (0, len(spec.items)):
        return False  # some skipped, but which is not noted: the counts cannot be checked
    if noted is None:
        noted = np.full(len(spec.items), result.num_records > 0)
    counts = [0] * classes
    for item, kept in zip(spec.items, noted.tolist(), strict=True):
        if not kept or item.label is None:
            continue
        for label in item.label if isinstance(item.label, tuple) else (item.label,):
            if not 0 <= label < classes:
                return False
            counts[label] += 1
    return tuple(counts) == tuple(result.label_counts)


class Journal:
    """Completion records: the plan digest and its plan_record (for a refused --resume to say
    what changed since), then one line per finished shard.

    Nothing is written until the first shard of this run lands (or begin), so a run that
    fails before that leaves the old journal as it was (the storage says how: a file appended
    to, or one object per line).
    """

    def __init__(
        self, out: Storage, digest: str, record: dict, reused: list[ShardResult],
        found: Found | None = None,
    ) -> None:  # fmt: skip
        head = [{"plan_digest": digest, **record}, *map(vars, reused)]
        self._writer = out.journal([_line(entry) for entry in head])
        self._out, self._found = out, found

    def begin(self) -> None:
        """Write the head now: into an OUT that holds no journal, before a shard can land (a
        kill between a shard's rename and its line would leave a shard no journal vouches
        for, which the next run refuses as the user's file)."""
        self._writer.begin()

    def add(self, result: ShardResult) -> None:
        """Record a finished shard durably (its file was committed before)."""
        try:
            self._writer.add(_line(vars(result)))
        except OSError as e:  # a full disk, a lost store: one line, and how to go on
            raise OutputError.writing(self._writer.name, e) from None

    def close(self) -> None:
        self._writer.close()

    def put_back(self) -> None:
        """After a run that began its journal and finished no shard: the journal OUT held as
        it began (`found`: a grow's dataset's, whose plain rerun keeps its unchanged shards by
        it), or none."""
        if self._found is None:
            self._out.remove_journal()
            return
        head, finished = self._found
        writer = self._out.journal([_line(head), *(_line(vars(r)) for r in finished)])
        try:
            writer.begin()
        finally:
            writer.close()


def _line(entry: dict) -> bytes:
    """One journal line. Results go in as their own __dict__: json writes their tuples as
    lists itself, where dataclasses.asdict would copy every offset first."""
    return json.dumps(entry, default=_plain).encode("ascii")  # any name, as \u escapes


def _plain(value: object) -> str | list[int]:
    """A result's bytes (its content) as json writes them, base64 text; its offsets' array
    as a list."""
    if isinstance(value, array):
        return value.tolist()
    if not isinstance(value, bytes):
        raise TypeError(f"not JSON: {type(value).__name__}")
    return base64.b64encode(value).decode("ascii")
