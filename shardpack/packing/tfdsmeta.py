"""TensorFlow Datasets metadata beside the shards, so `tfds.builder_from_directory(OUT)` loads them.

Written from the index alone, without TFDS: dataset_info.json, features.json (every feature
of the schema: ClassLabel, Text, BBox, Tensor, and Sequence of them for lists; a group of
per-object lists holding boxes, `objects/bbox` and `objects/label`, as TFDS's COCO and VOC
declare it: `objects`, a Sequence of a dict of BBoxFeature, ClassLabel, ...) and one
`<feature>.labels.txt` per class feature. Image encodings TFDS can decode (jpeg, png, and `keep`)
become an `Image` feature; `raw` and `webp` records are declared as plain string tensors
(with `height`, `width`, `channels` for raw), which the caller decodes.
"""

from __future__ import annotations

import re

from shardpack.index import Index, SplitInfo
from shardpack.schema import BOX_NAMES, Feature, Schema
from shardpack.storage import Storage
from shardpack.storage.atomic import json_bytes

TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
# The split names TFDS parses (tensorflow_datasets/core/splits.py, _SUB_SPEC_RE): no '.', which
# a split name may hold as datasets reads them. One listed refuses every split of the dataset.
_TFDS_SPLIT = re.compile(r"[\w-]+", re.ASCII)
_CLASS = "tensorflow_datasets.core.features"


def is_box(name: str, feature: Feature) -> bool:
    """Whether a feature holds boxes: [-1, 4] float32, named as TFDS names them."""
    return name in BOX_NAMES and feature.dtype == "float32" and feature.row == 4


_TF_DTYPES = {"int64": "int64", "float32": "float32", "bytes": "string"}


def _tensor(dtype: str, shape: tuple[int, ...] = ()) -> dict:
    dims = {"dimensions": [str(d) for d in shape]} if shape else {}
    return {
        "pythonClassName": f"{_CLASS}.tensor_feature.Tensor",
        "tensor": {"shape": dims, "dtype": _TF_DTYPES[dtype], "encoding": "none"},
    }


def _sequence(feature: dict) -> dict:
    return {
        "pythonClassName": f"{_CLASS}.sequence_feature.Sequence",
        "sequence": {"feature": feature, "length": "-1"},
    }


def _declared(name: str, feature: Feature) -> dict:
    """The TFDS feature for one schema feature: ClassLabel, Text, BBox or a plain Tensor, in a
    Sequence for a list."""
    one = _one(name, feature)
    if one is None:
        return _tensor(feature.dtype, feature.shape)
    return _sequence(one) if feature.is_list else one


def _one(name: str, feature: Feature) -> dict | None:
    """The TFDS feature of one value of a schema feature: ClassLabel, Text or BBox; None for a
    plain Tensor."""
    if feature.classes is not None:
        one = {
            "pythonClassName": f"{_CLASS}.class_label_feature.ClassLabel",
            "classLabel": {"numClasses": str(len(feature.classes))},
        }
    elif feature.text:
        one = {"pythonClassName": f"{_CLASS}.text_feature.Text", "text": {}}
    elif is_box(name, feature):
        one = {
            "pythonClassName": f"{_CLASS}.bounding_boxes.BBoxFeature",
            "boundingBox": {
                "shape": {"dimensions": ["4"]},
                "dtype": "float32",
                "bboxFormat": "REL_YXYX",
            },
        }
    else:
        return None
    return one


def object_groups(schema: Schema) -> dict[str, tuple[str, ...]]:
    """The groups declared as one Sequence of a dict, as TFDS declares COCO's and VOC's
    `objects`: group -> its list features (`objects/bbox`, `objects/label`, ...: one row per
    object, which a drop keeps in step, packing/boxes.py), for each group holding boxes whose
    name no feature takes. A scalar of the group (one instance-id map an image,
    `objects/mask`) stays a feature of its own beside it, which TFDS reads as such."""
    groups: dict[str, list[str]] = {}
    for name, feature in schema.extras.items():
        group, _, rest = name.partition("/")
        if rest and "/" not in rest and feature.is_list:
            groups.setdefault(group, []).append(name)
    return {
        group: tuple(names)
        for group, names in groups.items()
        if group not in schema and any(is_box(n, schema[n]) for n in names)
    }


def _group(names: tuple[str, ...], schema: Schema) -> dict:
    """A group's Sequence of a dict: each feature's one value (a row of a (-1, k) list)."""
    inner = {}
    for name in names:
        feature = schema[name]
        one = _one(name, feature)
        inner[name.partition("/")[2]] = one or _tensor(feature.dtype, feature.shape[1:])
    return _sequence({
        "pythonClassName": f"{_CLASS}.features_dict.FeaturesDict",
        "featuresDict": {"features": inner},
    })  # fmt: skip


def _features(index: Index) -> dict:
    schema = index.schema
    groups = object_groups(schema)
    grouped = {name for names in groups.values() for name in names}
    features = {n: _declared(n, f) for n, f in schema.extras.items() if n not in grouped}
    features.update({group: _group(names, schema) for group, names in groups.items()})
    if index.encoding in ("raw", "webp"):
        features["image"] = _tensor("bytes")
        if index.encoding == "raw":
            features.update({k: _tensor("int64") for k in ("height", "width", "channels")})
    else:
        size = index.image_size or (-1, -1)  # one size for all: TFDS batches them as is
        features["image"] = {
            "pythonClassName": f"{_CLASS}.image_feature.Image",
            "image": {"shape": {"dimensions": [*map(str, size), "3"]}, "dtype": "uint8"},
        }
    return {
        "pythonClassName": f"{_CLASS}.features_dict.FeaturesDict",
        "featuresDict": {"features": features},
    }


def _template(split: SplitInfo) -> str:
    """TFDS's template of a split's shard names: with the count in them, which a grown split
    keeps at the one it was first packed with (packing/grow.py) as fixed text."""
    count = split.names_count
    if count == len(split.shards):
        return TEMPLATE
    return TEMPLATE.replace("{SHARD_X_OF_Y}", f"{{SHARD_INDEX}}-of-{count:05d}")


def tfds_names(split: str) -> bool:
    """Whether TFDS can name this split (`as_dataset(split=...)`)."""
    return _TFDS_SPLIT.fullmatch(split) is not None


def write_tfds_metadata(out: Storage, index: Index, file_format: str) -> list[str]:
    """Write the TFDS metadata files for a finished index (tfds_metadata); return their names."""
    files = tfds_metadata(index, file_format)
    for name, data in files.items():
        out.put(name, data)
    return list(files)


def tfds_metadata(index: Index, file_format: str) -> dict[str, bytes]:
    """The TFDS metadata files of a finished index, by name.

    `file_format` is TFDS's name for the shards' format (the container's tfds_file_format)."""
    splits = [
        {
            "name": name,
            "numBytes": str(sum(s.num_bytes for s in split.shards)),
            "shardLengths": [str(s.num_records) for s in split.shards],
            "filepathTemplate": _template(split),
        }
        for name, split in index.splits.items()
        # TFDS refuses every split with one holding no data in it, or named as it cannot parse
        if split.num_records and tfds_names(name)
    ]
    info = {
        "name": index.name,
        "description": f"Packed by shardpack from a {index.source} source.",
        "fileFormat": file_format,
        "version": "1.0.0",
        "splits": splits,
    }
    files = {"dataset_info.json": json_bytes(info), "features.json": json_bytes(_features(index))}
    for feature, declared in index.schema.class_features.items():
        text = "".join(f"{name}\n" for name in declared.classes or ())
        # named as TFDS names it; the names as on disk
        files[f"{feature.replace('/', '-')}.labels.txt"] = text.encode("utf-8", "surrogateescape")
    return files
