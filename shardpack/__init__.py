"""shardpack: pack image datasets into sharded TFRecords in parallel, and read them back.

`import shardpack` stays light: the public names load their modules on first use, and
TensorFlow is imported only inside `tf_dataset`.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "PackOptions": "shardpack.options",
    "pack": "shardpack.packer",
    "PackResult": "shardpack.packer",
    "verify": "shardpack.verifier",
    "VerifyReport": "shardpack.verifier",
    "describe": "shardpack.inspection",
    "load_index": "shardpack.index",
    "iter_examples": "shardpack.read",
    "tf_dataset": "shardpack.read",
    "make_sample": "shardpack.demo",
    "make_preview": "shardpack.preview",
    "read_record": "shardpack.recordindex",
    "write_index_files": "shardpack.recordindex",
    "ShardpackError": "shardpack.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'shardpack' has no attribute {name!r}")
