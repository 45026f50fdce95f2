"""The TFDS source: a directory TFDS prepared (`dataset_info.json`, `features.json`, TFRecord or
ArrayRecord shards of tf.train.Example records), read with the containers' readers, never
TensorFlow. The `Image` feature's bytes are the image, untouched; a `ClassLabel` named `label`
is the label (names from `label.labels.txt`); `Text`, `Tensor`, `Scalar`, bounding boxes and
`Sequence`s of them are schema features under TFDS's flat names (`objects/bbox`). An item's
position is its record's byte offset (TFRecord) or number (ArrayRecord) in its shard.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from shardpack.containers import CONTAINERS
from shardpack.errors import ImageError, Option, RecordError, SourceError
from shardpack.options import PackOptions
from shardpack.schema import BUILTIN_NAMES, LABEL, Feature, Schema, check_values
from shardpack.sources.classlist import MAX_CLASSES, check_class_names
from shardpack.sources.openfiles import kept_open, read_json, read_metadata
from shardpack.sources.scanprogress import listed
from shardpack.sources.source import Dataset, Item, Source, a_link, cannot_read, folder_only
from shardpack.storage import Storage

if TYPE_CHECKING:
    from shardpack.containers import Example

# The containers' readers are imported where used: --source's choices come from the registry.

INFO, FEATURES = "dataset_info.json", "features.json"
_CLASS = "tensorflow_datasets.core.features."
# TFDS's default shard naming, and what each of its fields becomes.
TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_SAFE_NAME = r"[A-Za-z0-9_.\-]+\Z"  # a shard name that stays in SRC
# What dataset_info.json without a fileFormat means (TFDS's own default).
TFDS_DEFAULT_FORMAT = "tfrecord"
# Tensor dtypes, as features.json spells them, by the Example list that holds them.
_INTS = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_FIX = "; convert it with tfds to one without it, or pack another source"


class TfdsSource(Source):
    """A directory TFDS prepared: data_dir/<name>/<version>/."""

    name = "tfds"
    kinds = ("tfds",)
    described = "a TFDS prepared directory (dataset_info.json and features.json)"
    splits_from = "its TFDS splits"

    def recognise(self, root: Storage, options: PackOptions) -> Storage | None:
        folder_only(root, options, self.name)
        if root.kind() == "dir" and root.kind(INFO) == "file" and root.kind(FEATURES) == "file":
            return root
        if options.source == self.name:
            raise SourceError(f"{root.path()}: no {INFO} and {FEATURES}; pass the folder TFDS "
                              "prepared (data_dir/<name>/<version>)")  # fmt: skip
        return None

    def scan(
        self, found: Storage, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        if options.classes is not None:
            raise SourceError(f"{found.path()}: TFDS brings its own class list; drop ",
                              Option("classes"))  # fmt: skip
        return scan_tfds(found)

    def load(self, item: Item, root: Storage, options: PackOptions, cache: dict) -> bytes:
        if "tfds" not in cache:  # two small files, read once a worker
            cache["tfds"] = (_plan(root)[0], _file_format(root, _info(root)))
        image, fmt = cache["tfds"]
        data = _record(root, item, fmt, cache).get(image, [])
        if len(data) != 1 or not isinstance(data[0], bytes) or not data[0]:
            raise ImageError(item.key, "the record holds no image bytes")
        return data[0]

    def item_files(self, items: Iterable[Item]) -> Iterator[tuple[str, int]]:
        return iter(())  # records are read a piece at a time, not as whole files

    def default_name(self, dataset: Dataset) -> str | None:
        name = _info(dataset.root).get("name")
        return name if isinstance(name, str) and re.match(_SAFE_NAME, name) else None


def _info(root: Storage) -> dict:
    info = read_json(root, INFO, "a TFDS dataset_info.json")
    if not isinstance(info, dict):
        raise SourceError(f"{root.path(INFO)}: is not a JSON object; is it TFDS's {INFO}?")
    return info


def _file_format(root: Storage, info: dict) -> str:
    fmt = info.get("fileFormat", TFDS_DEFAULT_FORMAT)
    if _container(fmt) is None:
        raise SourceError(f"{root.path(INFO)}: file format {fmt!r} is not TFRecord or "
                          f"ArrayRecord{_FIX}")  # fmt: skip
    return fmt


def scan_tfds(root: Storage) -> Dataset:
    """Every record of every split dataset_info.json lists, its image left in the shard."""
    try:
        info = _info(root)
        fmt = _file_format(root, info)
        image, features = _plan(root)
        present = list(_shards(root, info, fmt))
    except (TypeError, ValueError, AttributeError) as e:  # a field of another type
        raise SourceError(f"{root.path()}: {INFO} or {FEATURES} is not as TFDS writes it "
                          f"({e}); prepare the dataset again with tfds") from None  # fmt: skip
    splits, skipped = {}, []
    for split, shards in present:
        items = []
        for shard, count in shards:
            found = _scan_shard(root, shard, fmt, image, features, items, skipped)
            listed(found)
            if count is not None and found != count:
                raise SourceError(f"{root.path(shard)}: holds {found} records, but {INFO} says "
                                  f"{count}; prepare the dataset again")  # fmt: skip
        splits[split] = tuple(items)
    label = features.pop(LABEL, None)
    classes = None if label is None else label.classes
    schema = Schema.build(classes, features, multi_label=label is not None and label.is_list)
    return Dataset("tfds", root, schema, splits, skipped=tuple(skipped))


def _shards(root: Storage, info: dict, fmt: str) -> Iterator[tuple[str, list]]:
    """(split, [(shard name, record count or None)]) of each split, every shard present."""
    splits = info.get("splits")
    if not isinstance(splits, list) or not splits:
        raise SourceError(f"{root.path(INFO)}: lists no splits; prepare the dataset again")
    seen: set[str] = set()
    for split in splits:
        name = split.get("name") if isinstance(split, dict) else None
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise SourceError(f"{root.path(INFO)}: a split without a plain name ({name!r})")
        if name in seen:
            raise SourceError(f"{root.path(INFO)}: lists split {name!r} twice; prepare the "
                              "dataset again")  # fmt: skip
        seen.add(name)
        total, counts = _shard_count(root, name, split)
        template = split.get("filepathTemplate") or TEMPLATE
        shards: dict[str, int | None] = {}
        for i in range(total):
            shard = (template.replace("{DATASET}", str(info.get("name", "")))
                     .replace("{SPLIT}", name).replace("{FILEFORMAT}", fmt)
                     .replace("{SHARD_X_OF_Y}", f"{i:05d}-of-{total:05d}")
                     .replace("{SHARD_INDEX}", f"{i:05d}"))  # fmt: skip
            if shard in shards:  # a template without the shard's number names one file
                raise SourceError(f"{root.path(INFO)}: split {name!r} has {total:,} shards, "
                                  f"but its file name template {template!r} names them all "
                                  f"{shard!r}; prepare the dataset again")  # fmt: skip
            if re.match(_SAFE_NAME, shard) and root.link_target(shard) is not None:
                raise a_link(root, shard, part=True)  # before a read refuses it as ELOOP
            if not re.match(_SAFE_NAME, shard) or root.kind(shard) != "file":
                raise SourceError(f"{root.path(shard)}: missing, but {INFO} lists it (split "
                                  f"{name!r}); copy every shard of the dataset, or prepare it "
                                  "again with tfds") from None  # fmt: skip
            shards[shard] = None if counts is None else counts[i]
        yield name, list(shards.items())


def _shard_count(root: Storage, split: str, info: dict) -> tuple[int, list[int] | None]:
    """A split's shard count, and each shard's record count where dataset_info.json gives
    them; refused where its numShards and shardLengths disagree."""
    lengths = info.get("shardLengths")
    counts = [int(n) for n in lengths] if isinstance(lengths, list) else None
    listed = info.get("numShards")
    total = int(listed) if listed is not None else len(counts) if counts is not None else 1
    if (counts is not None and total != len(counts)) or total < 1:
        raise SourceError(f"{root.path(INFO)}: split {split!r} has numShards {listed} but "
                          f"{len(counts or ())} shardLengths; prepare it again")  # fmt: skip
    return total, counts


def _scan_shard(
    root: Storage, shard: str, fmt: str, image: str, features: dict[str, Feature],
    items: list[Item], skipped: list[tuple[str, str]],
) -> int:  # fmt: skip
    """Add each record of one shard to `items` (or `skipped`); return how many it holds."""
    count = 0
    try:
        for position, example in _container(fmt).iter_records(root, shard):
            key = f"{shard}:{position}"
            try:  # the item's position: its record number, what the container's reader takes
                items.append(_item(key, shard, count, example, image, features))
            except _Bad as e:
                skipped.append((key, str(e)))
            count += 1
    except OSError as e:  # a store that lists the shard but refuses its bytes, a disk's EIO
        raise cannot_read(root.path(shard), e) from None
    return count


class _Bad(Exception):
    """A record that cannot be packed (why)."""


def _item(
    key: str, shard: str, position: int, example: Example | RecordError, image: str,
    features: dict[str, Feature],
) -> Item:  # fmt: skip
    if isinstance(example, RecordError):
        raise _Bad(example.reason)
    data = example.get(image, [])
    if len(data) != 1 or not data[0]:
        raise _Bad(f"no image bytes in feature {image!r}")
    fields = {}
    for name, feature in features.items():
        values = example.get(name, [])
        why = check_values(name, feature, values)
        if why is not None:
            raise _Bad(why)
        fields[name] = _field(feature, values)
    label = fields.pop(LABEL, None)
    return Item(key, label, shard, len(data[0]), position, fields)


def _field(feature: Feature, values: list) -> object:
    """One feature's Example values as an item keeps them: text as str, lists as tuples."""
    if feature.text:
        values = [v.decode("utf-8", "surrogateescape") for v in values]
    return tuple(values) if feature.is_list else values[0]


def _container(fmt: str):
    """The container that reads TFDS's file format `fmt`, or None."""

    return next((c for c in CONTAINERS.values() if c.tfds_file_format == fmt), None)


def _record(root: Storage, item: Item, fmt: str, cache: dict) -> Example:
    """The record an item names, read from its shard kept open in the worker."""
    try:
        reader = kept_open(cache, "tfds.shards", lambda path: _container(fmt).open(root, path)).get(
            item.path
        )
        return reader[item.position]
    except (RecordError, IndexError) as e:
        raise ImageError(item.key, getattr(e, "reason", str(e))) from None
    except OSError as e:
        raise ImageError(item.key, f"cannot read its shard ({e.strerror or e})") from None


# ---- features.json ---------------------------------------------------------------------------


def _plan(root: Storage) -> tuple[str, dict[str, Feature]]:
    """The image feature's name, and every other feature as the schema types it."""
    doc = read_json(root, FEATURES, "TFDS's features.json")
    top = doc.get("featuresDict", {}).get("features") if isinstance(doc, dict) else None
    if not isinstance(top, dict):
        raise SourceError(f"{root.path(FEATURES)}: holds no FeaturesDict; is it TFDS's?")
    image, features = None, {}
    for name, spec in _flat(top, "", root):
        kind = _kind(spec)
        if kind == "Image" and image is None:
            image = name
        elif name in BUILTIN_NAMES:
            raise SourceError(f"{root.path(FEATURES)}: feature {name!r} has the name of a "
                              f"built-in feature ({', '.join(BUILTIN_NAMES)}){_FIX}")  # fmt: skip
        else:
            features[name] = _feature(name, kind, spec, root, sequence=False)
            if name == LABEL and features[name].classes is None:
                raise SourceError(f"{root.path(FEATURES)}: feature 'label' is a TFDS "
                                  f"{kind or '?'}, but shardpack's label is a ClassLabel"
                                  f"{_FIX}")  # fmt: skip
    if image is None:
        raise SourceError(f"{root.path(FEATURES)}: no Image feature; shardpack packs images")
    return image, features


def _flat(features: dict, prefix: str, root: Storage) -> Iterator[tuple[str, dict]]:
    """(flat name, spec) of each feature, nested dicts' names joined by "/" as TFDS does."""
    for name, spec in sorted(features.items()):
        if not isinstance(spec, dict):
            raise SourceError(f"{root.path(FEATURES)}: feature {name!r} is not an object")
        inner = spec.get("sequence", {}).get("feature", {}) if _kind(spec) == "Sequence" else {}
        if _kind(spec) == "FeaturesDict":
            yield from _flat(spec.get("featuresDict", {}).get("features", {}), f"{name}/", root)
        elif _kind(inner) == "FeaturesDict":  # a Sequence of dicts: a Sequence of each
            for sub, one in _flat(inner.get("featuresDict", {}).get("features", {}), "", root):
                yield f"{prefix}{name}/{sub}", {**spec, "sequence": {"feature": one}}
        else:
            yield prefix + name, spec


def _kind(spec: dict) -> str:
    return str(spec.get("pythonClassName", "")).removeprefix(_CLASS).rsplit(".", 1)[-1]


def _feature(name: str, kind: str, spec: dict, root: Storage, sequence: bool) -> Feature:
    """The schema's type for one TFDS feature (a list of them inside a Sequence)."""
    many = (-1,) if sequence else ()
    if kind == "Text":
        return Feature("bytes", many, text=True)
    if kind == "ClassLabel":
        return Feature("int64", many, classes=_class_names(name, spec, root))
    if kind == "Image" and not sequence:
        return Feature("bytes")  # a second image: its bytes as they are
    if kind == "BBoxFeature":
        return Feature("float32", (-1, 4))
    if kind in ("Tensor", "Scalar"):
        return _tensor(name, spec.get("tensor", {}), root, many)
    if kind == "Sequence" and not sequence:
        inner = spec.get("sequence", {}).get("feature", {})
        return _feature(name, _kind(inner), inner, root, sequence=True)
    raise SourceError(f"{root.path(FEATURES)}: feature {name!r} is a TFDS {kind or '?'}"
                      f"{' inside a Sequence' if sequence else ''}, which shardpack cannot "
                      f"carry{_FIX}")  # fmt: skip


def _tensor(name: str, tensor: dict, root: Storage, many: tuple[int, ...]) -> Feature:
    dims = [int(d) for d in tensor.get("shape", {}).get("dimensions", [])]
    dtype = tensor.get("dtype")
    kind = "int64" if dtype in _INTS else "float32" if dtype in _FLOATS else (
        "bytes" if dtype == "string" else None)  # fmt: skip
    if kind is None or tensor.get("encoding", "none") != "none" or len(dims) + len(many) > 2:
        raise SourceError(f"{root.path(FEATURES)}: feature {name!r} is a {dtype} Tensor of "
                          f"shape {dims} (encoding {tensor.get('encoding')}), which shardpack "
                          f"cannot carry{_FIX}")  # fmt: skip
    shape = (*many, *dims)
    if len(shape) == 2 and shape[1] > 0:
        return Feature(kind, (-1, shape[1]))
    return Feature(kind, (-1,) if shape else ())


def _class_names(name: str, spec: dict, root: Storage) -> tuple[str, ...]:
    """A ClassLabel's names: its labels file where TFDS wrote one, else "0".."n-1"."""
    file = f"{name.replace('/', '-')}.labels.txt"
    if root.kind(file) == "file":
        data = read_metadata(root, file, "a TFDS class-names file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SourceError(f"{root.path(file)}: is not UTF-8 text; prepare the dataset "
                              "again with tfds") from None  # fmt: skip
        # one name a line as TFDS reads it (text mode, split at "\n"): splitlines() would also
        # split at U+2028 and \x1c, and every name after one would name the next label
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        names = tuple(line.strip() for line in lines if line.strip())
        check_class_names(names, root.path(file), "its lines")
        return names
    count = int(spec.get("classLabel", {}).get("numClasses", 0))
    if count > MAX_CLASSES:
        raise SourceError(f"{root.path(FEATURES)}: feature {name!r} claims {count:,} "
                          f"classes, over the {MAX_CLASSES:,} a dataset may have")  # fmt: skip
    return tuple(str(i) for i in range(count))


SOURCE = TfdsSource()
