"""The tf.train.Example codec: the canonical decoder reads what the general one reads, borrows
and leaves out what it is told."""

from __future__ import annotations

import struct

import pytest

from shardpack.containers import example
from shardpack.containers.example import MAX_FIELDS, MAX_VALUES, decode_example, encode_example

FEATURES = {
    "image": bytes(range(256)) * 40,  # lengths past one varint byte, at every level
    "label": 3,
    "neg": -(2**63),
    "max": 2**63 - 1,
    "ints": [1, -1, 300, 2**40],
    "f": 0.25,
    "floats": [1.0, -0.5],
    "names": [b"a", b"", b"bc" * 100],
    "text": "é",
    "empty": [],
    "é_name": 7,
}


def _field(number: int, wire: int, payload: bytes | int) -> bytes:
    """One protobuf field, built by hand: a layout encode_example never writes."""
    key = example._varint(number << 3 | wire)
    if wire == 0:
        return key + example._varint(payload)
    return key + (payload if wire == 5 else example._varint(len(payload)) + payload)


def _entry(name: bytes, feature: bytes) -> bytes:
    return _field(1, 2, _field(1, 2, name) + _field(2, 2, feature))


# Well-formed Examples in other layouts (TensorFlow's parser reads each): unpacked ints, a
# float as one fixed32, a repeated name (the last wins), an unknown field, an empty Feature,
# the value before the name.
OTHER_LAYOUTS = [
    _field(1, 2, _entry(b"n", _field(3, 2, _field(1, 0, 5) + _field(1, 0, 2**64 - 3)))),
    _field(1, 2, _entry(b"f", _field(2, 2, _field(1, 5, struct.pack("<f", 1.5))))),
    _field(1, 2, _entry(b"a", _field(3, 2, b"")) + _entry(b"a", _field(1, 2, _field(1, 2, b"x")))),
    _field(1, 2, _entry(b"a", _field(3, 2, b""))) + _field(9, 0, 1),
    _field(1, 2, _entry(b"a", b"")),
    _field(1, 2, _field(1, 2, _field(2, 2, _field(3, 2, b"")) + _field(1, 2, b"v"))),
]


@pytest.mark.parametrize("size", [0, 127, 128, 16_383, 16_384, 2**21 - 1, 2**21])
def test_an_images_entry_is_built_as_every_other_bytes_entry(size):
    """A bytes value's entry head, built at once for its length, is the one _entry builds:
    at every varint width of the lengths it holds."""
    prefix = example._bytes_feature_prefix(size)
    head = b"".join(example._entry("image", [prefix], len(prefix) + size)[0])
    assert example._bytes_entry_head.__wrapped__("image", size) == head


def test_a_records_runs_hold_the_image_alone_and_the_small_parts_joined():
    """example_parts hands a writer one run of small parts before the image, the image itself
    (not copied) and one run after: a passed-through photo's record is three pieces."""
    image = bytes(50_000)
    features = {"image": image, "height": 3, "width": 4, "key": b"a/b.jpg", "label": 2}
    runs = example.example_parts(features)
    assert len(runs) == 3 and runs[1] is image
    assert b"".join(runs) == encode_example(features)
    names = {"a_first": image, "z_last": bytes(9_000), "m": [b"x" * 5_000, b"y"], "n": 1}
    runs = example.example_parts(names)
    assert [len(r) >= example.APART for r in runs] == [False, True, False, True, False, True, False]
    assert b"".join(runs) == encode_example(names)


def test_the_canonical_decoder_reads_encode_examples_layout_alone():
    data = encode_example(FEATURES)
    assert example._decode_canonical(data) == example._decode_general(data)
    assert decode_example(data)["names"] == [b"a", b"", b"bc" * 100]
    for other in OTHER_LAYOUTS:
        assert example._decode_canonical(other) is None
        assert decode_example(other) == example._decode_general(other)
    unsorted = _field(1, 2, _entry(b"z", _field(3, 2, b"")) + _entry(b"a", _field(3, 2, b"")))
    assert example._decode_canonical(unsorted) == example._decode_general(unsorted)


@pytest.mark.parametrize("cut", [1, 2, 5, 40, -1, -3])
def test_a_cut_or_bent_example_is_refused_alike(cut):
    data = encode_example(FEATURES)
    for bad in (data[:cut], data[:cut] + b"\x0a" + data[cut:]):
        try:
            expected = example._decode_general(bad)
        except ValueError:
            with pytest.raises(ValueError):
                decode_example(bad)
        else:
            assert decode_example(bad) == expected


def test_borrowed_values_are_views_and_only_leaves_out_the_rest():
    data = bytearray(encode_example(FEATURES))
    for given in (data, memoryview(data)):
        decoded = decode_example(given, borrow=("image",), only=("image", "label"))
        assert set(decoded) == {"image", "label"}
        assert isinstance(decoded["image"][0], memoryview)
        assert bytes(decoded["image"][0]) == FEATURES["image"]
        assert decoded["label"] == [3]
        assert decode_example(given) == decode_example(bytes(data))


def test_kept_entries_read_as_parsed_ones_and_hold_no_record():
    """Small entries are kept by their bytes (labels, sizes, formats repeat): a kept one gives
    a list of its own, a repeated name still goes to the general decoder, no borrowed view is
    kept (it would hold its whole record), and unique entries do not grow the store past its
    bound."""
    data = encode_example({"key": b"k1", "label": 3, "size": [1, 2]})
    first = decode_example(data)
    first["label"].append(4)
    assert decode_example(data) == {"key": [b"k1"], "label": [3], "size": [1, 2]}
    label = _entry(b"label", _field(3, 2, _field(1, 2, b"\x03")))
    twice = _field(1, 2, label + label)  # the same entry bytes twice: the last wins
    assert decode_example(twice) == example._decode_general(twice) == {"label": [3]}
    decode_example(encode_example({"key": b"held", "image": b"\x00" * 10}), borrow=("key",))
    assert not any(isinstance(v, memoryview) for _, values in example._ENTRIES.values()
                   for v in values)  # fmt: skip
    for i in range(example._KEPT_ENTRIES + 10):
        assert decode_example(encode_example({"key": b"%d" % i}))["key"] == [b"%d" % i]
    assert len(example._ENTRIES) <= example._KEPT_ENTRIES


@pytest.mark.parametrize("cut", [0, 1, 5, -1])
def test_an_example_inside_its_framing_reads_as_cut_out(cut):
    """A record read with its framing is parsed where it lies (start, stop), in
    encode_example's layout or another; a bent one inside its frame is refused alike."""
    for data in (encode_example(FEATURES), *OTHER_LAYOUTS):
        inside = data[: len(data) + cut] if cut < 0 else data[cut:]
        framed = b"\x0a" * 12 + inside + b"\x0a" * 4  # framing bytes that look like tags
        try:
            expected = decode_example(inside)
        except ValueError:
            with pytest.raises(ValueError):
                decode_example(framed, start=12, stop=12 + len(inside))
        else:
            assert decode_example(framed, start=12, stop=12 + len(inside)) == expected


def _outcome(decode, data: bytes):
    """What a decoder makes of `data`: its features (views as bytes), or ValueError."""
    try:
        decoded = decode(data)
    except ValueError:
        return ValueError
    return {name: [bytes(v) if isinstance(v, memoryview) else v for v in values]
            for name, values in decoded.items()}  # fmt: skip


@pytest.mark.parametrize("borrow", [(), ("image", "key")])
def test_mutated_records_decode_as_the_general_decoder_reads_them(borrow):
    """A few hundred records of a pack's layout (a large image, a key, a label, sizes), each
    with a byte changed, inserted or dropped: the fast paths accept, refuse and read each as
    the general decoder does, inside framing too."""
    import random

    rng = random.Random(33)
    record = encode_example({"image": bytes(range(256)) * 200, "key": b"cls/img_0001.jpg",
                             "label": 3, "height": 375, "width": 500, "channels": 3,
                             "format": "jpeg"})  # fmt: skip
    for _ in range(400):
        bent = bytearray(record)
        at = rng.choice(
            [rng.randrange(len(bent)), rng.randrange(40), len(bent) - 1 - rng.randrange(60)]
        )
        change = rng.randrange(3)
        if change == 0:
            bent[at] = rng.choice([0x00, 0x0A, 0x12, 0x1A, 0x7F, 0x80, 0xFF, bent[at] ^ 1])
        elif change == 1:
            bent.insert(at, rng.choice([0x00, 0x0A, 0x80]))
        else:
            del bent[at]
        bent = bytes(bent)
        expected = _outcome(example._decode_general, bent)
        assert _outcome(lambda d: decode_example(d, borrow), bent) == expected
        framed = b"\x0a" * 12 + bent + b"\x0a" * 4
        stop = 12 + len(bent)
        inside = _outcome(lambda d: decode_example(d, borrow, None, 12, stop), framed)  # noqa: B023
        assert inside == expected


FIELDS, NUMBERS = 1000, 10_000  # the limits, lowered: the count is what is checked


@pytest.mark.parametrize("flood, said", [
    # a record of zeros (a gzip shard of 1 MiB inflates to a GiB of them): an Example of no
    # feature, at a third of a second a MiB (a GiB: 5 minutes), which no protobuf parser takes
    (bytes(64 << 10), "a field numbered 0"),
    # fields no Example holds, each walked and skipped at the same speed
    (_field(2, 0, 0) * (FIELDS + 1), f"over {FIELDS:,} fields"),
    (_field(1, 2, _field(1, 2, b"") * (FIELDS + 1)), f"over {FIELDS:,} fields"),
    (_field(1, 2, _entry(b"b", _field(1, 2, _field(1, 2, b"") * (FIELDS + 1)))),
     f"over {FIELDS:,} fields"),  # empty bytes values, each held
    # packed numbers past any Example's: a GiB of them was 2**30 Python numbers held
    (_field(1, 2, _entry(b"n", _field(3, 2, _field(1, 2, b"\1" * (NUMBERS + 1))))),
     f"over {NUMBERS:,} numbers"),
    (_field(1, 2, _entry(b"f", _field(2, 2, _field(1, 2, bytes(4 * NUMBERS + 4))))),
     f"over {NUMBERS:,} numbers"),
])  # fmt: skip
def test_a_flood_of_tiny_fields_or_numbers_is_refused_unread(flood, said, monkeypatch):
    """Each decoded to an Example of no feature, or to as many values as the record's bytes,
    at ~0.3 s a MiB: a compressed shard's record of a GiB took minutes, and as many GiB."""
    monkeypatch.setattr(example, "MAX_FIELDS", FIELDS)
    monkeypatch.setattr(example, "MAX_VALUES", NUMBERS)
    with pytest.raises(ValueError, match=said):
        decode_example(flood)
    crowded = {"bbox": [0.5] * (NUMBERS - 1000), "id": list(range(990)), "names": [b"a"] * 900}
    assert decode_example(encode_example(crowded)) == crowded  # just under both: read
    # (the limits themselves: a COCO image of a million objects, ~8 million numbers, reads)
    assert (MAX_FIELDS, MAX_VALUES) >= (1 << 20, 8_000_000)
