"""The storage seam: code outside shardpack/storage/ asks a store (a Storage verb: tf_path,
lexists, stamp, identity, make_folder, link_or_copy, ...) or a location (storage.locations)
instead of inspecting which store it has. Counted on the code, not on a run."""

from __future__ import annotations

import ast
from pathlib import Path

import shardpack
from tests.helpers import walked

PACKAGE = Path(shardpack.__file__).parent
# What only storage/ may call: whether a store is a disk (local_path) or a location a URL.
INSPECTING = {"local_path", "is_url"}


def _calls(path: Path) -> int:
    count = 0
    for node in walked(path):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            count += name in INSPECTING
        elif isinstance(node, ast.FunctionDef) and node.name in INSPECTING:
            count += 1  # a Storage of its own outside storage/ (a third one)
    return count


def test_nothing_outside_storage_inspects_which_store_it_has():
    found = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "storage" and (n := _calls(path))
    }
    assert found == {}, f"ask the Storage (or storage.locations) instead: {found}"


def test_the_storage_seam_holds():
    """Nothing outside storage/ imports one store's module or asks which kind it has, and
    nothing calls fsspec's private _strip_protocol."""
    stores = {"shardpack.storage.local", "shardpack.storage.remote"}
    leaks = []
    for module in sorted(PACKAGE.rglob("*.py")):
        outside = module.parent.name != "storage"
        for node in walked(module):
            where = f"{module.name}:{getattr(node, 'lineno', 0)}"
            if outside and isinstance(node, ast.ImportFrom) and (node.module in stores or (
                    node.module == "shardpack.storage"
                    and {a.name for a in node.names} & {"local", "remote"})):  # fmt: skip
                leaks.append(f"{where}: imports a store's module")
            elif (outside and isinstance(node, ast.Attribute) and node.attr == "local"
                  and ast.unparse(node.value) != "threading"):  # fmt: skip
                leaks.append(f"{where}: asks .local")
            elif isinstance(node, ast.Attribute) and node.attr == "_strip_protocol":
                leaks.append(f"{where}: calls fsspec's private _strip_protocol")
    assert leaks == []
