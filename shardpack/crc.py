"""CRC32C, the checksum TFRecord frames records with and pack keys image contents by."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from collections.abc import Callable


def _load_crc32c() -> Callable[[bytes], int]:
    """The crc32c package's crc32c function, loaded from its compiled module alone.

    The package's __init__ also asks importlib.metadata for its own version: importing that,
    email's parser and argparse cost tens of milliseconds of every command that reads or writes
    a TFRecord (python -X importtime). Laid out otherwise, or should the compiled module
    not load alone, the package is imported whole.
    """
    spec = importlib.util.find_spec("crc32c")
    for folder in (spec and spec.submodule_search_locations) or ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_crc32c" + suffix)
            if os.path.isfile(path):
                compiled = importlib.util.spec_from_file_location("crc32c._crc32c", path)
                try:
                    module = importlib.util.module_from_spec(compiled)  # loads the library
                    compiled.loader.exec_module(module)
                    return module.crc32c
                except (ImportError, AttributeError, OSError):
                    break
    import crc32c

    return crc32c.crc32c


crc32c = _load_crc32c()
