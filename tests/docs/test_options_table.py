"""docs/packing.md's table of options follows options.FLAGS, the one place each option's flag
is written: every option there once, and no flag there that pack does not take."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from shardpack.cli import app
from shardpack.options import FLAGS

PACKING = Path(__file__).parents[2] / "docs" / "packing.md"
# pack's own flags beside the options: how it runs, not what it writes
RUN_FLAGS = {"--storage-option", "--no-progress", "--json"}


def _spellings(option: str) -> set[str]:
    spec = FLAGS[option]
    return {f"--{value}" for value, _ in spec.switches} or set(spec.flag.split("/"))


def _table_flags() -> list[str]:
    """Every flag the first column of the Options table names, as often as it names it."""
    text = PACKING.read_text()
    table = text[text.index("## Options") :].split("\n\n")[1]
    rows = [line.split(" | ")[0] for line in table.splitlines()[2:]]
    return [flag for row in rows for flag in re.findall(r"--[a-z][a-z-]*", row)]


def test_every_option_is_in_the_docs_table_once_and_nothing_else():
    named = _table_flags()
    for option in FLAGS:
        found = [flag for flag in named if flag in _spellings(option)]
        assert len(found) >= 1, f"docs/packing.md's table lacks {FLAGS[option].flag}"
        assert len(set(found)) == len(found), f"docs/packing.md names {found[0]} twice"
    known = set().union(*map(_spellings, FLAGS), RUN_FLAGS)
    assert sorted(set(named) - known) == []


def test_pack_declares_exactly_the_table():
    shown = CliRunner().invoke(app, ["pack", "--help"], env={"COLUMNS": "200"}).output
    declared = set(re.findall(r"^\s+(--[a-z][a-z-]*)", shown, re.M))
    declared |= set(re.findall(r" / (--[a-z][a-z-]*)", shown))
    wanted = set().union(*map(_spellings, FLAGS), RUN_FLAGS, {"--help"})
    assert declared == wanted
