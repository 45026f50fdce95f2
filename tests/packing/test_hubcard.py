"""packing/hubcard.py: the dataset card's YAML front matter."""

from __future__ import annotations

from shardpack.packing.hubcard import _UNSAFE

# YAML 1.1's printable characters (what PyYAML, and so the Hub, reads), less the line breaks a
# double-quoted scalar folds (NEL is outside these ranges already).
_PRINTABLE = ((0x09, 0x09), (0x0A, 0x0A), (0x0D, 0x0D), (0x20, 0x7E), (0xA0, 0x2027),
              (0x202A, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x10FFFF))  # fmt: skip


def test_the_card_escapes_exactly_what_yaml_cannot_print():
    """Every character at and beside each edge of the printable ranges (and a stride through
    them) is escaped if and only if it lies outside them."""
    edges = {c + d for low, high in _PRINTABLE for c in (low, high) for d in (-1, 0, 1)}
    for code in sorted(edges | set(range(0, 0x110000, 997))):
        if 0 <= code <= 0x10FFFF:
            printable = any(low <= code <= high for low, high in _PRINTABLE)
            assert bool(_UNSAFE.match(chr(code))) is not printable, hex(code)
