"""The Example codec: the one-pass parser of usual Examples agrees with the general one."""

from __future__ import annotations

import random

from shardpack.containers.example import decode_example, encode_example


def _parsed(data: bytes | memoryview) -> object:
    try:
        return decode_example(data)
    except ValueError as e:
        return str(e)


def test_the_usual_path_reads_what_the_general_parser_reads_even_damaged():
    """bytes take the one-pass path (falling back when unusual); a memoryview takes the
    general parser: both must give the same dict, or the same error, for any bytes."""
    example = encode_example({"image": [b"\xff\xd8" * 70], "label": [3], "key": [b"a/1.jpg"],
                              "boxes": [0.5, 0.25, 1.0, 0.75], "ids": [0, -1, 2**62, -(2**63)],
                              "empty": [], "names": [b"x", b"yy"]})  # fmt: skip
    assert decode_example(example)["ids"] == [0, -1, 2**62, -(2**63)]
    rng = random.Random(0)
    for _ in range(3000):
        damaged = bytearray(example)
        for _ in range(rng.randint(1, 3)):
            if not damaged:
                break
            at = rng.randrange(len(damaged))
            if rng.random() < 0.6:
                damaged[at] = rng.randrange(256)
            elif rng.random() < 0.5:
                del damaged[at : at + rng.randint(1, 4)]
            else:
                damaged = damaged[:at]
        if damaged:
            assert _parsed(bytes(damaged)) == _parsed(memoryview(damaged)), bytes(damaged)
