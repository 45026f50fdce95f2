"""The schema as Hugging Face `datasets` features, in the two forms the Hub reads: the dict of
`datasets.Features.to_dict()` (what a Parquet file's `huggingface` metadata holds) and the
dataset card's `dataset_info.features` list. One mapping, so that a card and the files it
describes never disagree.

`image` is Image(); a feature with classes is ClassLabel(names); text is Value("string"), other
bytes Value("binary"), numbers Value("int64" | "float32"); a (-1,) feature is a Sequence of
those, a (-1, k) feature a Sequence of Sequences of length k. Sequence is the spelling every
`datasets` release reads (4.0 and later read it as List).
"""

from __future__ import annotations

from shardpack.schema import Feature, Schema

IMAGE = "image"


def hf_feature(name: str, feature: Feature) -> dict:
    """One feature as `datasets.Features.to_dict()` writes it."""
    if name == IMAGE:
        return {"_type": "Image"}
    if feature.classes is not None:
        value: dict = {"names": list(feature.classes), "_type": "ClassLabel"}
    elif feature.dtype == "bytes":
        value = {"dtype": "string" if feature.text else "binary", "_type": "Value"}
    else:
        value = {"dtype": feature.dtype, "_type": "Value"}
    if feature.row is not None:
        value = {"feature": value, "length": feature.row, "_type": "Sequence"}
    return {"feature": value, "_type": "Sequence"} if feature.is_list else value


def hf_features(schema: Schema) -> dict[str, dict]:
    """The whole schema as `datasets.Features.to_dict()` writes it, in order."""
    return {name: hf_feature(name, feature) for name, feature in schema.items()}


def card_form(hf: dict) -> dict:
    """A feature of hf_feature's as a dataset card lists it (beside its `name`): {"dtype": ...}
    or {"sequence": ..., "length": k}, as `datasets.Features._to_yaml_list` writes them."""
    kind = hf["_type"]
    if kind == "Sequence":
        inner = card_form(hf["feature"])
        form = {"sequence": inner.get("dtype", inner)}
        if "length" in hf:
            form["length"] = hf["length"]
        return form
    if kind == "Image":
        return {"dtype": "image"}
    if kind == "ClassLabel":
        return {"dtype": {"class_label": {"names": dict(enumerate(hf["names"]))}}}
    return {"dtype": hf["dtype"]}
