"""A Hugging Face dataset card's YAML front matter: where it is (as huggingface_hub's RepoCard
finds it) and what it holds (PyYAML's safe loader, as the Hub reads it), in one line naming
the file where it does not parse. Read by the HF source (its configs) and by the card pack
writes (the user's own keys, kept)."""

from __future__ import annotations

import re

from shardpack.errors import ShardpackError

# The most bytes of a dataset card read. Its header lists every class name (ClassLabel's), so
# a card pack writes grows with them: iNaturalist's 10,000 names of ~80 characters ~1 MB, and
# 100,000 such names ~10 MB. Not index.json's 1 GiB: PyYAML reads ~3 s a MiB, so a stranger's
# card of that size would hold the run for an hour.
MAX_CARD_BYTES = 16 << 20
# huggingface_hub's REGEX_YAML_BLOCK (repocard.py): "---", the header, a line "---".
_FRONT_MATTER = r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))"
# A line break as an editor counts them (and PyYAML's marks, in the header).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_card(text: str) -> tuple[str | None, str, int]:
    """(the YAML header, the Markdown after it, the line of the text the header begins on,
    1-based: the one after "---", which blank lines may precede) of a card's text; (None,
    text, 1) when it has no header."""
    found = re.search(_FRONT_MATTER, text)
    if found is None:
        return None, text, 1
    return found.group(2), text[found.end() :], 1 + len(_LINE_BREAK.findall(found.group(1)))


def opens_header(text: str) -> bool:
    """Whether the text begins as a header does ("---" on its first line), closed or not."""
    return text.lstrip().startswith("---")


def load_header(header: str, path: str, error: type[ShardpackError], line: int) -> object:
    """The header's YAML (or a part of it) as PyYAML's safe loader reads it; `line`: the line of
    the file it begins on (1-based), whence a parse error's line is told.

    Raises:
        `error`: PyYAML is missing, or the header does not parse (its line in the file).
    """
    try:
        import yaml  # PyYAML comes with `datasets` and huggingface_hub, the cards' writers
    except ImportError:
        raise error(f"{path}: reading its YAML header needs PyYAML: pip install pyyaml") from None
    try:
        return yaml.safe_load(header)
    except RecursionError:  # PyYAML composes nested lists and maps by recursion
        raise error(f"{path}: its YAML header nests deeper than Python can parse; fix "
                    "it") from None  # fmt: skip
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)  # its line in the header, from 0
        where = f" on line {mark.line + line}" if mark is not None else ""
        why = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"{path}: its YAML header does not parse ({why}{where}); fix it") from None
