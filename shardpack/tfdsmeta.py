"""TensorFlow Datasets metadata beside the shards, so `tfds.builder_from_directory(OUT)` loads them.

Written from the index alone, without TFDS: dataset_info.json, features.json and one
`<feature>.labels.txt` per class feature. Image encodings TFDS can decode (jpeg, png, and `keep`)
become an `Image` feature; `raw` and `webp` records are declared as plain string tensors
(with `height`, `width`, `channels` for raw), which the caller decodes.
"""

from __future__ import annotations

import os

from shardpack.atomic import write_atomic, write_json_atomic

TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_CLASS = "tensorflow_datasets.core.features"


def _tensor(dtype: str) -> dict:
    return {
        "pythonClassName": f"{_CLASS}.tensor_feature.Tensor",
        "tensor": {"shape": {}, "dtype": dtype, "encoding": "none"},
    }


def _class_label(count: int) -> dict:
    return {
        "pythonClassName": f"{_CLASS}.class_label_feature.ClassLabel",
        "classLabel": {"numClasses": str(count)},
    }


def _features(index: dict) -> dict:
    features: dict[str, dict] = {"label": _class_label(len(index["classes"]))}
    if "coarse_classes" in index:
        features["coarse_label"] = _class_label(len(index["coarse_classes"]))
    if index["encoding"] in ("raw", "webp"):
        features["image"] = _tensor("string")
        if index["encoding"] == "raw":
            features.update({k: _tensor("int64") for k in ("height", "width", "channels")})
    else:
        features["image"] = {
            "pythonClassName": f"{_CLASS}.image_feature.Image",
            "image": {"shape": {"dimensions": ["-1", "-1", "3"]}, "dtype": "uint8"},
        }
    return {
        "pythonClassName": f"{_CLASS}.features_dict.FeaturesDict",
        "featuresDict": {"features": features},
    }


def write_tfds_metadata(out: str, index: dict) -> list[str]:
    """Write the TFDS metadata files for a finished index document; return their names."""
    splits = [
        {
            "name": name,
            "numBytes": str(sum(s["num_bytes"] for s in split["shards"])),
            "shardLengths": [str(s["num_records"]) for s in split["shards"]],
            "filepathTemplate": TEMPLATE,
        }
        for name, split in index["splits"].items()
    ]
    info = {
        "name": index["name"],
        "description": f"Packed by shardpack from a {index['source']} source.",
        "fileFormat": "tfrecord",
        "version": "1.0.0",
        "splits": splits,
    }
    write_json_atomic(os.path.join(out, "dataset_info.json"), info)
    write_json_atomic(os.path.join(out, "features.json"), _features(index))
    labels = {"label": index["classes"], "coarse_label": index.get("coarse_classes")}
    written = ["dataset_info.json", "features.json"]
    for feature, names in labels.items():
        if names is None:
            continue
        path = os.path.join(out, f"{feature}.labels.txt")
        text = "".join(f"{name}\n" for name in names)
        write_atomic(path, text.encode("utf-8", "surrogateescape"))  # names as they are on disk
        written.append(os.path.basename(path))
    return written
