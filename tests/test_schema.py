"""The feature schema: Feature validation, Schema order and built-ins, and its JSON form."""

import json

import pytest

from shardpack.schema import BUILTIN_NAMES, Feature, Schema


def test_feature_types_are_checked():
    assert Feature("float32", (-1, 4)).row == 4
    assert Feature("int64", (-1,)).is_list and not Feature("int64").is_list
    for bad in (
        lambda: Feature("float64"),
        lambda: Feature("int64", (3,)),
        lambda: Feature("int64", (-1, 0)),
        lambda: Feature("int64", text=True),
        lambda: Feature("bytes", classes=("a",)),
    ):
        with pytest.raises(ValueError):
            bad()


def test_schema_orders_builtins_label_then_extras_and_round_trips_json():
    schema = Schema.build(
        ("cat", "dog"),
        {
            "boxes": Feature("float32", (-1, 4)),
            "caption": Feature("bytes", text=True),
            "coarse_label": Feature("int64", classes=("animal",)),
        },
    )
    assert list(schema) == [*BUILTIN_NAMES, "label", "boxes", "caption", "coarse_label"]
    assert schema.classes == ("cat", "dog")
    assert list(schema.class_features) == ["label", "coarse_label"]
    doc = json.loads(json.dumps(schema.to_json()))
    assert doc["boxes"] == {"dtype": "float32", "shape": [-1, 4]}
    assert doc["label"] == {"dtype": "int64", "shape": [], "classes": ["cat", "dog"]}
    assert Schema.from_json(doc) == schema


def test_unlabeled_schema_has_no_label():
    schema = Schema.build(None)
    assert "label" not in schema and schema.classes == ()


@pytest.mark.parametrize("name", [*BUILTIN_NAMES, "label"])
def test_extra_feature_may_not_take_a_builtin_name(name):
    with pytest.raises(ValueError, match=name):
        Schema.build(("a",), {name: Feature("int64")})


def test_from_json_refuses_malformed_features():
    good = Schema.build(("a",)).to_json()
    for bad in (
        {**good, "x": {"dtype": "int64", "shape": [True]}},
        {**good, "x": {"dtype": "str"}},
        {**good, "x": {"dtype": "int64", "extra": 1}},
        {k: v for k, v in good.items() if k != "image"},
    ):
        with pytest.raises(ValueError):
            Schema.from_json(bad)


def test_version_1_features_become_a_schema():
    v1 = {
        "image": "bytes",
        "label": "int64",
        "height": "int64",
        "width": "int64",
        "channels": "int64",
        "format": "bytes",
        "key": "bytes",
        "coarse_label": "int64",
    }
    schema = Schema.from_v1(v1, ["apple"], ["fruit"])
    assert schema["coarse_label"] == Feature("int64", classes=("fruit",))
    assert schema.classes == ("apple",)


def test_fits_says_yes_only_where_check_values_finds_nothing():
    """fits is record_fault's quick yes: wrong on any record, a fault would pass unnamed."""
    from shardpack.index import record_fault
    from shardpack.read.stream import to_python

    schema = Schema.build(("a", "b"), {"boxes": Feature("float32", (-1, 4)),
                                       "tags": Feature("int64", (-1,), classes=("x", "y")),
                                       "note": Feature("bytes", text=True)})  # fmt: skip
    good = {"image": [b"\xff\xd8"], "height": [2], "width": [3], "channels": [3],
            "format": [b"jpeg"], "key": [b"k"], "label": [1], "boxes": [0.0, 0.1, 0.5, 0.5],
            "tags": [0, 1], "note": [b"\xc3\xa9"]}  # fmt: skip
    bent = [good, {**good, "boxes": []}, {**good, "tags": []},
            {k: v for k, v in good.items() if k != "width"}, {**good, "more": [1]},
            {**good, "width": [1.5]}, {**good, "height": [1, 2]}, {**good, "height": []},
            {**good, "label": [2]}, {**good, "label": [-1]}, {**good, "label": [True]},
            {**good, "format": [b"tiff"]}, {**good, "key": [3]}, {**good, "boxes": [0.0] * 3},
            {**good, "boxes": [0, 0, 1, 1]}, {**good, "tags": [2]}, {**good, "tags": [0, 1.0]},
            {**good, "note": ["é"]}]  # fmt: skip
    fits = [schema.fits(record) for record in bent]
    tiff = bent.index({**good, "format": [b"tiff"]})  # of the schema's shape: record_fault's
    assert fits == [i < 3 or i == tiff for i in range(len(bent))]
    assert [record_fault(r, schema) is None for r in bent] == [True] * 3 + [False] * (len(bent) - 3)
    record = to_python(good, schema)
    assert (record["label"], record["note"], record["key"], record["tags"].tolist()) == (
        1, "é", "k", [0, 1])  # fmt: skip
    assert record["boxes"].shape == (1, 4) and record["image"] == b"\xff\xd8"
