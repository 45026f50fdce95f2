"""packing/stats.py: the summaries index.json keeps of each split's records."""

from __future__ import annotations

import numpy as np
import pytest

from shardpack.packing.stats import entry_summaries


@pytest.mark.parametrize("count", [1, 2, 5, 6, 1001])
def test_a_summary_s_medians_are_numpy_s_of_odd_and_even_counts(count):
    """Each spread's median is np.median's (the middle value, or the mean of the two middle
    ones), for sizes and for the aspect ratios they make."""
    rng = np.random.default_rng(count)
    width, height = rng.integers(1, 4000, count), rng.integers(1, 4000, count)
    size, stored = rng.integers(100, 10**7, count), rng.integers(100, 10**6, count)
    entry = {"keys": [str(i) for i in range(count)], "size": size, "width": width,
             "height": height, "stored": stored, "tally": [], "reasons": []}  # fmt: skip
    summary = entry_summaries({"train": [entry]}, {}, {})["train"]
    wanted = {"width": width, "height": height, "bytes": size, "aspect": width / height,
              "stored_bytes": stored}  # fmt: skip
    assert summary["bytes"]["total"] == int(size.sum())
    assert summary["stored_bytes"]["total"] == int(stored.sum())
    for name, values in wanted.items():
        median = float(np.median(values.astype(np.float64)))
        assert summary[name]["median"] == pytest.approx(median, abs=1e-4), name
