"""shardpack: pack image datasets into shards (TFRecord, ArrayRecord, WebDataset, Hugging Face
Parquet) in parallel, and read them back.

`import shardpack` stays light: the public names load their modules on first use, and
TensorFlow is imported only inside `tf_dataset`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "PackOptions": "shardpack.options",
    "pack": "shardpack.packing.packer",
    "PackResult": "shardpack.packing.result",
    "verify": "shardpack.read.verify",
    "VerifyReport": "shardpack.read.verify",
    "describe": "shardpack.read.describe",
    "Index": "shardpack.index",
    "load_index": "shardpack.index",
    "iter_examples": "shardpack.read.stream",
    "tf_dataset": "shardpack.read.stream",
    "make_sample": "shardpack.demo",
    "make_preview": "shardpack.read.preview",
    "Preview": "shardpack.read.preview",
    "write_report": "shardpack.read.report",
    "Records": "shardpack.read.random_access",
    "read_record": "shardpack.read.random_access",
    "write_index_files": "shardpack.packing.daliindex",
    **dict.fromkeys(
        (
            "ShardpackError",
            "SourceError",
            "OptionError",
            "UnsafePickleError",
            "ImageError",
            "OutputError",
            "WorkerDiedError",
            "IndexFormatError",
            "RecordError",
            "MissingPackageError",
            "FileAccessError",
            "StorageError",
            "ShardSizeError",
            "OutChangedError",
        ),
        "shardpack.errors",
    ),
    "ClusterError": "shardpack.packing.cluster",
}

# the names of _EXPORTS, spelled out so that linters and type checkers read them
__all__ = [
    "ClusterError", "FileAccessError", "ImageError", "Index", "IndexFormatError",
    "MissingPackageError", "OptionError", "OutChangedError", "OutputError", "PackOptions",
    "PackResult", "Preview", "RecordError", "Records", "ShardSizeError", "ShardpackError",
    "SourceError", "StorageError", "UnsafePickleError",
    "VerifyReport", "WorkerDiedError", "describe", "iter_examples", "load_index", "make_preview",
    "make_sample", "pack", "read_record", "tf_dataset", "verify", "write_index_files",
    "write_report",
]  # fmt: skip

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from shardpack.demo import make_sample
    from shardpack.errors import (
        FileAccessError,
        ImageError,
        IndexFormatError,
        MissingPackageError,
        OptionError,
        OutChangedError,
        OutputError,
        RecordError,
        ShardpackError,
        ShardSizeError,
        SourceError,
        StorageError,
        UnsafePickleError,
        WorkerDiedError,
    )
    from shardpack.index import Index, load_index
    from shardpack.options import PackOptions
    from shardpack.packing.cluster import ClusterError
    from shardpack.packing.daliindex import write_index_files
    from shardpack.packing.packer import pack
    from shardpack.packing.result import PackResult
    from shardpack.read.describe import describe
    from shardpack.read.preview import Preview, make_preview
    from shardpack.read.random_access import Records, read_record
    from shardpack.read.report import write_report
    from shardpack.read.stream import iter_examples, tf_dataset
    from shardpack.read.verify import VerifyReport, verify


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'shardpack' has no attribute {name!r}")
