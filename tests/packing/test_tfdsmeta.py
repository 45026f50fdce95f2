"""TFDS metadata: a pack's per-object features are declared as TFDS declares COCO's and VOC's
(`objects`, a Sequence of a dict of BBoxFeature, ClassLabel, ...), and tensorflow-datasets itself
reads them back as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.packing.tfdsmeta import object_groups
from shardpack.schema import Feature, Schema
from tests import helpers

# A TFDS dataset with COCO's `objects` (an image without objects among them), prepared by TFDS
# itself in argv[1]; the shardpack pack of it is read back in argv[2] (a second run).
BUILD = r"""
import sys, numpy as np, tensorflow_datasets as tfds

class Boxes(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3)),
            "objects": tfds.features.Sequence({
                "bbox": tfds.features.BBoxFeature(),
                "label": tfds.features.ClassLabel(names=["cat", "dog", "eel"]),
                "is_crowd": np.int64,
            }),
        }))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(3):
            yield i, {"image": np.full((8, 6 + i, 3), 40 * i, np.uint8), "objects": {
                "bbox": [tfds.features.BBox(0.1 * j, 0.2, 0.5, 0.25 * (j + 1)) for j in range(i)],
                "label": [(i + j) % 3 for j in range(i)], "is_crowd": [j % 2 for j in range(i)]}}

Boxes(data_dir=sys.argv[1]).download_and_prepare()
print("[]")
"""

READ = r"""
import json, sys, tensorflow_datasets as tfds
builder = tfds.builder_from_directory(sys.argv[1])
objects = builder.info.features["objects"]
read = {"types": {k: type(v).__name__ for k, v in objects.feature.items()},
        "names": objects["label"].names, "records": []}
for ex in tfds.as_numpy(builder.as_dataset(split="train", shuffle_files=False)):
    o = ex["objects"]
    read["records"].append({"width": int(ex["image"].shape[1]),
                            "bbox": o["bbox"].astype(float).round(5).tolist(),
                            "label": o["label"].tolist(), "is_crowd": o["is_crowd"].tolist(),
                            "mask": len(ex.get("objects/mask", b""))})
print(json.dumps(read))
"""


def test_objects_are_one_sequence_of_a_dict_of_their_lists():
    box, label = Feature("float32", (-1, 4)), Feature("int64", (-1,), classes=("a",))
    schema = Schema.build(None, {"objects/bbox": box, "objects/label": label,
                                 "objects/mask": Feature("bytes"), "other/tags": label,
                                 "deep/er/bbox": box})  # fmt: skip
    # the mask, one an image, stays beside the group; a group without boxes stays flat
    assert object_groups(schema) == {"objects": ("objects/bbox", "objects/label")}


@pytest.mark.heavy
@pytest.mark.long  # TFDS building a dataset: the next test reads our objects group, at less cost
def test_tfds_reads_objects_as_bbox_features_and_class_names(tmp_path: Path):
    helpers.needs("tensorflow_datasets", "tensorflow")
    helpers.run_json(BUILD, str(tmp_path / "tfds"))
    out = tmp_path / "out"
    pack(tmp_path / "tfds" / "boxes" / "1.0.0", out, PackOptions(workers=1, shuffle=False))
    features = json.loads((out / "features.json").read_text())["featuresDict"]["features"]
    assert "objects/bbox" not in features  # one `objects` group, as TFDS's COCO declares it
    read = helpers.run_json(READ, str(out))
    assert read["types"] == {"bbox": "BBoxFeature", "label": "ClassLabel", "is_crowd": "Tensor"}
    assert read["names"] == ["cat", "dog", "eel"]
    records = sorted(read["records"], key=lambda r: r["width"])
    assert [r["label"] for r in records] == [[], [1], [2, 0]]  # the image without objects kept
    assert [r["is_crowd"] for r in records] == [[], [0], [0, 1]]
    assert records[2]["bbox"] == [[0.0, 0.2, 0.5, 0.25], [0.1, 0.2, 0.5, 0.5]]


@pytest.mark.heavy
def test_an_instance_mask_of_the_group_stays_beside_its_objects(tmp_path: Path):
    """One instance-id map an image, `objects/mask`: TFDS reads it beside the `objects` dict."""
    helpers.needs("tensorflow_datasets", "tensorflow")
    src = helpers.write_objects_parquet(tmp_path / "o.parquet", helpers.OBJECT_ROWS,
                                        helpers.OBJECT_CLASSES, mask="objects/mask")  # fmt: skip
    pack(src, tmp_path / "out", PackOptions(workers=1, shuffle=False))
    read = helpers.run_json(READ, str(tmp_path / "out"))
    assert read["types"] == {"bbox": "BBoxFeature", "label": "ClassLabel", "is_crowd": "Tensor"}
    assert read["names"] == helpers.OBJECT_CLASSES
    assert [r["label"] for r in read["records"]] == [r["labels"] for r in helpers.OBJECT_ROWS]
    assert [r["mask"] for r in read["records"]] == [len(r.get("mask", b""))
                                                   for r in helpers.OBJECT_ROWS]  # fmt: skip
