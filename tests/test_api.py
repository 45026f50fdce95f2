"""The public API: every name in shardpack.__all__ resolves, and importing shardpack stays light."""

from __future__ import annotations

import subprocess
import sys

import shardpack


def test_every_public_name_resolves_and_is_listed_once():
    assert sorted(shardpack.__all__) == sorted(shardpack._EXPORTS)
    for name in shardpack.__all__:
        assert getattr(shardpack, name).__name__ == name


def test_a_caller_can_catch_each_error_class_from_shardpack():
    for name in ("ImageError", "RecordError", "IndexFormatError", "OutputError", "SourceError"):
        assert issubclass(getattr(shardpack, name), shardpack.ShardpackError)
    try:
        raise shardpack.ImageError("a.jpg", "empty file")
    except shardpack.ShardpackError as e:
        assert str(e) == "a.jpg: empty file"


def test_import_shardpack_loads_no_heavy_module():
    code = (
        "import sys, shardpack; shardpack.ImageError; shardpack.Index; "
        "print(sorted(m for m in ('numpy', 'cv2', 'tensorflow', 'torch', 'joblib') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
