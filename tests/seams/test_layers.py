"""Folders depend one way: every import of a shardpack module by another, at the top of a module
or inside a function, points down the layers (or across, within one), and no chain of them
comes back to where it started. A function-level import of a shardpack module says why on its
line or the line above (it keeps a heavy package off the import path)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import shardpack
from tests.helpers import parsed, walked

PACKAGE = Path(shardpack.__file__).parent

# Lowest first: a module may import its own layer and those below, never one above. read/ sits
# above packing/ (a reader may ask how a pack is laid out); the faces sit on top.
LAYERS = (
    ("errors", "crc", "schema", "layout", "hffeatures", "cardheader", "signatures", "stops"),
    ("storage",),
    ("containers",),
    ("index", "contentsfile", "options", "images"),
    ("sources",),
    ("packing",),
    ("read",),
    ("console", "cli", "demo", "torch", "__init__", "__main__"),
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _layer(module: str) -> int:
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    for number, names in enumerate(LAYERS):
        if head in names:
            return number
    raise AssertionError(f"{module}: in no layer; add its folder to LAYERS")


def _target(module: str, node: ast.ImportFrom | ast.Import, alias: ast.alias) -> str | None:
    """The shardpack module an import names (a package's submodule where one is named)."""
    if isinstance(node, ast.Import):
        name = alias.name
    else:
        base = module.split(".")
        if node.level:
            if MODULES[module].name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - node.level + 1]
            name = ".".join([*base, *([node.module] if node.module else [])])
        else:
            name = node.module or ""
        if f"{name}.{alias.name}" in MODULES:
            name = f"{name}.{alias.name}"
    if name != "shardpack" and not name.startswith("shardpack."):
        return None
    while name not in MODULES:
        name = name.rsplit(".", 1)[0]
    return name


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(module imported, line, inside a function) for each shardpack import, but those only
    type checkers read (under `if TYPE_CHECKING:`)."""
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", "") == "TYPE_CHECKING":
                continue  # for type checkers only: nothing is imported at run time
            if isinstance(child, ast.Import | ast.ImportFrom):
                for alias in child.names:
                    target = _target(module, child, alias)
                    if target is not None and target != module:
                        found.append((target, child.lineno, local))
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(child, inner)

    visit(parsed(MODULES[module]), False)
    return found


@functools.cache
def graph() -> dict[str, list[tuple[str, int, bool]]]:
    """Every module's shardpack imports, parsed once, when a test first asks."""
    return {module: _imports(module) for module in MODULES}


def test_no_import_points_up_a_layer():
    upward = [
        f"{module}:{line} imports {target}"
        for module, imports in graph().items()
        for target, line, _ in imports
        if _layer(target) > _layer(module)
    ]
    assert upward == []


def test_no_import_cycle_even_through_imports_inside_functions():
    edges = {module: {target for target, _, _ in imports} for module, imports in graph().items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for target in sorted(edges[module]):
            cycle = visit(target, [*path, module])
            if cycle:
                return cycle
        done.add(module)
        return None

    cycles = [cycle for module in sorted(edges) if (cycle := visit(module, []))]
    assert cycles == []


def _said(lines: list[str], at: int) -> bool:
    """Whether the import on line `at` (0-based) says why: a comment on it, or above the run of
    import lines it is in."""
    while at > 0 and lines[at - 1].strip().startswith(("from ", "import ")):
        if "#" in lines[at]:
            return True
        at -= 1
    return "#" in lines[at] or lines[at - 1].strip().startswith("#")


def test_an_import_inside_a_function_says_why():
    unexplained = []
    for module, imports in graph().items():
        lines = MODULES[module].read_text().splitlines()
        for target, line, local in imports:
            if local and not _said(lines, line - 1):
                unexplained.append(f"{module}:{line} imports {target}")
    assert unexplained == []


def test_opencv_is_imported_only_with_stops_held():
    """OpenCV's loader swallows a Ctrl-C that arrives inside it (`except: pass`), so cv2 is
    imported in one place, images._opencv, with stops held (stops.py); every other module asks
    it for cv2. demo.py and read/preview.py imported cv2 at their top: a Ctrl-C as `shardpack
    demo` or `preview` started was lost."""
    found = []
    for module, path in MODULES.items():
        tree = parsed(path)
        held = {id(node) for function in ast.walk(tree) if isinstance(function, ast.FunctionDef)
                and function.name == "_opencv" for node in ast.walk(function)}  # fmt: skip
        for node in walked(path):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])  # fmt: skip
            if any(n.split(".")[0] == "cv2" for n in names) and not (
                    module == "shardpack.images" and id(node) in held):  # fmt: skip
                found.append(f"{module}:{node.lineno}")
    assert found == []
