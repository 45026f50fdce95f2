"""No function of shardpack's is over 80 lines, but the CLI's declarations (cli.py): a longer one
does more than one thing, and a reader of it has to hold too much at once."""

from __future__ import annotations

import ast
from pathlib import Path

import shardpack
from tests.helpers import walked

LONGEST = 80
PACKAGE = Path(shardpack.__file__).parent


def _lengths(path: Path) -> list[tuple[str, int]]:
    return [(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}",
             node.end_lineno - node.lineno + 1) for node in walked(path)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]  # fmt: skip


def test_no_function_is_over_80_lines_but_the_clis():
    files = [p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "cli.py"]
    assert len(files) > 50  # the package, not an empty folder
    long = {name: n for path in files for name, n in _lengths(path) if n > LONGEST}
    assert long == {}
