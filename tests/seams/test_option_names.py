"""Library messages name pack options as data (errors.Option), each face says them its own way:
every option a message names is in options.FLAGS, and no library string spells a pack flag
itself but the texts recorded in OUT (read by both faces, in the CLI's words)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import typer

from shardpack import cli, errors
from shardpack.options import FLAGS, PackOptions, as_flags, flag
from shardpack.sources import registered_sources
from tests.helpers import walked

PACKAGE = Path(cli.__file__).parent
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
# Texts kept in OUT or in a run's result, not raised: an image's skip reason (index.json, the
# summary), a warning; one text for both faces, so in the CLI's words.
RECORDED = {
    "signatures.py": {"--max-pixels"},  # OVER_MAX_PIXELS, a skip reason
    "packing/worker.py": {"--min-side", "--max-aspect", "--max-area"},  # skip reasons
    "packing/boxes.py": {"--box-columns"},  # a row's skip reason
    "packing/masks.py": {"--resize", "--max-side"},  # a record's skip reason
    "packing/duplicates.py": {"--dedup"},  # warnings and summary lines
    "packing/grow.py": {"--update", "--dedup"},  # warnings
    "packing/rangeplan.py": {"--shuffle-window", "--no-shuffle"},  # a warning
    "sources/nearmisses.py": {"--classes"},  # a warning
    "sources/source.py": {"--max-pixels"},  # a skip reason
    "sources/classlist.py": {"--classes"},  # a skip reason
    "sources/coco.py": {"--max-pixels"},  # an image's skip reason
    "sources/manifest.py": {"--classes", "--box-columns"},  # a row's skip reason, a warning
    "sources/tars.py": {"--classes"},  # a sample's skip reason
    "sources/hf.py": {"--root", "--no-shuffle"},  # a row's skip reason, a warning
    "sources/repack.py": {"--no-shuffle"},  # a warning
    "sources/tables/reader.py": {"--classes", "--columns"},  # warnings
    "sources/tables/columns.py": {"--label-column"},  # a warning
    "storage/urlpolicy.py": {"--allow-private-urls"},  # a URL's reason in the failures file
    "containers/webdataset.py": {"--columns"},  # a warning
    "read/preview.py": {"--overwrite"},  # preview's own --overwrite, not pack's
}


@functools.cache
def _said() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(module, option) of each Option("name", ...) in the package, and (module, flag) of each
    flag spelled in a string constant but a docstring; one walk of each module's tree."""
    named, spelled = set(), set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("cli.py", "options.py"):  # the CLI's own, and FLAGS' help
            continue
        module, docs = path.relative_to(PACKAGE).as_posix(), set()
        for node in walked(path):  # a parent before its docstring
            if isinstance(node, _DOCUMENTED) and node.body and isinstance(node.body[0], ast.Expr):
                docs.add(id(node.body[0].value))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in docs:
                    spelled.update((module, said) for said in _FLAG.findall(node.value))
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "Option"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                named.add((module, node.args[0].value))
    return named, spelled


_DOCUMENTED = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _cli_flags() -> set[str]:
    command = typer.main.get_command(cli.app)
    return {
        said
        for sub in command.commands.values()
        for param in sub.params
        for said in (*param.opts, *param.secondary_opts)
        if said.startswith("--")
    }


def _pack_flags() -> set[str]:
    return {said for spec in FLAGS.values() for said in _FLAG.findall(spec.flag)} | {
        f"--{value}" for spec in FLAGS.values() for value, _ in spec.switches
    }


def test_every_option_a_message_names_is_in_flags():
    named, _ = _said()
    assert len(named) > 40  # the parser finds them: a test that cannot fail would pass at 0
    assert {name for _, name in named} <= set(FLAGS), {(m, n) for m, n in named if n not in FLAGS}
    for source in registered_sources().values():  # own_options: fields, their flags FLAGS'
        assert set(source.own_options) <= set(FLAGS), source.name


def test_no_library_string_spells_a_pack_flag_but_recorded_texts():
    """A pack flag in a raised message would tell a Python caller of pack() to pass --on-error
    skip: it goes through Option. What flags remain are other commands' (verify --decode,
    --storage-option) or recorded texts, and each is one the CLI has."""
    pack_flags, cli_flags = _pack_flags(), _cli_flags()
    assert {"--on-error", "--splits", "--append", "--no-shuffle"} <= pack_flags <= cli_flags
    _, spelled = _said()
    unknown = {(m, said) for m, said in spelled if said not in cli_flags}
    assert not unknown, f"flags the CLI does not have: {sorted(unknown)}"
    unrecorded = {
        (m, said) for m, said in spelled if said in pack_flags and said not in RECORDED.get(m, ())
    }
    assert not unrecorded, f"say these through errors.Option: {sorted(unrecorded)}"
    stale = {(m, s) for m, flags in RECORDED.items() for s in flags if (m, s) not in spelled}
    assert not stale, f"allowed but no longer spelled: {sorted(stale)}"


def test_each_face_says_an_option_its_own_way():
    cases = [
        (errors.Option("on_error", "skip"), "on_error='skip'", "--on-error skip"),
        (errors.Option("compression"), "compression=", "--compression"),
        (errors.Option("upscale", False), "upscale=False", "--no-upscale"),
        (errors.Option("index_files", True), "index_files=True", "--index-files"),
        (errors.Option("overwrite", False), "overwrite=False", "no --overwrite"),
        (errors.Option("grow", "update"), "grow='update'", "--update"),
        (errors.Option("grow"), "grow=", "--append or --update"),
        (errors.Option("resize", (64, 32)), "resize=(64, 32)", "--resize 64x32"),
        (errors.Option("split_names", ("a", "b")), "split_names=('a', 'b')", "--splits a,b"),
        (errors.Option("split", (("train", 0.9),)), "split=(('train', 0.9),)", "--split train=0.9"),
        (errors.Option("root", "/x\ny"), "root='/x\\ny'", "--root /x\\ny"),  # escaped
    ]
    for option, python, said in cases:
        error = errors.SourceError("a: pass ", option, " to go on")
        assert (str(error), as_flags(error)) == (
            f"a: pass {python} to go on",
            f"a: pass {said} to go on",
        )
        assert error.options == (option.name,)


def test_an_error_keeps_its_options_across_a_process_boundary():
    import pickle

    for error in (
        errors.OutputError("OUT: pass ", errors.Option("overwrite", True)),
        errors.ImageError("a.jpg", "bad; pass ", errors.Option("on_error", "skip")),
    ):
        back = pickle.loads(pickle.dumps(error))
        assert (type(back), back.args, as_flags(back)) == (type(error), error.args, as_flags(error))
    image = pickle.loads(pickle.dumps(errors.ImageError("a.jpg", "bad; ", errors.Option("seed"))))
    assert (image.key, image.reason, str(image)) == ("a.jpg", "bad; seed=", "a.jpg: bad; seed=")


def test_flags_cover_every_field_and_name_only_fields():
    assert set(FLAGS) == {field for field in PackOptions.__dataclass_fields__}
    assert flag("on_error") == "--on-error" and flag("shuffle") == "--shuffle"
