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


def test_every_error_class_is_importable_from_shardpack():
    """What a caller may meet, they can catch by name from the package itself."""
    import inspect

    from shardpack import errors
    from shardpack.packing import cluster

    defined = {
        c.__name__
        for module in (errors, cluster)
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, errors.ShardpackError) and c.__module__ == module.__name__
    }
    assert len(defined) > 10 and defined <= set(shardpack.__all__), defined - set(shardpack.__all__)


def test_import_shardpack_loads_no_heavy_module():
    heavy = ["numpy", "cv2", "tensorflow", "torch", "joblib"]
    names = "shardpack.ImageError, shardpack.Index"
    code = f"import sys, shardpack; {names}; print(sys.modules.keys() & {heavy!r})"
    loaded = subprocess.check_output([sys.executable, "-c", code], text=True)
    assert loaded.strip() == "set()"
