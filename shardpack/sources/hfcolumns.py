"""A Hugging Face Parquet file's columns as shardpack features: which holds the image (the
`datasets` Image type, struct<bytes, path>), the class names of ClassLabel columns (from the
schema's `huggingface` metadata), and every other column typed by its Arrow type; and one row
group's values converted to those features.

pyarrow is imported by the callers (hf.py) only when a file is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from shardpack.errors import Option, SourceError
from shardpack.schema import BUILTIN_NAMES, INT64, LABEL, Feature
from shardpack.sources.classlist import check_class_names
from shardpack.sources.tables.cells import MAX_TEXT_CHARS

MAX_METADATA_BYTES = 16 << 20  # the `huggingface` schema metadata: features and a card's info
_LISTS = ("Sequence", "List", "LargeList")


@dataclass(frozen=True)
class Columns:
    """What a file's columns are: the image column, `label`'s classes, the other features."""

    image: str
    classes: tuple[str, ...] | None  # None: no ClassLabel column named `label`
    multi_label: bool
    features: dict[str, Feature]  # every other packed column, in the file's order
    left_out: tuple[str, ...] = ()  # columns not packed (a second image column)
    # built-in facts a pack wrote beside the image (shardpack's own Parquet): derived anew
    derived: tuple[str, ...] = ()
    # lists of number lists whose row length the file does not fix: the first row holding
    # one sets it (settle); until then (-1, 1)
    ragged: frozenset[str] = frozenset()


def columns_of(schema, path: str, required: bool) -> Columns | None:
    """The columns of a file's Arrow schema; None (or, when `required`, SourceError) when it
    has no image column."""
    specs = _hf_features(schema, path)
    images = [f.name for f in schema if _is_image(f, specs.get(f.name))]
    if not images:
        if not required:
            return None
        raise SourceError(
            f"{path}: has no image column (a column of the datasets Image type, "
            "struct<bytes, path>); if it names image files, drop ",
            Option("source"),
            " and pack it as a manifest",
        )
    classes, multi, features, ragged = None, False, {}, set()
    derived = []
    for field in schema:
        if field.name in images:
            continue
        if _derived(field):  # what a pack wrote beside the image, written anew from it
            derived.append(field.name)
            continue
        spec = specs.get(field.name)
        labels = _class_names(spec, f"{path}, column {field.name!r}")
        if labels is not None:
            _check_class_column(field, labels[1], path)
        if field.name == LABEL and labels is not None:
            classes, multi = labels
            continue
        if field.name in BUILTIN_NAMES:
            raise SourceError(
                f"{path}: column {field.name!r} has the name of a built-in feature "
                f"({', '.join(BUILTIN_NAMES)}); rename it (datasets: rename_column)"
            )
        feature, fixed = _feature(field.type)
        if feature is None:
            raise SourceError(
                f"{path}: column {field.name!r} is of type {field.type}; shardpack packs "
                "numbers, text, bytes and (nested) lists of numbers or text: drop it "
                "(datasets: remove_columns)"
            )
        if labels is not None:
            feature = Feature("int64", feature.shape, classes=labels[0])
        features[field.name] = feature
        if not fixed:
            ragged.add(field.name)
    return Columns(images[0], classes, multi, features, left_out=tuple(images[1:]),
                   ragged=frozenset(ragged), derived=tuple(derived))  # fmt: skip


def joined(columns: Columns, other: Columns) -> Columns | None:
    """The columns of two files of one dataset, where they differ at most in class lists
    (`label`'s, or another ClassLabel column's such as objects/label), of each one list
    beginning with the other (classes added at the end, as a grown pack's later files name
    them, its card naming them all): the longer lists; else None."""
    if _unclassed(columns) != _unclassed(other):
        return None
    lists = {name: _longer(f.classes, other.features[name].classes)
             for name, f in columns.features.items() if f.classes is not None}  # fmt: skip
    classes = None if columns.classes is None else _longer(columns.classes, other.classes)
    if None in lists.values() or (classes is None and columns.classes is not None):
        return None
    features = {name: replace(f, classes=lists[name]) if name in lists else f
                for name, f in columns.features.items()}  # fmt: skip
    return replace(columns, classes=classes, features=features)


def _unclassed(columns: Columns) -> Columns:
    """The columns with each class list emptied: what two files must agree on besides them."""
    features = {name: f if f.classes is None else replace(f, classes=())
                for name, f in columns.features.items()}  # fmt: skip
    return replace(columns, classes=None if columns.classes is None else (), features=features)


def _longer(ours: tuple[str, ...], theirs: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The longer of two class lists where one begins with the other; else None."""
    short, long = sorted((ours, theirs or ()), key=len)
    return long if long[: len(short)] == short else None


def _check_class_column(field, multi: bool, path: str) -> None:
    """Refuse a ClassLabel column (a list of them, where `multi`) whose Arrow type holds
    anything but integers: a float 1.0 (pandas' type for an integer column with a gap) would
    index the class list, and a string would be compared with its bounds."""
    import pyarrow as pa

    feature, _ = _feature(field.type)
    if feature is None or feature.dtype != "int64" or feature.shape != ((-1,) if multi else ()):
        t = field.type.value_type if pa.types.is_dictionary(field.type) else field.type  # as read
        raise SourceError(f"{path}: column {field.name!r} is a ClassLabel"
                          f"{' list' if multi else ''} of Arrow type {t}, not of integers; "
                          "cast it (datasets: cast_column)")  # fmt: skip


def _derived(field) -> bool:
    """Whether a column is one of the built-in facts of a record as a pack writes it (height,
    width and channels as integers, format and key as text: shardpack's own Parquet output),
    which packing again derives from the image and its row; a column of such a name and
    another type is the user's, and refused by name."""
    import pyarrow as pa

    if field.name in ("height", "width", "channels"):
        return pa.types.is_integer(field.type)
    if field.name in ("format", "key"):
        t = field.type.value_type if pa.types.is_dictionary(field.type) else field.type  # as read
        return pa.types.is_string(t) or pa.types.is_large_string(t)
    return False


def _hf_features(schema, path: str) -> dict[str, object]:
    """column -> its `datasets` feature, from the schema's `huggingface` metadata ({} if none)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return {}
    if len(raw) > MAX_METADATA_BYTES:
        raise SourceError(f"{path}: its huggingface metadata is over {MAX_METADATA_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise SourceError(f"{path}: its huggingface metadata is not JSON ({e})") from None
    info = doc.get("info") if isinstance(doc, dict) else None
    features = info.get("features") if isinstance(info, dict) else None
    return features if isinstance(features, dict) else {}


def _is_image(field, spec: object) -> bool:
    """Whether a column holds images: the Image type, or its Arrow form without metadata."""
    import pyarrow as pa

    t = field.type
    shaped = (
        pa.types.is_struct(t)
        and {t.field(i).name for i in range(t.num_fields)} == {"bytes", "path"}
        and _binary(t.field("bytes").type)
    )
    return shaped and (not isinstance(spec, dict) or spec.get("_type") == "Image")


def _binary(t) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):  # as parquet_reader.open_parquet reads bytes
        return _binary(t.value_type)
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _class_names(spec: object, where: str) -> tuple[tuple[str, ...], bool] | None:
    """A ClassLabel's names, and whether the column is a list of them; None for another type."""
    multi = False
    if isinstance(spec, list) and len(spec) == 1:  # datasets' older spelling of a list
        spec, multi = spec[0], True
    if isinstance(spec, dict) and spec.get("_type") in _LISTS:
        spec, multi = spec.get("feature"), True
    if not isinstance(spec, dict) or spec.get("_type") != "ClassLabel":
        return None
    names = spec.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SourceError(f"{where}: a ClassLabel without a list of names; save it with datasets")
    check_class_names(tuple(names), where, "its ClassLabel names")
    return tuple(names), multi


def _scalar_dtype(t) -> str | None:
    """The feature dtype of a scalar Arrow type, "text" for strings; None if not a scalar."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _scalar_dtype(t.value_type)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "int64"
    if pa.types.is_floating(t):
        return "float32"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    return "bytes" if _binary(t) else None


def _list_value(t):
    """The element type of an Arrow list type, else None."""
    import pyarrow as pa

    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return t.value_type
    return None


def _feature(t) -> tuple[Feature | None, bool]:
    """The feature an Arrow type packs as (a scalar, a list of scalars, or a list of k-long
    number lists), and whether the type fixes it (a list of variable-length lists does not)."""
    dtype = _scalar_dtype(t)
    if dtype is not None:
        return (Feature("bytes", text=True) if dtype == "text" else Feature(dtype)), True
    inner = _list_value(t)
    if inner is None:
        return None, True
    dtype = _scalar_dtype(inner)
    if dtype is not None:
        lists = Feature("bytes", (-1,), text=True) if dtype == "text" else Feature(dtype, (-1,))
        return lists, True
    row = _list_value(inner)
    dtype = _scalar_dtype(row) if row is not None else None
    if dtype not in ("int64", "float32"):
        return None, True
    import pyarrow as pa

    if pa.types.is_fixed_size_list(inner) and inner.list_size > 0:
        return Feature(dtype, (-1, inner.list_size)), True
    return Feature(dtype, (-1, 1)), False


def settle(
    features: dict[str, Feature], ragged: frozenset[str], values: dict[str, list]
) -> tuple[dict[str, Feature], frozenset[str]]:
    """Each unsettled grid's row length from its first row holding a row, in these values."""
    if not ragged:
        return features, ragged
    features, left = dict(features), set(ragged)
    for name in ragged:
        first = next((rows[0] for rows in values[name] if rows), None)
        if first:  # an empty row leaves it open: no feature has rows of 0
            features[name] = Feature(features[name].dtype, (-1, len(first)))
            left.discard(name)
    return features, frozenset(left)


class BadValue(Exception):
    """Why one row's value cannot be packed."""


def convert(name: str, feature: Feature, value: object) -> object:
    """One row's value of a column, as Item.fields holds it for the feature."""
    if value is None:
        if feature.is_list:
            return ()
        if feature.dtype == "bytes":
            return "" if feature.text else b""
        raise BadValue(f"no value in column {name!r}")
    if feature.is_list:
        return tuple(_one(name, feature, v) for v in _rows(name, feature, value))
    return _one(name, feature, value)


def _rows(name: str, feature: Feature, value: list) -> list:
    """A list value's elements; a grid's flattened, each row checked for the feature's k."""
    if feature.row is None:
        return value
    flat = []
    for row in value:
        if row is None or len(row) != feature.row:
            got = "null" if row is None else f"{len(row)} values"
            raise BadValue(f"column {name!r} holds a row of {got}, not {feature.row}")
        flat.extend(row)
    return flat


def _one(name: str, feature: Feature, value: object) -> object:
    if value is None:
        raise BadValue(f"column {name!r} holds a list holding null")
    if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        raise BadValue(f"column {name!r} holds a text of {len(value)} characters "
                       f"(over {MAX_TEXT_CHARS})")  # fmt: skip
    if feature.dtype == "int64" and not INT64[0] <= value <= INT64[1]:
        raise BadValue(f"column {name!r} holds {value}, beyond the int64 range")
    if feature.classes is not None and not 0 <= value < len(feature.classes):
        raise BadValue(f"column {name!r} holds {value}, not one of its "
                       f"{len(feature.classes)} classes")  # fmt: skip
    return value


def label_of(value: object, classes: tuple[str, ...], multi: bool) -> int | tuple[int, ...]:
    """A row's `label` as class indices (ClassLabel's -1, "no label", is refused)."""
    if value is None or value == -1:
        raise BadValue("no label")
    feature = Feature("int64", (-1,) if multi else (), classes=classes)
    return convert(LABEL, feature, value)
