"""OUT/croissant.json: the pack described in Croissant 1.0 (JSON-LD, mlcommons.org/croissant),
written from the index document beside the Hub card.

Every pack gets the dataset's name, the card's summary as its description (no license: pack
takes none to give; one the user added, like any top-level key pack does not write, is kept
when a run rewrites the file), and in `distribution` each shard as a FileObject with its
sha256, size and encodingFormat; each class-label feature's names are a RecordSet of their own
(`classes-{feature}`: index, name) with the names inline. Where the container is tabular
(Parquet, which mlcroissant reads), each split is also a FileSet of its shards and a RecordSet
whose fields extract every feature: the image (ImageObject, the `bytes` of its struct), an
instance mask (ImageObject: a PNG), a single class label (Integer, referencing its classes),
text, numbers, lists (`repeated`); boxes, keypoints and instance masks say in their
description what their values are. TFRecord, ArrayRecord and tar samples are no format a
Croissant reader extracts fields from, so theirs describe the files and the classes only
(docs/know-your-data.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from urllib.parse import quote

from shardpack.containers import Container
from shardpack.errors import OutputError
from shardpack.hffeatures import IMAGE
from shardpack.index import MAX_INDEX_BYTES, Index, ShardInfo, past_bounds
from shardpack.layout import CROISSANT_NAME
from shardpack.packing.boxes import index_geometry
from shardpack.packing.hubcard import data_files, summary
from shardpack.schema import Feature, Schema
from shardpack.storage import Storage

# Croissant 1.0's @context, as its spec and mlcroissant write it.
CONTEXT = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
CONFORMS_TO = "http://mlcommons.org/croissant/1.0"
# The top-level keys pack writes; any other in OUT's croissant.json is the user's, kept.
_OURS = ("@context", "@type", "conformsTo", "name", "description", "distribution", "recordSet")
_DATA_TYPES = {"int64": "sc:Integer", "float32": "sc:Float", "bytes": "sc:Text"}
# What a feature that moves with the pixels holds (boxes.geometry's kinds), as its field's
# description. Not Croissant's cr:BoundingBox: mlcroissant parses a field of that type as one
# box, and refuses a record's list of them.
_GEOMETRY = {
    "boxes": "a box per object: [ymin, xmin, ymax, xmax], normalised by the image's height "
    "and width",
    "keypoints": "keypoints per object: (x, y, visibility) triples, x and y normalised by the "
    "image's width and height; (0, 0, 0) where not labelled",
    "mask": "a PNG of instance ids: 0 the background, i the i-th object of the record",
}


def users_keys(out: Storage) -> dict:
    """The top-level keys of OUT's croissant.json that pack does not write: what the user added
    before publishing (a license, citeAs, a version...), for the rewrite to keep. Nothing where
    there is no file; no link followed, a bounded read.

    Raises:
        OutputError: the file cannot be read, is larger than an index may be, or is no JSON
            object: what it holds would be lost.
    """
    path = out.path(CROISSANT_NAME)
    try:
        with out.open(CROISSANT_NAME) as blob:
            text = blob.pread(blob.size, 0) if blob.size <= MAX_INDEX_BYTES else b""
        # bounded as an index is: a planted file of 90 MB of [] was 2.9 GB and 2 minutes parsed
        past = past_bounds(text)
        doc = json.loads(text) if text and past is None else None
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise OutputError(f"{path}: cannot be read ({e.strerror or e}); move it out of OUT, "
                          "then run again") from None  # fmt: skip
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        held = "" if past is None else f" (it holds {past})"
        raise OutputError(f"{path}: is no JSON object of at most {MAX_INDEX_BYTES:,} bytes "
                          f"whose keys shardpack would keep{held}; fix it, or move it out of "
                          "OUT, then run again")  # fmt: skip
    return {k: v for k, v in doc.items() if k not in _OURS}


def croissant(index: Index, kept: dict | None = None, present: Collection[str] = ()) -> bytes:
    """croissant.json of an index, with the user's own top-level keys `kept` (users_keys) and
    the names of OUT's files `present` (hubcard.data_files)."""
    schema, container = index.schema, index.container
    moved = index_geometry(index)
    distribution: list[dict] = []
    record_sets: list[dict] = []
    for split, entry in index.splits.items():
        distribution += [_file_object(shard, container) for shard in entry.shards]
        if container.tabular:
            files = f"files-{split}"  # no split name holds '-': never another's @id
            distribution.append({
                "@type": "cr:FileSet", "@id": files, "name": files,
                "encodingFormat": container.media_type,
                "includes": data_files(entry.shards, present),
            })  # fmt: skip
            record_sets.append(_split_records(split, files, schema, moved))
    record_sets += [_classes(name, feature) for name, feature in schema.class_features.items()]
    doc = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": index.name,
        "description": summary(index),
    }
    doc |= {"distribution": distribution, "recordSet": record_sets}
    doc |= kept or {}
    return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8", "backslashreplace")


def _file_object(shard: ShardInfo, container: Container) -> dict:
    return {
        "@type": "cr:FileObject",
        "@id": shard.file,
        "name": shard.file,
        "contentUrl": shard.file,  # relative to croissant.json: OUT travels whole
        "contentSize": f"{shard.num_bytes} B",
        "encodingFormat": container.media_type,
        "sha256": shard.sha256,
    }


def _split_records(split: str, files: str, schema: Schema, moved: dict[str, str]) -> dict:
    """A split's RecordSet: a field per feature, extracted from its FileSet's columns; boxes,
    keypoints and masks (`moved`: boxes.geometry's) described as what they hold."""
    fields = []
    for name, feature in schema.items():
        field: dict = {
            "@type": "cr:Field",
            "@id": f"{split}/{_id(name)}",
            "name": name,
            "dataType": _data_type(name, feature, moved),
            "source": {"fileSet": {"@id": files}, "extract": {"column": name}},
        }
        if name == IMAGE:  # the {bytes, path} struct of `datasets`' Image()
            field["source"]["transform"] = {"jsonPath": "bytes"}
        if feature.is_list:
            field["repeated"] = True
        if name in moved:
            field["description"] = _GEOMETRY[moved[name]]
        if feature.classes is not None:
            field["description"] = f"class indices into the RecordSet classes-{name}"
            if not feature.is_list:  # mlcroissant joins a single value, not a list
                field["references"] = {"field": {"@id": f"classes-{_id(name)}/index"}}
        fields.append(field)
    return {"@type": "cr:RecordSet", "@id": split, "name": split,
            "key": {"@id": f"{split}/key"}, "field": fields}  # fmt: skip


def _data_type(name: str, feature: Feature, moved: dict[str, str]) -> str:
    """A field's dataType: an ImageObject for the image and a mask (a PNG, which mlcroissant
    opens as a PIL image), else its values' type."""
    if name == IMAGE or moved.get(name) == "mask":
        return "sc:ImageObject"
    return _DATA_TYPES[feature.dtype]


def _id(name: str) -> str:
    """A feature's name as a piece of an @id: whitespace (which mlcroissant refuses in an @id)
    and '%' percent-encoded, so that two names never meet in one @id."""
    return re.sub(r"[%\s]", lambda m: quote(m.group()), name)


def _classes(name: str, feature: Feature) -> dict:
    """A class-label feature's names, inline: (index, name) records."""
    ids = f"classes-{_id(name)}"
    return {
        "@type": "cr:RecordSet",
        "@id": ids,
        "name": ids,
        "description": f"The classes of {name}: a record's {name} is an index here.",
        "dataType": "sc:Enumeration",
        "key": {"@id": f"{ids}/index"},
        "field": [
            {"@type": "cr:Field", "@id": f"{ids}/index", "name": "index", "dataType": "sc:Integer"},
            {"@type": "cr:Field", "@id": f"{ids}/name", "name": "name", "dataType": "sc:Text"},
        ],
        "data": [{f"{ids}/index": i, f"{ids}/name": c} for i, c in enumerate(feature.classes)],
    }
