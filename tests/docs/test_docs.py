"""Every code block of README.md and docs/*.md, run as printed.

`sh` blocks run a line at a time in a workspace whose HOME holds the folders the examples name
(`~/data/flowers`, a CIFAR-10 folder, manifests) and `demo-out` (what `make demo` leaves);
`python` blocks run in that workspace after its document's `sh` blocks; a `json` block is an
`index.json` that shardpack loads; a `text` block holds command synopses (SRC, OUT, a cluster's
address), each `shardpack` line parsed by the CLI itself. `make`, `pip install` and `source`
lines are set-up: their targets and extras must exist, the rest of the block runs without them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import (
    image,
    make_cifar10_python,
    make_tree,
    run_cli,
    run_kept,
    write_csv,
    write_image,
    write_jsonl,
    write_parquet,
)
from tests.s3server import environment, reset

ROOT = Path(__file__).parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A block naming one of these needs the heavy test extras (make test, not make test-fast).
HEAVY = re.compile(r"\b(tensorflow|tensorflow_datasets|tfds|tf_dataset|torch|keras|wids|dali)\b")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    """The fenced code blocks of a document, with the line each starts on."""
    text = document.read_text()
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(document, line, match.group(1), match.group(2)))
    return found


ALL = [b for d in DOCUMENTS for b in blocks(d)]


def _slow(document: Path) -> list[pytest.MarkDecorator]:
    """A document's sh and python blocks run processes (a `shardpack` a line): slow ones,
    for `make test`. One whose shell lines start the S3 server shows what
    tests/storage/test_remote.py shows: `make test-long`'s."""
    return [pytest.mark.slow] + ([pytest.mark.long] if "-m moto.server" in document.read_text()
                                 else [])  # fmt: skip


def _param(block: Block):
    marks = [pytest.mark.heavy] if HEAVY.search(block.code) else []
    if block.language in ("sh", "python"):
        marks += _slow(block.document)
    return pytest.param(block, id=block.id, marks=marks)


def test_every_block_says_how_it_is_checked():
    unknown = [b.id for b in ALL if b.language not in ("sh", "python", "json", "text")]
    assert not unknown, f"blocks without sh, python, json or text: {unknown}"


def _workspace(root: Path, demo: bool) -> Path:
    """The files the examples name, under root (HOME is root/home); with demo, `demo-out`."""
    data = root / "home" / "data"
    flowers = make_tree(data / "flowers", {"daisy": 4, "rose": 3})
    for n, photo in enumerate(sorted(flowers.rglob("*.jpg"))):  # of different sizes, as photos are
        write_image(photo, image(n, height=24 + 2 * n, width=32 - n))
    make_cifar10_python(data / "cifar-10-batches-py", per_batch=10)
    pets = make_tree(data / "pets", {"cat": 3, "dog": 3})
    rows = [{"path": str(p.relative_to(pets)), "label": p.parent.name, "breed": p.parent.name}
            for p in sorted(pets.rglob("*.jpg"))]  # fmt: skip
    write_csv(pets / "labels.csv", rows)
    write_jsonl(data / "coco-boxes.jsonl", [
        {"path": f"pets/{r['path']}", "label": [r["label"], "animal"],
         "boxes": [[0.1, 0.1, 0.5, 0.5]], "caption": "a pet"} for r in rows])  # fmt: skip
    write_parquet(data / "shots.parquet",
                  [{"path": f"pets/{r['path']}", "label": r["label"]} for r in rows])  # fmt: skip
    (root / "classes.txt").write_text("cat\ndog\n")
    hf = make_tree(data / "hf-style", {"cat": 2, "dog": 2})
    write_jsonl(hf / "metadata.jsonl", [{"file_name": str(p.relative_to(hf)),
                                         "label": p.parent.name}
                                        for p in sorted(hf.rglob("*.jpg"))])  # fmt: skip
    if demo:
        if not _DEMO:  # one `make demo` for every document that names its output
            command = [sys.executable, "-m", "shardpack", "demo", "demo-out", "--per-class", "20"]
            subprocess.run([*command, "--no-progress"], cwd=root, check=True, capture_output=True)
            _DEMO.append(root / "demo-out")
        else:
            shutil.copytree(_DEMO[0], root / "demo-out", symlinks=True)
    return root


# The first workspace's `demo-out`, copied into the others (a document may change its own).
_DEMO: list[Path] = []


def _setup_line(line: str) -> bool:
    """Check a set-up line (make, pip install, source); True if the line is one."""
    words = shlex.split(line.split("#")[0])
    if words[:1] == ["make"]:
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
        assert set(words[1:]) <= set(targets), line
    elif words[:2] == ["pip", "install"]:
        table = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1]
        extras = re.findall(r"^([\w-]+) = \[", table.split("\n[")[0], re.M)
        for spec in words[2:]:  # each extra named exists
            for extra in ",".join(re.findall(r"\[([\w,-]+)\]", spec)).split(","):
                assert not extra or extra in extras, line
    return words[:1] in (["make"], ["source"]) or words[:2] == ["pip", "install"]


# A `shardpack` line with nothing else the shell would read (pipe, redirect, variable, glob,
# quote; `~` only as a word's start): run in this process, as the console entry point runs it,
# and not in a new interpreter (~0.3 s of CPU each, 50 lines).
_PLAIN = re.compile(r"(?:\.venv/bin/)?shardpack(?: (?:~/)?[\w./=,:+-]+)+")


class Shell:
    """Runs a document's sh lines in its workspace, starting the S3 server where one asks."""

    def __init__(self, root: Path, request: pytest.FixtureRequest):
        self.root, self.request = root, request
        self.env = {**os.environ, "HOME": str(root / "home")}

    def run(self, line: str) -> None:
        if _setup_line(line):
            return
        if line.startswith(".venv/bin/python -m moto.server"):
            endpoint = self.request.getfixturevalue("s3_server")
            self.request.addfinalizer(lambda: reset(endpoint))
            self.env |= environment(endpoint, self.root)
            return
        if line.startswith("export AWS_"):
            return  # the server's own variables replace the printed ones
        command = " ".join(re.split(r"(?:^|\s)#", line)[0].split())
        if _PLAIN.fullmatch(command):
            home = self.env["HOME"]
            args = [home + w[1:] if w.startswith("~/") else w for w in command.split()[1:]]
            with contextlib.chdir(self.root):
                run = run_cli(*args, env=self.env)
            assert run.returncode == 0, f"{line}\n{run.stderr[-3000:]}"
            return
        line = line.replace(".venv/bin/python", sys.executable)
        line = re.sub(r"(^|[\s;|])(\.venv/bin/)?shardpack ", rf"\1{sys.executable} -m shardpack ",
                      line)  # fmt: skip
        run = subprocess.run(line, shell=True, cwd=self.root, env=self.env, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
        assert run.returncode == 0, f"{line}\n{run.stderr[-3000:]}"


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[Path, Path]:
    """Each document's workspace, once its sh blocks have run there."""
    return {}


def _ran(document: Path, ran: dict, request, tmp_path_factory) -> Path:
    if document not in ran:
        demo = "demo-out" in document.read_text()
        root = _workspace(tmp_path_factory.mktemp(document.stem), demo)
        shell = Shell(root, request)
        for block in blocks(document):
            if block.language == "sh":
                for line in block.code.strip().splitlines():
                    if line.strip() and not line.lstrip().startswith("#"):
                        shell.run(line)
        ran[document] = root
    return ran[document]


@pytest.mark.parametrize("document", [
    pytest.param(d, id=str(d.relative_to(ROOT)), marks=_slow(d))
    for d in sorted({b.document for b in ALL if b.language == "sh"})
])  # fmt: skip
def test_sh_blocks_run(document, ran, request, tmp_path_factory):
    _ran(document, ran, request, tmp_path_factory)


@pytest.mark.parametrize("block", [_param(b) for b in ALL if b.language == "python"])
def test_python_blocks_run(block: Block, ran, request, tmp_path_factory):
    run_kept(block.code, cwd=_ran(block.document, ran, request, tmp_path_factory))


@pytest.mark.parametrize("block", [_param(b) for b in ALL if b.language == "json"])
def test_json_blocks_are_indexes_shardpack_reads(block: Block, tmp_path):
    from shardpack.index import load_index

    (tmp_path / "index.json").write_text(block.code)
    assert load_index(tmp_path).name == json.loads(block.code)["name"]


def _commands(block: Block) -> list[list[str]]:
    """The arguments of each `shardpack` line of a block."""
    lines = block.code.replace("\\\n", " ").splitlines()
    return [shlex.split(line.split(" #")[0])[1:] for line in lines if line.startswith("shardpack ")]


@pytest.mark.parametrize("block", [_param(b) for b in ALL if b.language == "text"])
def test_text_blocks_parse_as_commands(block: Block):
    """Each `shardpack` line is one the CLI accepts (parsed, not run); each `python -m` line
    names a module of the checkout."""
    import typer

    from shardpack.cli import app

    group = typer.main.get_command(app)
    for args in _commands(block):
        command = group.commands.get(args[0])
        assert command is not None, f"{block.id}: no command {args[0]!r}"
        try:
            command.make_context(args[0], args[1:])
        except Exception as e:  # click's UsageError, from the click typer bundles or not
            raise AssertionError(f"{block.id}: shardpack {shlex.join(args)}: {e}") from None
    for module in re.findall(r"python -m ([\w.]+)", block.code):
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), (block.id, module)


def test_the_readme_is_an_entrance():
    """At most 250 lines; its quick start at most 15, before any other section."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    sections = text.split("\n## ")
    assert sections[1].startswith("Quick start\n")
    assert len(sections[1].strip().splitlines()[1:]) <= 15


def test_the_readme_s_summary_is_what_pack_prints(tmp_path: Path):
    """The summary under "Check what you packed" is pack's, line for line, numbers and the
    index's folder aside: it had lost the `order:` line."""
    from typer.testing import CliRunner

    from shardpack.cli import app
    from shardpack.demo import make_sample

    text = (ROOT / "README.md").read_text()
    command = next(line for line in text.splitlines() if line.startswith("shardpack pack demo-out"))
    shown = "packed " + text.split("```text\npacked ", 1)[1].split("```")[0]
    make_sample(tmp_path / "demo-out" / "sample", per_class=10)
    args = [str(tmp_path / a) if "/" in a else a for a in shlex.split(command)[1:]]  # SRC, OUT
    result = CliRunner().invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output

    def shape(summary: str) -> list[str]:
        lines = [re.sub(r"^index: .*/", "index: /", " ".join(line.split()))
                 for line in summary.strip().splitlines()]  # fmt: skip
        sizes = [re.sub(r"[\d.]+ (B|KiB|MiB|GiB)\b", "SIZE", line) for line in lines]
        return [re.sub(r"\d[\d,.]*", "#", line) for line in sizes]

    assert shape(result.output) == shape(shown)
