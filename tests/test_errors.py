"""errors.py: what a message says past an item --on-error fail stopped the run at (way_past),
for each shape of reason the scan and the workers give, on real files and a real URL list."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from shardpack import PackOptions, pack
from shardpack.errors import ShardpackError, way_past
from tests import helpers

SKIP = "or pass on_error='skip' to leave it out"


def _closed_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return closed.getsockname()[1]


def _loose_image(tmp_path: Path) -> Path:
    src = helpers.make_tree(tmp_path / "src", {"cat": 1})
    helpers.write_image(src / "loose.jpg", helpers.image(1))
    return src


def _url_list(tmp_path: Path, *rows: str) -> Path:
    src = tmp_path / "urls.csv"
    src.write_text("url,caption\n" + "".join(f"{row},x\n" for row in rows))
    return src


def _corrupt(tmp_path: Path) -> Path:
    src = helpers.make_tree(tmp_path / "src", {"cat": 2})
    (src / "cat" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a JPEG past its magic")
    return src


@pytest.mark.parametrize(
    ("make", "options", "ending"),
    [
        # the scan's refusals, whose reasons say their own fix in words other than "fix"
        (_loose_image, {}, "in no class folder (SRC/<class>/<image>): move it into its class's "
                           f"folder, {SKIP}"),
        (lambda t: _url_list(t, f"http://127.0.0.1:{_closed_port()}/a.png", "file:///etc/hostname"),
         {"path_column": "url"}, "list local and object-store images in a manifest of their "
                                 f"own, {SKIP}"),
        # one that says none: the fix is said once
        (lambda t: _url_list(t, f"http://127.0.0.1:{_closed_port()}/a.png", ""),
         {"path_column": "url"}, f"urls.csv line 3: no image path in column 'url'; fix it, {SKIP}"),
        # a worker's: its own fix (a flag), else the one for its kind (a URL has no file to repair)
        (lambda t: _url_list(t, f"http://127.0.0.1:{_closed_port()}/a.png"),
         {"path_column": "url"}, "is private, loopback or reserved; --allow-private-urls fetches "
                                 f"it (in {{src}}), {SKIP}"),
        (lambda t: _url_list(t, f"http://127.0.0.1:{_closed_port()}/a.png"),
         {"path_column": "url", "allow_private_urls": True, "retries": 0},
         f"connection refused (in {{src}}); try again later, {SKIP}"),
        (lambda t: helpers.make_tree(t / "src", {"cat": 1}), {"max_pixels": 100},
         f"over --max-pixels 100 (in {{src}}); raise max_pixels= if you trust the image, {SKIP}"),
        (_corrupt, {}, f"(in {{src}}); repair or remove the file, {SKIP}"),
    ],
    ids=["own-fix-move", "own-fix-give", "no-fix", "own-fix-flag", "url-transient", "max-pixels",
         "file"],
)  # fmt: skip
def test_a_stop_at_an_item_says_one_fix_after_its_reason(tmp_path, make, options, ending):
    """A reason that named its own fix other than with "; fix" had "; fix it, or pass ..."
    added ("...: move it into its class's folder; fix it, or ..."; a worker's "...; --allow-
    private-urls fetches it (in SRC); repair or remove the file, or ..."): one sentence, one
    fix now, and a URL is not a file to repair."""
    src = make(tmp_path)
    given = PackOptions(workers=1, on_error="fail", **options)
    with pytest.raises(ShardpackError) as stopped:
        pack(src, tmp_path / "out", given)
    said = str(stopped.value)
    root = src if src.is_dir() else src.parent
    assert said.endswith(ending.format(src=root)), said
    assert said.count(" or pass ") == 1 and said.count("fix it") <= 1, said
    assert not (tmp_path / "out" / "index.json").exists()


def test_a_word_of_a_name_in_a_reason_is_no_fix_of_its_own():
    """A fix is a verb and its object after ';' or ':'; a host named like a verb is none (a
    DNS failure of list.example.com would have gone without its fix)."""
    said = way_past("DNS failure: list.example.com: Name or service not known", "fix its row")
    assert said[:2] == ("; ", "fix its row")
    assert way_past("a tar: list.txt: move it to its sample")[0] == ", or "
