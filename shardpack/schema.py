"""The feature schema: each record feature's dtype and shape, and which are class labels.

One schema travels from the source to the Example bytes, the index, TFDS metadata and every
reader. A feature is (dtype, shape): dtype "int64", "float32" or "bytes" (text is bytes holding
UTF-8, marked `text` so readers give `str`); shape () is a scalar, (-1,) a variable-length list,
(-1, k) a variable-length list of k-long rows stored flat (boxes [ymin, xmin, ymax, xmax] are
(-1, 4)). A class-label feature is int64 with `classes`, the names its values index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from operator import itemgetter

DTYPES = ("int64", "float32", "bytes")
# Written by the worker for every record from the image itself; no source may use these names.
BUILTIN_NAMES = ("image", "height", "width", "channels", "format", "key")
LABEL = "label"
# The feature holding a record's instance-id map: one lossless PNG an image (0 background, i
# the i-th object of objects/*), not a PNG per object: one decode gives every object, an
# image of many small objects costs one small file, and it is TFDS's and Cityscapes' form.
MASK = "mask"
# A [-1, 4] float feature under one of these names holds boxes, [ymin, xmin, ymax, xmax]
# normalised as TFDS stores them: declared as TFDS bounding boxes and moved with the pixels.
BOX_NAMES = ("boxes", "bbox", "bboxes", "objects/bbox")
# How far past the image a normalised box may reach (a box partly outside it): a whole image
# on each side. Beyond that, or with a min over its max, the rows are not normalised
# [ymin, xmin, ymax, xmax] (COCO's pixel [x, y, width, height], YOLO rows in pixels, say), and
# moving them as such would store nonsense.
BOX_REACH = (-1.0, 2.0)
# What an int64 feature holds (a value past it is refused where it is read, not left to numpy's
# OverflowError in a worker).
INT64 = (-(2**63), 2**63 - 1)
# The longest row of a (-1, k) feature: boxes are 4, keypoints tens; a row of millions is no
# row (a (-1,) list holds it), and numpy refuses a k near 2**63 with a traceback.
MAX_ROW = 1 << 20
# A version-1 index names each feature's kind alone; these are the dtypes they mean.
V1_DTYPES = {"bytes": "bytes", "int64": "int64", "float": "float32"}
_KINDS = {"int64": int, "float32": float, "bytes": bytes}  # each dtype's decoded values


@dataclass(frozen=True)
class Feature:
    """One feature's type: dtype, shape, whether bytes are text, and class names if a label."""

    dtype: str  # "int64" | "float32" | "bytes"
    shape: tuple[int, ...] = ()  # (), (-1,), (-1, k)
    text: bool = False  # bytes holding UTF-8 text (readers give str)
    classes: tuple[str, ...] | None = None  # set for class-label features

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got: {self.dtype!r}")
        shape = tuple(self.shape)
        object.__setattr__(self, "shape", shape)
        if not (
            shape in ((), (-1,)) or (len(shape) == 2 and shape[0] == -1 and 0 < shape[1] <= MAX_ROW)
        ):
            raise ValueError(
                f"shape must be (), (-1,) or (-1, k) with 0 < k <= {MAX_ROW:,}, got: {shape!r}"
            )
        if self.text and self.dtype != "bytes":
            raise ValueError(f"only a bytes feature can be text, got dtype {self.dtype!r}")
        if self.classes is not None:
            object.__setattr__(self, "classes", tuple(self.classes))
            if self.dtype != "int64" or len(shape) > 1:
                raise ValueError("a class-label feature is an int64 scalar or list")

    @property
    def is_list(self) -> bool:
        """Whether a record holds a variable number of values (shape (-1,) or (-1, k))."""
        return bool(self.shape)

    @property
    def row(self) -> int | None:
        """k of a (-1, k) feature: the length of each row of its flat values; else None."""
        return self.shape[1] if len(self.shape) == 2 else None

    def to_json(self) -> dict[str, object]:
        """The feature as index.json writes it: dtype, shape, and text/classes when set."""
        doc: dict[str, object] = {"dtype": self.dtype, "shape": list(self.shape)}
        if self.text:
            doc["text"] = True
        if self.classes is not None:
            doc["classes"] = list(self.classes)
        return doc

    @classmethod
    def from_json(cls, doc: object) -> Feature:
        """The inverse of to_json. Raises ValueError (with what is wrong) on anything else."""
        if not isinstance(doc, dict) or set(doc) - {"dtype", "shape", "text", "classes"}:
            raise ValueError(f"a feature is {{dtype, shape[, text][, classes]}}, got {doc!r}")
        shape = doc.get("shape", [])
        if not isinstance(shape, list) or not all(
            type(d) is int
            for d in shape  # no bools, no floats
        ):
            raise ValueError(f"shape must be a list of integers, got {shape!r}")
        text = doc.get("text", False)
        classes = doc.get("classes")
        if not isinstance(text, bool):
            raise ValueError(f"text must be true or false, got {text!r}")
        if classes is not None and not (
            isinstance(classes, list) and all(isinstance(c, str) for c in classes)
        ):
            raise ValueError("classes must be a list of strings")
        return cls(
            doc.get("dtype"),  # type: ignore[arg-type]  # checked by __post_init__
            tuple(shape),
            text,
            None if classes is None else tuple(classes),
        )


BUILTINS: dict[str, Feature] = {
    "image": Feature("bytes"),
    "height": Feature("int64"),
    "width": Feature("int64"),
    "channels": Feature("int64"),
    "format": Feature("bytes", text=True),
    "key": Feature("bytes", text=True),
}


@dataclass(frozen=True)
class Schema(Mapping[str, Feature]):
    """Ordered name -> Feature: the built-ins, then `label` (if labelled), then the extras."""

    features: tuple[tuple[str, Feature], ...]

    def __post_init__(self) -> None:
        names = [name for name, _ in self.features]
        if len(set(names)) != len(names):
            raise ValueError(f"feature names repeat: {names!r}")
        object.__setattr__(self, "_by_name", dict(self.features))
        # What each record is checked against and decoded by, gathered once: readers ask it
        # of every record (benchmarks/torch_read.py).
        checks = tuple((name, _KINDS[f.dtype], not f.is_list,
                        None if f.classes is None else len(f.classes))
                       for name, f in self.features)  # fmt: skip
        object.__setattr__(self, "_checks", checks)
        object.__setattr__(self, "decoders", {name: _decoder(f) for name, f in self.features})

    def __getitem__(self, name: str) -> Feature:
        return self._by_name[name]  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self.features)

    def __len__(self) -> int:
        return len(self.features)

    def fits(self, example: dict[str, list]) -> bool:
        """Whether a decoded Example holds exactly this schema's features, each as check_values
        asks: record_fault's quick yes, a few lookups a feature; it says why when not."""
        if len(example) != len(self._checks):  # type: ignore[attr-defined]
            return False
        for name, kind, scalar, classes in self._checks:  # type: ignore[attr-defined]
            values = example.get(name)
            if values is None:
                return False
            if scalar:  # most features: one value
                if len(values) != 1 or type(values[0]) is not kind:
                    return False
                if classes is not None and not 0 <= values[0] < classes:
                    return False
            elif check_values(name, self[name], values) is not None:
                return False
        return True

    @classmethod
    def build(
        cls,
        classes: tuple[str, ...] | None = None,
        extra: Mapping[str, Feature] | None = None,
        multi_label: bool = False,
    ) -> Schema:
        """The whole schema: built-ins, `label` over `classes` (None: unlabeled; a list of
        classes per record with multi_label), then the extras.

        Raises:
            ValueError: an extra feature uses a built-in name (or `label` twice).
        """
        extra = dict(extra or {})
        for name in extra:
            if name in BUILTINS or (name == LABEL and classes is not None):
                raise ValueError(f"feature name {name!r} is taken by a built-in feature")
        features = list(BUILTINS.items())
        if classes is not None:
            shape = (-1,) if multi_label else ()
            features.append((LABEL, Feature("int64", shape, classes=tuple(classes))))
        features.extend(extra.items())
        return cls(tuple(features))

    @property
    def classes(self) -> tuple[str, ...]:
        """The `label` feature's class names; () for an unlabeled dataset."""
        label = self.get(LABEL)
        return () if label is None or label.classes is None else label.classes

    @property
    def extras(self) -> dict[str, Feature]:
        """The features a source adds beyond the built-ins, in order (`label` included)."""
        return {name: f for name, f in self.features if name not in BUILTINS}

    @property
    def class_features(self) -> dict[str, Feature]:
        """The class-label features (label, coarse_label, ...), in order."""
        return {name: f for name, f in self.features if f.classes is not None}

    def to_json(self) -> dict[str, dict[str, object]]:
        """The schema as index.json's `features` (version 2) writes it, in order."""
        return {name: feature.to_json() for name, feature in self.features}

    @classmethod
    def from_json(cls, doc: object) -> Schema:
        """The inverse of to_json. Raises ValueError (naming the feature) on anything else."""
        if not isinstance(doc, dict):
            raise ValueError("'features' must be an object of name -> {dtype, shape}")
        features = []
        for name, value in doc.items():
            try:
                features.append((name, Feature.from_json(value)))
            except ValueError as e:
                raise ValueError(f"feature {name!r}: {e}") from None
        for name, feature in BUILTINS.items():
            if dict(features).get(name) != feature:
                raise ValueError(f"built-in feature {name!r} is missing or has another type")
        return cls(tuple(features))

    @classmethod
    def from_v1(
        cls, features: Mapping[str, str], classes: list[str], coarse: list[str] | None
    ) -> Schema:
        """The schema a version-1 index implies: scalar features, label and coarse_label."""
        extra = {
            name: Feature(
                V1_DTYPES[dtype],
                classes=tuple(coarse) if name == "coarse_label" and coarse else None,
            )
            for name, dtype in features.items()
            if name not in BUILTINS and name != LABEL
        }
        return cls.build(tuple(classes), extra)


def example_value(feature: Feature, value: object) -> object:
    """`value` as encode_example takes it for `feature`: text as UTF-8 bytes, scalars as int or
    float, lists as one flat numpy array of the feature's dtype (so an empty list keeps its kind).
    """
    if feature.dtype == "bytes":
        values = value if feature.is_list else (value,)
        encoded = [
            v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v for v in values
        ]
        return encoded if feature.is_list else encoded[0]
    if not feature.is_list:
        return int(value) if feature.dtype == "int64" else float(value)  # type: ignore[arg-type]
    import numpy as np  # here, not at the top: `import shardpack` stays light

    return np.asarray(value, dtype=feature.dtype).reshape(-1)


def check_values(name: str, feature: Feature, values: list) -> str | None:
    """What is wrong with one record's decoded `values` for `feature`, or None if they fit."""
    kind = _KINDS[feature.dtype]
    if not all(type(v) is kind for v in values):
        return f"feature {name!r} is not {feature.dtype}"
    if not feature.is_list and len(values) != 1:
        return f"feature {name!r} holds {len(values)} values, not one"
    if feature.row is not None and len(values) % feature.row:
        return f"feature {name!r} holds {len(values)} values, not rows of {feature.row}"
    if feature.classes is not None:
        for v in values:
            if not 0 <= v < len(feature.classes):
                return f"{name} {v} outside the {len(feature.classes)} classes"
    return None


def _first_text(values: list[bytes]) -> str:
    return values[0].decode("utf-8", "surrogateescape")


def _decoder(feature: Feature) -> Callable[[list], object]:
    """decode_value for one feature, as one call: a scalar's first value taken in C."""
    if feature.is_list:
        return partial(decode_value, feature)
    return _first_text if feature.text else itemgetter(0)


def decode_value(feature: Feature, values: list) -> object:
    """One record's decoded Example `values` as readers give them: a scalar as int, float or
    str/bytes; a list as a numpy array of the declared dtype and shape ((n,) or (n, k)), or a
    list of str/bytes. The inverse of example_value."""
    if feature.dtype == "bytes":
        if feature.text:
            values = [v.decode("utf-8", "surrogateescape") for v in values]
        return values if feature.is_list else values[0]
    if not feature.is_list:
        return values[0]
    import numpy as np

    return np.asarray(values, feature.dtype).reshape(-1, *feature.shape[1:])


def is_mask(name: str, feature: Feature) -> bool:
    """Whether a feature is an instance-id map: one bytes value (a PNG) named ...MASK; a text
    one (a manifest's column of mask file paths) is not."""
    return (name.rpartition("/")[2] == MASK and feature.dtype == "bytes" and not feature.text
            and not feature.is_list)  # fmt: skip
