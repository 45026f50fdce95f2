"""`pack --append` and `pack --update`: a packed dataset grows and changes as its source does.

New items go into new shards of a new generation; a shard already in OUT is never rewritten in
place. Shard names keep the count the split was first packed with (`...-00004-of-00004` is the
fifth shard of a split first packed into four): no name depends on the shard count of the
moment, so nothing is renamed as a split grows, and TFDS reads the split through one template
whose count is that fixed text. `--update` writes the shards that held a changed or vanished
item anew under new names and removes the old files only after the new index.json landed,
then closes the gaps that leaves in the numbering (gaps.py).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import dataclass, replace
from itertools import count, repeat

from shardpack.containers import CONTAINERS, is_shard_name
from shardpack.errors import (
    IndexFormatError,
    OutputError,
    ShardpackError,
    printable,
    shortened,
)
from shardpack.index import MAX_NAMED_SKIPPED, Index, load_index
from shardpack.layout import INDEX_FILES_DIR, INDEX_NAME, index_file_name
from shardpack.options import PackOptions, flag
from shardpack.packing import gaps, packer, stamps
from shardpack.packing.contents import Entry, entries, load_contents, write_contents
from shardpack.packing.cpuload import machine_cores
from shardpack.packing.duplicates import content_keys
from shardpack.packing.merge import uniform_size
from shardpack.packing.outdir import plan_record, prepare_growth
from shardpack.packing.plan import Plan, ShardResult, ShardSpec, make_plan
from shardpack.sources import Dataset, Item, keeping, scan, source_root
from shardpack.storage import Storage, storage_at
from shardpack.storage.atomic import json_bytes

# index.json's `history` keeps the last this many runs.
MAX_HISTORY = 100
# Options a grow takes from the run, not the dataset: they decide no byte of the old shards.
_RUN_OPTIONS = frozenset({"shards", "classes"})
# Options whose JSON form is a list where PackOptions holds a tuple.
_TUPLES = ("resize", "pad_color", "split_names")


@dataclass(frozen=True)
class Change:
    """What SRC holds that OUT does not, and the other way round."""

    new: dict[str, list[Item]]  # per split
    changed: dict[str, list[Item]]  # items whose bytes differ from the packed ones, per split
    vanished: int  # packed items SRC no longer has
    touched: frozenset[str]  # shards holding a changed or vanished item

    def summary(self, mode: str, rewritten: int) -> dict[str, object]:
        """The run's counts, as the history and the summary give them."""
        added = sum(map(len, self.new.values()))
        changed = sum(map(len, self.changed.values()))
        return {"mode": mode, "added": added, "changed": changed, "removed": self.vanished,
                "shards_rewritten": rewritten}  # fmt: skip


def grow(
    src: object, out: object, given: PackOptions, progress: object, storage_options: dict | None
) -> packer.PackResult:
    """pack() with options.grow "append" or "update" (see pack for the arguments)."""
    start = time.perf_counter()
    src_root = source_root(src, storage_options)
    out = storage_at(out, storage_options)
    packer._refuse_out_inside_src(src_root, out)
    if out.kind() is None:  # before the lock, which would be made in it
        raise OutputError(f"{out.root}: no such folder, no dataset to grow; pack it without "
                          "--append or --update first")  # fmt: skip
    with out.lock(False), keeping():
        old = _old_index(out)
        _remove_retired(out, old)
        options = dataset_options(old, given)
        CONTAINERS[options.format].require()
        with packer._no_gc():  # millions of objects and no cycles, as pack's scan
            contents, loaded = load_contents(out, old), stamps.load(out, old)
            known = dict(loaded)
            dataset = _scan(src_root, options, old, storage_options)
            options = replace(options, classes=dataset.classes or None)
            change = _compare(dataset, contents, known, options)
        update = options.grow == "update"
        touched = change.touched if update else frozenset()
        todo = {s: [*change.new.get(s, ()), *(change.changed.get(s, ()) if update else ())]
                for s in dataset.splits}  # fmt: skip
        if update:
            _add_survivors(todo, dataset, contents, touched, change)
        if not any(todo.values()) and not touched:  # (gaps a stop left are closed still)
            if known != loaded:  # files read again, their bytes unchanged: read no more
                stamps.save(out, old.raw, stamps.held(contents.values(), known))
            old = close_gaps(out, old, contents)
            return _nothing(out.root, old, change, options.grow, start)
        generation = old.raw.get("generation", 0) + 1
        plan = grow_plan(dataset, todo, old, options, generation, touched)
        record = {**plan_record(plan, options), "grow": options.grow, "generation": generation}
        listed = {s.file for split in old.splits.values() for s in split.shards}
        reused = prepare_growth(out, plan, listed)
        workers = 1 if out.in_process or src_root.in_process else given.workers or machine_cores()
        results = packer._write_shards(
            plan, record, reused, options, dataset, out, workers, progress
        )
        fresh = entries(plan, results)
        summary = change.summary(options.grow, len(touched))
        seconds = time.perf_counter() - start
        written = sum(r.num_records for r in results) - sum(r.num_records for r in reused)
        stats = {"seconds": round(seconds, 3), "workers": workers,
                 "images_per_second": round(written / seconds, 1) if seconds else None}  # fmt: skip
        doc, kept = _document(old, dataset, plan, results, fresh, contents, touched)
        doc["history"] = [*_history(old), {"generation": generation, "when": _now(), **summary}]
        doc["history"] = doc["history"][-MAX_HISTORY:]
        doc["stats"] = {**old.raw.get("stats", {}), **stats}
        moved = gaps.moves(doc, CONTAINERS[options.format])  # the gaps the update leaves
        doc["retired"] = sorted({*doc["retired"], *moved.values()})  # what a stop leaves there
        index = packer.write_outputs(out, doc, results, options.index_files, tfds=not moved)
        write_contents(out, {**contents, **fresh})  # agrees with the old index and the new
        out.put(INDEX_NAME, json_bytes(doc))  # the grown dataset is there from now on
        if touched:  # the next grow removes what a stop here leaves (doc["retired"])
            write_contents(out, {**kept, **fresh})
            _remove_retired(out, index)
        known.update(stamps.written(plan, results))  # the planned items' own, or none
        stamps.save(out, doc, stamps.held({**kept, **fresh}.values(), known))
        index = close_gaps(out, index, {**kept, **fresh})
    notes = _said(change, options.grow)
    return packer.PackResult(out.root, index, sum(s.num_records for s in index.splits.values()),
                             doc["num_skipped"], time.perf_counter() - start, len(reused),
                             sum(len(s.shards) for s in index.splits.values()), written,
                             notes, summary)  # fmt: skip


def close_gaps(out: Storage, index: Index, contents: dict[str, Entry]) -> Index:
    """Close the gaps in the numbering of `index`, which is in place (gaps.py), with the DALI
    index files of the shards moved; `contents`: the entries of its shards. Returns the index
    in place after."""
    moved = gaps.moves(index.raw, index.container)
    if not moved:
        return index
    idx = out.child(INDEX_FILES_DIR)
    held = {e.name for e in idx.listdir()} if out.kind(INDEX_FILES_DIR) == "dir" else set()
    for name, to in moved.items():
        out.link_or_copy(name, to)
        if f"{name}.idx" in held:
            idx.link_or_copy(f"{name}.idx", f"{to}.idx")
    doc = gaps.closed(index.raw, moved, index.container)
    renamed = {moved.get(file, file): entry for file, entry in contents.items()}
    write_contents(out, {**contents, **renamed})  # agrees with both indexes
    closed = packer.write_outputs(out, doc, [], False)  # TFDS metadata now
    out.put(INDEX_NAME, json_bytes(doc))
    write_contents(out, {s.file: renamed[s.file] for split in closed.splits.values()
                         for s in split.shards})  # fmt: skip
    _remove_retired(out, closed)
    return closed


def _remove_retired(out: Storage, index: Index) -> None:
    """Remove the shards (and their index files) an --update replaced, once its index is in
    place; only names that are shards and that the index does not list."""
    listed = {s.file for split in index.splits.values() for s in split.shards}
    retired = index.raw.get("retired")
    if not isinstance(retired, list):
        return
    files = {f for f in retired if isinstance(f, str) and is_shard_name(f)} - listed
    out.remove(sorted(files))
    if files and INDEX_FILES_DIR in {e.name for e in out.listdir() if e.is_dir}:
        out.child(INDEX_FILES_DIR).remove(f"{f}.idx" for f in sorted(files))


def _old_index(out: Storage) -> Index:
    """OUT's index, or an error saying a grow needs a packed dataset there (or one that lists
    a shard twice, which no pack writes: its gaps could not be closed)."""
    try:
        index = load_index(out)
    except IndexFormatError as e:
        raise OutputError(f"{out.root}: no dataset to grow here ({e}); pack it without "
                          "--append or --update first") from None  # fmt: skip
    files = [s.file for split in index.splits.values() for s in split.shards]
    if len(set(files)) != len(files):
        raise OutputError(f"{out.path(INDEX_NAME)}: lists a shard twice, as no pack writes it; "
                          "repack with --overwrite")  # fmt: skip
    return index


def _json(value: object) -> object:
    """A value as JSON gives it back: tuples as lists."""
    return json.loads(json.dumps(value))


def _has_index_files(old: Index) -> bool:
    """Whether the dataset's shards have DALI index files (its first shard has): a grow writes
    them for its new shards too, asked or not."""
    first = next((s.file for split in old.splits.values() for s in split.shards), None)
    return first is not None and old.storage.kind(index_file_name(first)) == "file"


def dataset_options(old: Index, given: PackOptions) -> PackOptions:
    """The dataset's options (index.json's `options`) for this run; an option given that
    differs from the dataset's is refused, naming it. `--classes` must extend its class list.

    Raises:
        OutputError: an option differs, or the index keeps no options (an older shardpack).
    """
    kept = old.raw.get("options")
    ours = _json(given.output_fields())
    if not isinstance(kept, dict) or set(kept) != set(ours):
        raise OutputError(
            f"{old.storage.path(INDEX_NAME)}: keeps no options to grow the "
            "dataset with (an older shardpack's); repack it with --overwrite"
        )
    defaults = _json(PackOptions().output_fields())
    kept = {**kept, "name": old.name}  # None in it: the name SRC gave
    ours["name"] = given.name or old.name
    differ = [k for k in ours if k not in _RUN_OPTIONS and ours[k] not in (defaults[k], kept[k])]
    if differ:
        said = "; ".join(f"{flag(k)} {_shown(ours[k])} (the dataset's: {_shown(kept[k])})"
                         for k in differ)  # fmt: skip
        raise OutputError(f"{old.out}: the dataset was packed with other options: {said}; drop "
                          "them: --append and --update take the dataset's own")  # fmt: skip
    classes = given.classes
    if classes is not None and tuple(classes[: len(old.classes)]) != old.classes:
        gone = [c for c in old.classes if c not in classes]
        what = (f"it lacks {_shown(gone[:5])}" if gone else "it orders the dataset's classes "
                "otherwise")  # fmt: skip
        raise OutputError(f"{old.out}: --classes must begin with the dataset's "
                          f"{len(old.classes)} classes in their order, then add new ones at "
                          f"the end; {what}")  # fmt: skip
    taken = {k: kept[k] for k in kept if k not in _RUN_OPTIONS}
    try:  # read as untrusted: PackOptions checks each value's type and range
        taken.update({k: tuple(taken[k]) for k in _TUPLES if taken[k] is not None})
        if taken["split"] is not None:
            taken["split"] = tuple(map(tuple, taken["split"]))
        taken["name"] = old.name
        taken["seed"] = kept["seed"] if kept["seed"] is not None else 0
        return replace(given, **taken, index_files=given.index_files or _has_index_files(old))
    except (TypeError, ValueError, ShardpackError) as e:
        where = old.storage.path(INDEX_NAME)
        raise OutputError(f"{where}: its options are not ones shardpack wrote "
                          f"({printable(str(e))}); repack with --overwrite") from None  # fmt: skip


def _shown(value: object) -> str:
    """A value for a message: JSON, escaped, cut short."""
    return shortened(printable(json.dumps(value)))


def _scan(src: Storage, options: PackOptions, old: Index, storage_options) -> Dataset:
    """SRC's items labelled by the dataset's classes, new classes numbered after them."""
    dataset = scan(src, replace(options, classes=options.classes or None), storage_options)
    found = dataset.classes
    grown = (*old.classes, *(c for c in found if c not in old.classes))
    if options.classes is None and found != grown and old.classes:
        dataset = scan(src, replace(options, classes=grown), storage_options)
    old_features = {k: v for k, v in old.raw["features"].items() if k != "label"}
    features = {k: v for k, v in dataset.schema.to_json().items() if k != "label"}
    if features != old_features:
        raise OutputError(f"{src.path()}: its features ({_shown(sorted(features))}) differ from "
                          f"the dataset's ({_shown(sorted(old_features))}); pack it into a new "
                          "output folder")  # fmt: skip
    return dataset


def _compare(
    dataset: Dataset, contents: dict[str, Entry], known: dict[str, int], options: PackOptions
) -> Change:
    """What is new in SRC, what changed and what vanished, by (split, key). A held item whose
    file has its content key's size and the mtime `known` (stamps.py) is unchanged, unread;
    the others are read and keyed as workers key them, and where the bytes are the packed
    ones their file's new mtime goes into `known` (the next run reads them no more)."""
    held = {}  # key -> (shard, position, content size); keys are unique across the splits
    tried = set()  # skipped when packed: not new, and not worth a rewrite when gone
    for file, entry in contents.items():
        held.update(zip(entry["keys"], zip(repeat(file), count(), entry["size"]), strict=True))
        tried.update(entry["skipped"])
    new: dict[str, list[Item]] = {}
    present: list[tuple[str, Item]] = []
    recorded = []  # the stamp of each present item's file, if unchanged: (size, mtime)
    for name, items in dataset.splits.items():
        for item in items:
            found = held.get(item.key)
            if found is not None:
                present.append((name, item))
                recorded.append((found[2], known.get(item.key)))
            elif item.key not in tried:
                new.setdefault(name, []).append(item)
    now = stamps.taken(dataset.source, dataset.root, (item for _, item in present))
    unsure = [(name, item, stamp)  # (split, item, stamp) of the files whose stamp differs
              for (name, item), stamp, was in zip(present, now, recorded, strict=True)
              if stamp != was]  # fmt: skip
    keys = content_keys([(name, item) for name, item, _ in unsure], dataset, options,
                        options.workers or machine_cores())  # fmt: skip
    changed: dict[str, list[Item]] = {}
    touched = set()
    for (name, item, stamp), key in zip(unsure, keys, strict=True):
        file, i, size = held[item.key]
        if key[:2] != (contents[file]["crc"][i], size):
            changed.setdefault(name, []).append(item)
            touched.add(file)
        elif (mtime := stamps.kept(stamp, key[1])) is not None:
            known[item.key] = mtime
    vanished = len(held) - len(present)  # keys are unique: each held one is present once
    gone = set()
    if vanished:
        seen = {item.key for _, item in present}
        gone = {file for key, (file, _, _) in held.items() if key not in seen}
    return Change(new, changed, vanished, frozenset(touched | gone))


def _add_survivors(
    todo: dict[str, list[Item]],
    dataset: Dataset,
    contents: dict[str, Entry],
    touched: frozenset[str],
    change: Change,
) -> None:
    """Add to `todo` the unchanged items of the shards --update rewrites."""
    changed = {item.key for items in change.changed.values() for item in items}
    moved = {key for file in touched for key in contents[file]["keys"]} - changed
    for name, items in dataset.splits.items():
        todo[name] = [*todo.get(name, ()), *(item for item in items if item.key in moved)]


def grow_seed(seed: int, generation: int) -> int:
    """The shuffle seed of a generation's new items: from the dataset's seed and the number."""
    digest = hashlib.sha256(f"{seed}/{generation}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def grow_plan(
    dataset: Dataset,
    todo: dict[str, list[Item]],
    old: Index,
    options: PackOptions,
    generation: int,
    touched: frozenset[str],
) -> Plan:
    """The new shards: each split's items shuffled with the generation's seed, cut by the
    dataset's shard size (never by the worker count: any machine plans alike), numbered after
    the split's last shard and named with the count the split was first packed with."""
    sub = replace(dataset, splits={s: tuple(items) for s, items in todo.items() if items})
    seed = grow_seed(options.seed, generation) if options.shuffle else options.seed
    plan = make_plan(sub, old.name, replace(options, seed=seed, shards=None), 1)
    container = CONTAINERS[options.format]
    shards = []
    for spec in plan.shards:
        entry = old.raw["splits"].get(spec.split, {})
        count = entry.get("name_count", len(entry.get("shards", ())) or spec.num_shards)
        index = entry.get("next_shard", len(entry.get("shards", ()))) + spec.index
        file = container.shard_name(old.name, spec.split, index, count)
        shards.append(ShardSpec(spec.split, index, count, file, spec.items))
    digest = hashlib.sha256(json.dumps(
        [plan.digest, old.raw.get("plan_digest"), generation, options.grow, sorted(touched),
         [s.file for s in shards]]).encode()).hexdigest()  # fmt: skip
    return replace(plan, shards=tuple(shards), digest=digest)


def _document(
    old: Index,
    dataset: Dataset,
    plan: Plan,
    results: list[ShardResult],
    fresh: dict[str, Entry],
    contents: dict[str, Entry],
    touched: frozenset[str],
) -> tuple[dict, dict[str, Entry]]:
    """The grown index document, and the contents entries of the shards it keeps (`fresh`:
    those of the new shards)."""
    doc = copy.deepcopy(old.raw)
    by_file = {r.file: r for r in results}
    classes = list(dataset.classes)
    generation = old.raw.get("generation", 0) + 1
    for spec in plan.shards:
        entry = doc["splits"].setdefault(spec.split, {"shards": [], "name_count": spec.num_shards})
        result = by_file[spec.file]
        entry["shards"].append({"file": result.file, "num_records": result.num_records,
                                "num_bytes": result.num_bytes, "sha256": result.sha256,
                                "generation": generation})  # fmt: skip
        entry["next_shard"] = spec.index + 1
    kept = {}
    for name, entry in list(doc["splits"].items()):
        entry["shards"] = [s for s in entry["shards"] if s["file"] not in touched]
        entry.setdefault("name_count", len(entry["shards"]))
        counts = [0] * len(classes)
        for shard in entry["shards"]:
            found = fresh.get(shard["file"]) or contents[shard["file"]]
            kept.update({} if shard["file"] in fresh else {shard["file"]: found})
            for label, n in enumerate(found["label_counts"][: len(classes)]):
                counts[label] += n
        entry["class_counts"] = counts
        entry["num_records"] = sum(s["num_records"] for s in entry["shards"])
        if not entry["shards"]:
            del doc["splits"][name]
    skipped = [{"key": k, "reason": r} for result in results for k, r in result.skipped]
    doc.update(
        classes=classes,
        features=dataset.schema.to_json(),
        plan_digest=plan.digest,
        generation=generation,
        retired=sorted(touched),  # removed once this index is in place
        skipped=[*doc.get("skipped", []), *skipped][:MAX_NAMED_SKIPPED],
        num_skipped=doc.get("num_skipped", 0) + len(skipped),
    )
    if results and uniform_size(results) != doc.get("image_size"):
        doc["image_size"] = None  # the new records' size is not the dataset's one size
    return _json(doc), kept


def _history(old: Index) -> list:
    """The runs the old index recorded ([] where it holds none)."""
    history = old.raw.get("history")
    return history if isinstance(history, list) else []


def _now() -> str:
    """The time of day in UTC, as the history records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _said(change: Change, mode: str) -> tuple[str, ...]:
    """What --append left alone, pointing to --update."""
    changed = sum(map(len, change.changed.values()))
    if mode != "append" or not (changed or change.vanished):
        return ()
    return (f"{changed:,} changed and {change.vanished:,} vanished items left as packed; "
            "pack with --update to bring them in line",)  # fmt: skip


def _nothing(root: str, old: Index, change: Change, mode: str, start: float) -> packer.PackResult:
    """The result of a grow that found nothing to do: OUT untouched."""
    records = sum(s.num_records for s in old.splits.values())
    shards = sum(len(s.shards) for s in old.splits.values())
    return packer.PackResult(root, old, records, old.raw.get("num_skipped", 0),
                             time.perf_counter() - start, shards, shards, 0, _said(change, mode),
                             {**change.summary(mode, 0), "nothing": True})  # fmt: skip
