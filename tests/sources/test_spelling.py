"""sources/spelling: the one edit distance behind every near-miss warning."""

from __future__ import annotations

import pytest

from shardpack.sources.spelling import edits, near


@pytest.mark.parametrize(
    ("a", "b", "n"),
    [("dog", "dog", 0), ("dgo", "dog", 1), ("lable", "label", 1), ("splt", "split", 1),
     ("kitten", "sitting", 3), ("", "ab", 2), ("ab", "", 2), ("ca", "abc", 3)],
)  # fmt: skip
def test_edits_count_inserts_deletes_replacements_and_swaps(a, b, n):
    assert edits(a, b) == n == edits(b, a)


def test_near_is_a_typo_away_one_edit_for_short_names():
    assert near("lable", ["path", "label", "labels"]) == "label"
    assert near("dgo", ["cat", "dog"]) == "dog"
    assert near("bird", ["brad"]) is None  # two edits: too many for four letters
    assert near("birdss", ["birds", "bird"]) == "birds"  # the closest
    assert near("dog", ["dog"]) is None  # not itself
