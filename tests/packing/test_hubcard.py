"""packing/hubcard.py: the dataset card's YAML front matter."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardpack.cardheader import MAX_CARD_BYTES
from shardpack.errors import OutputError
from shardpack.options import PackOptions
from shardpack.packing.hubcard import _UNSAFE, BEGIN, END, MARKER, UsersCard, users_card
from shardpack.packing.packer import pack
from shardpack.storage import storage_at
from tests.helpers import lazy_import, make_tree

hub = lazy_import("huggingface_hub")

# YAML 1.1's printable characters (what PyYAML, and so the Hub, reads), less the line breaks a
# double-quoted scalar folds (NEL is outside these ranges already).
_PRINTABLE = ((0x09, 0x09), (0x0A, 0x0A), (0x0D, 0x0D), (0x20, 0x7E), (0xA0, 0x2027),
              (0x202A, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x10FFFF))  # fmt: skip


def test_the_card_escapes_exactly_what_yaml_cannot_print():
    """Every character at and beside each edge of the printable ranges (and a stride through
    them) is escaped if and only if it lies outside them."""
    edges = {c + d for low, high in _PRINTABLE for c in (low, high) for d in (-1, 0, 1)}
    for code in sorted(edges | set(range(0, 0x110000, 997))):
        if 0 <= code <= 0x10FFFF:
            printable = any(low <= code <= high for low, high in _PRINTABLE)
            assert bool(_UNSAFE.match(chr(code))) is not printable, hex(code)


def test_the_users_keys_are_kept_as_written_and_pack_s_own_dropped(tmp_path: Path):
    """Comments, a list at the key's own indent, a quoted key of pack's, CRLF line ends; the
    text around the marks."""
    users = ('# our card\r\nlicense: mit  # see LICENSE\r\ntags:\r\n- pets\r\n-   "cats"\r\n'
             "pretty_name: >\r\n  Pets\r\n")  # fmt: skip
    ours = '"dataset_info":\r\n  splits: []\r\nconfigs:\r\n- config_name: x\r\n'
    body = f"mine\r\n{BEGIN}\r\n# old summary\r\n{END}\r\n\r\nalso mine\r\n"
    (tmp_path / "README.md").write_bytes(f"---\r\n{MARKER}\r\n{users}{ours}---\r\n{body}".encode())
    kept = users_card(storage_at(tmp_path))
    assert kept.header == users.rstrip("\r\n")
    assert (kept.before, kept.after) == ("mine", "also mine")


def test_a_card_of_an_earlier_shardpack_is_all_its_own(tmp_path: Path):
    """Its marker line, and no marks around its summary: nothing of it is the user's."""
    old = "# written by shardpack pack, which rewrites it at each run"
    text = f"---\n{old}\ndataset_info:\n  download_size: 1\n---\n\n# cats\n\nPacked by shardpack.\n"
    (tmp_path / "README.md").write_text(text)
    assert users_card(storage_at(tmp_path)) == UsersCard()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("---\nlicense: mit\ntags:\n- a\n- [b\npretty_name: x\n---\nprose\n", 6),
        # blank lines before "---" (huggingface_hub finds the header after them)
        ("\n \n---\nlicense: mit\ntags: [a\n---\nprose\n", 5),
        ("\r\n---\r\nlicense: mit\r\ntags: [a\r\n---\r\n", 4),
        # the whole header parses; a key parsed alone does not (its alias is another key's
        # anchor): its line is the file's, not counted from the key's comment
        ("---\nbase: &b\n  x: 1\n\n# ours\nother:\n  <<: *b\n  y: 2\nmore: 1\n---\n", 7),
        ("\n---\r\nlicense: mit\r\nbase: &b\r\n  x: 1\r\n# c\r\nother: *b\r\n---\r\n", 7),
    ],
)  # fmt: skip
def test_a_header_that_does_not_parse_names_its_line_in_the_file(tmp_path: Path, text, line):
    """The line an editor shows (1-based), whatever precedes the header or the key."""
    (tmp_path / "README.md").write_bytes(text.encode())
    with pytest.raises(OutputError) as error:
        users_card(storage_at(tmp_path))
    said = str(error.value)
    assert said.startswith(f"{tmp_path / 'README.md'}: its YAML header does not parse (")
    assert said.endswith(f" on line {line}); fix it") and "\n" not in said, said


@pytest.mark.parametrize(
    "nested", ["[" * 50_000 + "]" * 50_000, "{a: " * 50_000 + "1" + "}" * 50_000]
)
def test_a_header_nested_past_python_s_depth_is_refused_in_one_line(tmp_path: Path, nested):
    """PyYAML composes nesting by recursion: 50,000 levels (100 KB, a small card) ended a grow
    in a RecursionError's traceback."""
    (tmp_path / "README.md").write_text(f"---\nlicense: mit\nmine: {nested}\n---\nprose\n")
    with pytest.raises(OutputError) as error:
        users_card(storage_at(tmp_path))
    assert str(error.value) == (f"{tmp_path / 'README.md'}: its YAML header nests deeper than "
                                "Python can parse; fix it")  # fmt: skip


def test_a_card_over_the_limit_is_refused_unread(tmp_path: Path):
    """A stranger's card of a GiB would hold a run for an hour in PyYAML: over MAX_CARD_BYTES
    (16 MiB, 100,000 long class names' room) it is refused by its size, not a byte read."""
    with open(tmp_path / "README.md", "wb") as f:
        f.truncate(MAX_CARD_BYTES + 1)  # sparse: its size alone
    with pytest.raises(OutputError) as error:
        users_card(storage_at(tmp_path))
    assert str(error.value).startswith(f"{tmp_path / 'README.md'}: over 16,777,216 bytes")
    assert (tmp_path / "README.md").stat().st_size == MAX_CARD_BYTES + 1  # left as it is


def test_pack_s_own_card_of_over_a_mib_grows(tmp_path: Path):
    """Thousands of long class names (iNaturalist's are ~80 characters) make pack's own card
    over a MiB: the next run reads it back, not refused as more than a card holds (with the
    user's keys, datasets and --source hf: tests/containers/test_parquet.py, make test-long)."""
    names = tuple(f"{i:04d}_Plantae" + ("_x" * 500 if i % 7 else "") for i in range(1300))
    src, out = make_tree(tmp_path / "src", {names[0]: 2, names[7]: 2}), tmp_path / "out"
    pack(src, out, PackOptions(format="parquet", workers=1, classes=names))
    assert (out / "README.md").stat().st_size > 1 << 20
    make_tree(src, {names[1295]: 1}, seed=50)
    grown = pack(src, out, PackOptions(format="parquet", workers=1, grow="append"))
    assert grown.num_records == 5
    assert users_card(storage_at(out)) == UsersCard()  # all pack's: nothing of the user's


def test_a_size_category_the_records_outgrew_is_said(tmp_path: Path):
    """size_categories is the user's key, kept as written: a run whose records it no longer
    holds (a grow past 1,000, a README.md written before the first pack) says the right one."""
    src, out = make_tree(tmp_path / "src", {"cat": 3, "dog": 3}), tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("---\nlicense: mit\nsize_categories: 1K<n<10K\n---\nOurs.\n")
    said = f"{out / 'README.md'}: its size_categories says 1K<n<10K, but the dataset holds "
    assert (
        f"{said}6 records: set it to n<1K"
        in pack(src, out, PackOptions(format="parquet", workers=1)).notes
    )
    make_tree(src, {"emu": 1}, seed=9)
    grown = pack(src, out, PackOptions(format="parquet", workers=1, grow="append"))
    assert f"{said}7 records: set it to n<1K" in grown.notes
    card = hub.DatasetCard.load(out / "README.md")
    assert card.data.size_categories == "1K<n<10K"  # kept as written
    card.data.size_categories = ["n<1K"]
    card.save(out / "README.md")
    make_tree(src, {"fox": 1}, seed=10)
    grown = pack(src, out, PackOptions(format="parquet", workers=1, grow="append"))
    assert not [note for note in grown.notes if "size_categories" in note]
