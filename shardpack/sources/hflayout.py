"""Where a Hugging Face dataset's Parquet files are, and the split of each, as the `datasets`
library assigns them (datasets/data_files.py): a README.md's YAML `configs` first; else
data/{split}-NNNNN-of-NNNNN*.parquet; else folders named for a split (train/, validation/,
test/ and their synonyms); else file names starting with one; else every file is `train`.
Files are looked for in SRC and SRC/data only, so that telling SRC apart costs a few listings.

No pyarrow here: recognising SRC and `pack --help` stay light.
"""

from __future__ import annotations

import fnmatch
import re

from shardpack.errors import SourceError
from shardpack.storage import Storage

# datasets' SPLIT_KEYWORDS: the split a folder or file name beginning with each word holds.
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
# datasets' NON_WORDS_CHARS: what may stand around the word in a name
_SEP = frozenset("-._ 0123456789")
_SHARDED = re.compile(r"(?P<split>[^/]+?)-[0-9]{5}-of-[0-9]{5}[^/]*\.parquet")
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+\Z")  # shard file names are {name}-{split}.{...}
SUFFIX = ".parquet"
README = "README.md"
MAX_README_BYTES = 1 << 20  # a dataset card; its YAML header is a few KB
MAX_FILES = 100_000  # Parquet files of one dataset: the Hub's largest hold a few thousand


def data_files(root: Storage, required: bool) -> dict[str, list[str]] | None:
    """split -> its Parquet files (names relative to root, in order); None when there are none.

    Raises:
        SourceError: a split name is not usable, or (when `required`: SRC must be a Hugging
            Face dataset) README.md's configs cannot be read.
    """
    try:
        configured = _configured(root)
    except SourceError:
        if required:
            raise
        configured = None  # a card of another kind of dataset (--source hf would say why)
    if configured is not None:  # configs naming no Parquet file: an ImageFolder's card
        return configured or None
    files = _parquet_files(root, "") + _parquet_files(root, "data")
    sharded: dict[str, list[str]] = {}
    for name in files:
        match = _SHARDED.fullmatch(name.rpartition("/")[2])
        if name.startswith("data/") and match:
            sharded.setdefault(_checked_split(root, match["split"]), []).append(name)
    if sharded:
        return _ordered(sharded)
    by_folder = _split_folders(root)
    if by_folder:
        return _ordered(by_folder)
    by_name = {}
    for name in files:
        split = _keyword_split(name.rpartition("/")[2], file=True)
        if split is not None:
            by_name.setdefault(split, []).append(name)
    return _ordered(by_name) if by_name else {"train": files} if files else None


def _ordered(splits: dict[str, list[str]]) -> dict[str, list[str]]:
    """The splits in datasets' order: train, validation, test, then the others sorted."""
    known = [split for split in SPLIT_KEYWORDS if split in splits]
    return {s: splits[s] for s in (*known, *sorted(set(splits) - set(known)))}


def _parquet_files(root: Storage, folder: str) -> list[str]:
    """The Parquet files directly in a folder of root, as names relative to root, sorted."""
    if folder and root.kind(folder) != "dir":
        return []
    try:
        entries = root.listdir(folder)
    except OSError:
        return []
    prefix = f"{folder}/" if folder else ""
    return [f"{prefix}{e.name}" for e in entries if not e.is_dir and e.name.endswith(SUFFIX)]


def _split_folders(root: Storage) -> dict[str, list[str]]:
    """split -> the Parquet files of folders in root or root/data named for a split."""
    found: dict[str, list[str]] = {}
    for base in ("", "data"):
        if base and root.kind(base) != "dir":
            continue
        try:
            entries = root.listdir(base)
        except OSError:
            continue
        for entry in entries:
            split = _keyword_split(entry.name, file=False) if entry.is_dir else None
            if split is not None:
                folder = f"{base}/{entry.name}" if base else entry.name
                found.setdefault(split, []).extend(_parquet_files(root, folder))
    return {split: sorted(files) for split, files in found.items() if files}


def _keyword_split(name: str, file: bool) -> str | None:
    """The split a folder or file name says (a keyword, alone or followed by a separator)."""
    for split, words in SPLIT_KEYWORDS.items():
        for word in words:
            rest = name[len(word) :]
            if name.startswith(word) and ((not rest and not file) or rest[:1] in _SEP):
                return split
            if file and re.search(rf"[-._ 0-9]{word}[-._ 0-9]", name):
                return split
    return None


def _checked_split(root: Storage, split: str) -> str:
    if not _SPLIT_NAME.match(split):
        raise SourceError(
            f"{root.path()}: split {split!r} (from its file names) is not a name of letters, "
            "digits and underscores; rename the files"
        )
    return split


# ---- README.md configs -----------------------------------------------------------------------


def _configured(root: Storage) -> dict[str, list[str]] | None:
    """The Parquet files of the default config of README.md's YAML header, if it has `configs`
    ({} when they name none)."""
    if root.kind(README) != "file":
        return None
    path = root.path(README)
    try:
        text = root.read(README, MAX_README_BYTES).decode("utf-8", "replace")
    except OSError as e:
        raise SourceError(f"{path}: cannot read ({e}); remove it or fix its permissions") from None
    if not text.startswith("---"):
        return None
    header = text[3:].partition("\n---")[0]
    try:
        import yaml  # PyYAML comes with `datasets`, the one writer of these cards
    except ImportError:
        raise SourceError(f"{path}: reading its configs needs PyYAML: pip install pyyaml") from None
    try:
        card = yaml.safe_load(header)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)  # its line in the header: the file's, as "---"
        where = f" on line {mark.line + 1}" if mark is not None else ""  # starts both
        why = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SourceError(f"{path}: its YAML header does not parse ({why}{where}); fix "
                          "it") from None  # fmt: skip
    configs = card.get("configs") if isinstance(card, dict) else None
    if not configs:
        return None
    config = _default_config(configs, path)
    return _resolve(root, _patterns(config.get("data_files"), path), path)


def _default_config(configs: object, path: str) -> dict:
    """The config `datasets` loads without a name: `default: true`, else "default", else the
    only one."""
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise SourceError(f"{path}: 'configs' is not a list of configs; fix the YAML header")
    marked = [c for c in configs if c.get("default") is True]
    named = [c for c in configs if c.get("config_name") == "default"]
    chosen = marked or named or (configs if len(configs) == 1 else [])
    if not chosen:
        names = ", ".join(str(c.get("config_name")) for c in configs)
        raise SourceError(f"{path}: holds configs {names} and none is the default; pass the "
                          "folder or Parquet file of the one to pack as SRC")  # fmt: skip
    return chosen[0]


def _patterns(data_files: object, path: str) -> dict[str, list[str]]:
    """split -> glob patterns, from any of the forms `data_files` takes."""
    if isinstance(data_files, str):
        return {"train": [data_files]}
    if isinstance(data_files, list) and all(isinstance(p, str) for p in data_files):
        return {"train": list(data_files)}
    if isinstance(data_files, dict):  # split -> pattern(s): datasets reads this too
        data_files = [{"split": k, "path": v} for k, v in data_files.items()]
    patterns: dict[str, list[str]] = {}
    for entry in data_files if isinstance(data_files, list) else [None]:
        paths = entry.get("path") if isinstance(entry, dict) else None
        paths = [paths] if isinstance(paths, str) else paths
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise SourceError(f"{path}: a config's data_files is not split and path entries; "
                              "fix the YAML header")  # fmt: skip
        patterns.setdefault(str(entry.get("split", "train")), []).extend(paths)
    return patterns


def _resolve(root: Storage, patterns: dict[str, list[str]], path: str) -> dict[str, list[str]]:
    """Each split's patterns matched against the Parquet files below their fixed folders ({}
    when they match none)."""
    resolved: dict[str, list[str]] = {}
    for split, globs in patterns.items():
        split = _checked_split(root, split)
        files: set[str] = set()
        for pattern in globs:
            pattern = pattern.removeprefix("./")
            if ".." in pattern.split("/"):
                raise SourceError(f"{path}: data_files pattern {pattern!r} climbs out of the "
                                  "dataset's folder; fix the YAML header")  # fmt: skip
            fixed = re.split(r"[*?\[]", pattern)[0].rpartition("/")[0]
            for name in _walk(root, fixed, path):
                full = f"{fixed}/{name}" if fixed else name
                if fnmatch.fnmatchcase(full, pattern):
                    files.add(full)
        if files:
            resolved[split] = sorted(files)
    return resolved


def _walk(root: Storage, folder: str, path: str) -> list[str]:
    """The Parquet files below a folder of root (at most MAX_FILES)."""
    if folder and root.kind(folder) != "dir":
        return []
    names = [entry.name for entry in root.walk(folder) if entry.name.endswith(SUFFIX)]
    if len(names) > MAX_FILES:
        raise SourceError(f"{path}: a data_files pattern reaches {len(names)} Parquet files "
                          f"(over {MAX_FILES}); narrow it")  # fmt: skip
    return names
