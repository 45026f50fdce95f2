"""Where a Hugging Face dataset's Parquet files are, and the split of each, as the `datasets`
library assigns them (datasets/data_files.py): a README.md's YAML `configs` first; else
data/{split}-NNNNN-of-NNNNN*.parquet; else folders named for a split (train/, validation/,
test/ and their synonyms); else one folder of a config laid out as the Hub lays out each
({config}/{split}/*.parquet, {config}/{split}-NNNNN-of-NNNNN.parquet), where `datasets`
would mix several configs' files into one split (several: refused, naming them); else file
names starting with a split's word; else every file is `train`. Files are looked for in SRC,
SRC/data and a config folder's split folders, so that telling SRC apart costs a few listings
(of names only: an image dataset's class folders are listed here before its scan).

No pyarrow here: recognising SRC and `pack --help` stay light.
"""

from __future__ import annotations

import re

from shardpack.cardheader import MAX_CARD_BYTES, load_header, split_card
from shardpack.errors import SourceError, printable
from shardpack.sources.folder import few
from shardpack.storage import Storage
from shardpack.storage.srcfiles import FileTooLarge, RefusedFile

# datasets' SPLIT_KEYWORDS: the split a folder or file name beginning with each word holds.
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
# datasets' NON_WORDS_CHARS: what may stand around the word in a name
_SEP = frozenset("-._ 0123456789")
_SHARDED = r"(?P<split>[^/]+?)-[0-9]{5}-of-[0-9]{5}[^/]*\.parquet"
_SPLIT_NAME = r"[A-Za-z0-9_]+\Z"  # shard file names are {name}-{split}.{...}
SUFFIX = ".parquet"
README = "README.md"
MAX_FILES = 100_000  # Parquet files of one dataset: the Hub's largest hold a few thousand
# A card's configs, each YAML alias counted at every use: a 41 KB card of aliases expands to
# millions of patterns. The Hub's cards hold a few dozen values.
MAX_CARD_VALUES = 100_000
# Distinct wildcard patterns of a card, each matched against every Parquet file found.
MAX_GLOBS = 1_000
# Folders of SRC looked into for a config's layout ({config}/{split}/...): a folder of more is
# a folder dataset's classes (each a listing, a request on a store), not the Hub's configs.
MAX_CONFIGS = 32
# Folders below a pattern's fixed part that a `**` reaches (and that are walked to find out).
MAX_DEPTH = 64
_MAGIC = r"[*?\[]"  # what makes a pattern a glob (fsspec's has_magic)


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
    sharded = _sharded(root, [name for name in files if name.startswith("data/")])
    if sharded:
        return _ordered(sharded)
    by_folder = _split_folders(root)
    if by_folder:
        return _ordered(by_folder)
    configs = _config_folders(root)
    if len(configs) > 1:
        raise SourceError(
            f"{root.path()}: holds configs {few(configs)} in folders of their own "
            "({config}/{split}/*.parquet, as the Hub lays out a dataset's configs) and no "
            "README.md configs naming the default; pass one config's folder as SRC "
            f"({root.path(next(iter(configs)))})"
        )
    if configs:
        return _ordered(*configs.values())
    by_name = {}
    for name in files:
        split = _keyword_split(name.rpartition("/")[2], file=True)
        if split is not None:
            by_name.setdefault(split, []).append(name)
    return _ordered(by_name) if by_name else {"train": files} if files else None


def hub_named(files: dict[str, list[str]]) -> bool:
    """Whether files are named as the Hub names them (data/{split}-NNNNN-of-NNNNN.parquet)."""
    return any(name.startswith("data/") and re.fullmatch(_SHARDED, name.rpartition("/")[2])
               for names in files.values() for name in names)  # fmt: skip


def _ordered(splits: dict[str, list[str]]) -> dict[str, list[str]]:
    """The splits in datasets' order: train, validation, test, then the others sorted."""
    known = [split for split in SPLIT_KEYWORDS if split in splits]
    return {s: splits[s] for s in (*known, *sorted(set(splits) - set(known)))}


def _parquet_files(root: Storage, folder: str) -> list[str]:
    """The Parquet files directly in a folder of root, as names relative to root, sorted."""
    if folder and root.kind(folder) != "dir":
        return []
    try:
        entries = sorted(root.entry_names(folder))
    except OSError:
        return []
    prefix = f"{folder}/" if folder else ""
    # hidden files left out, as datasets leaves them (macOS's ._x.parquet is no Parquet)
    return [f"{prefix}{name}" for name, is_dir in entries if not is_dir
            and name.endswith(SUFFIX) and not name.startswith(".")]  # fmt: skip


def _sharded(root: Storage, names: list[str]) -> dict[str, list[str]]:
    """split -> those of these files named as the Hub names a split's ({split}-NNNNN-of-NNNNN)."""
    sharded: dict[str, list[str]] = {}
    for name in names:
        match = re.fullmatch(_SHARDED, name.rpartition("/")[2])
        if match:
            sharded.setdefault(_checked_split(root, match["split"]), []).append(name)
    return sharded


def _config_folders(root: Storage) -> dict[str, dict[str, list[str]]]:
    """config -> split -> its files (relative to root) of each folder of root laid out as the
    Hub lays out a config: split folders of Parquet files, or files named as _sharded's;
    none where root holds over MAX_CONFIGS folders."""
    try:
        folders = sorted(name for name, is_dir in root.entry_names() if is_dir and name[:1] != ".")
    except OSError:
        return {}
    if len(folders) > MAX_CONFIGS:
        return {}
    found = {}
    for name in folders:
        if not name.startswith("__"):
            config = root.child(name)
            if not _may_hold_parquet(config):  # an image dataset's class folder: listed once
                continue
            splits = _sharded(config, _parquet_files(config, "")) or _split_folders(config)
            if splits:
                found[name] = {split: [f"{name}/{file}" for file in files]
                               for split, files in splits.items()}  # fmt: skip
    return found


def _may_hold_parquet(folder: Storage) -> bool:
    """Whether a folder holds a Parquet file or a folder (of split folders, or a split's)."""
    try:
        return any(is_dir or name.endswith(SUFFIX) for name, is_dir in folder.entry_names())
    except OSError:
        return False


def _split_folders(root: Storage) -> dict[str, list[str]]:
    """split -> the Parquet files of folders in root or root/data named for a split."""
    found: dict[str, list[str]] = {}
    for base in ("", "data"):
        if base and root.kind(base) != "dir":
            continue
        try:
            entries = sorted(root.entry_names(base))
        except OSError:
            continue
        for name, is_dir in entries:
            split = _keyword_split(name, file=False) if is_dir else None
            if split is not None:
                folder = f"{base}/{name}" if base else name
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
    if not re.match(_SPLIT_NAME, split):
        raise SourceError(
            f"{root.path()}: split {split!r} (from its file names) is not a name of ASCII letters, "
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
        text = root.read(README, MAX_CARD_BYTES).decode("utf-8", "replace")
    except FileTooLarge:
        raise SourceError(f"{path}: over {MAX_CARD_BYTES:,} bytes, more than a dataset card "
                          "holds; remove it, or check SRC is a dataset") from None  # fmt: skip
    except (RefusedFile, OSError) as e:
        raise SourceError(f"{path}: cannot read ({e}); remove it or fix its permissions") from None
    header, _, line = split_card(text)
    if header is None:
        return None
    card = load_header(header, path, SourceError, line)
    configs = card.get("configs") if isinstance(card, dict) else None
    if not configs:
        return None
    _bounded(configs, path)
    config = _default_config(configs, path)
    return _resolve(root, _patterns(config.get("data_files"), path), path)


def _bounded(configs: object, path: str) -> None:
    """Refuse configs of more than MAX_CARD_VALUES values, counting a value (a YAML alias's, or
    one inside itself) at every place it appears, as matching them would."""
    count, left = 0, [configs]
    while left:
        value = left.pop()
        count += 1
        if count > MAX_CARD_VALUES:
            raise SourceError(f"{path}: its configs expand to over {MAX_CARD_VALUES:,} values "
                              "(YAML aliases repeat them); write them out plainly")  # fmt: skip
        if isinstance(value, dict):
            left += [*value.keys(), *value.values()]
        elif isinstance(value, list):
            left += value


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
    """Each split's patterns matched, as `datasets` matches them, against the Parquet files
    under the folders they name, walked once ({} when they match none)."""
    globs = {_checked_split(root, split): list(dict.fromkeys(_checked(p, path) for p in found))
             for split, found in patterns.items()}  # fmt: skip
    every = {pattern for found in globs.values() for pattern in found}
    wild = {pattern: _glob(pattern, path) for pattern in every if re.search(_MAGIC, pattern)}
    if len(wild) > MAX_GLOBS:
        raise SourceError(f"{path}: its configs hold {len(wild):,} wildcard patterns (over "
                          f"{MAX_GLOBS:,}); name fewer")  # fmt: skip
    top = _common(every)
    depth = max((_depth(p, top) for p in every), default=0)
    files = set(_walk(root, top, depth, path))
    resolved: dict[str, list[str]] = {}
    for split, found in globs.items():
        matched: set[str] = set()
        for pattern in found:
            regex = wild.get(pattern)
            if regex is None:
                matched.update({pattern} & files)
            else:
                matched.update(f for f in files if regex.match(f) and _requested(f, pattern))
        if matched:
            resolved[split] = sorted(matched)
    return resolved


def _checked(pattern: str, path: str) -> str:
    """A data_files pattern, refused unless it names files under the dataset's folder."""
    pattern = pattern.removeprefix("./")
    if pattern.startswith(("/", "\\")) or "://" in pattern or re.match(r"[A-Za-z]:", pattern):
        raise SourceError(f"{path}: data_files pattern '{printable(pattern)}' names files "
                          "outside the dataset's folder; give paths relative to it")  # fmt: skip
    if ".." in pattern.split("/"):
        raise SourceError(f"{path}: data_files pattern '{printable(pattern)}' climbs out of "
                          "the dataset's folder; fix the YAML header")  # fmt: skip
    return pattern


def _common(patterns: set[str]) -> str:
    """The deepest folder every pattern lies under (its parts before the first wildcard)."""
    fixed = [re.split(_MAGIC, p)[0].split("/")[:-1] for p in patterns]
    common: list[str] = []
    for parts in zip(*fixed, strict=False) if fixed else ():
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return "/".join(common)


def _depth(pattern: str, top: str) -> int:
    """How many folders deep below `top` a pattern reaches (MAX_DEPTH with a `**`)."""
    rest = pattern[len(top) + 1 :] if top else pattern
    return MAX_DEPTH if "**" in rest.split("/") else rest.count("/")


def _glob(pattern: str, path: str) -> re.Pattern:
    """A pattern as fsspec's glob (which `datasets` uses) reads it: `*` and `?` stay within a
    folder, a `**` part spans any number of folders."""
    parts = pattern.split("/")
    regex = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            regex.append(".*" if last else "(?:.+/)?")
            continue
        if "**" in part:
            raise SourceError(f"{path}: data_files pattern '{printable(pattern)}' holds '**' "
                              "inside a name; '**' must be a whole path part")  # fmt: skip
        regex.append("[^/]+" if part == "*" else _part(part))
        regex.append("" if last else "/")
    try:
        return re.compile("".join(regex) + r"\Z", re.S)
    except re.error as e:
        raise SourceError(f"{path}: data_files pattern '{printable(pattern)}' is not a glob "
                          f"({e}); fix the YAML header") from None  # fmt: skip


def _part(part: str) -> str:
    """One path part of a glob as a regular expression (fnmatch's rules, `/` never matched)."""
    regex, i = [], 0
    while i < len(part):
        c, i = part[i], i + 1
        if c == "*":
            regex.append("[^/]*")
        elif c == "?":
            regex.append("[^/]")
        elif c == "[" and (end := part.find("]", i + 1 + (part[i : i + 1] == "!"))) > 0:
            body = re.sub(r"([&~|\\\[])", r"\\\1", part[i:end])
            body = f"^{body[1:]}" if body.startswith("!") else "\\" * body.startswith("^") + body
            regex.append(f"[{body}]")
            i = end + 1
        else:
            regex.append(re.escape(c))
    return "".join(regex)


def _requested(name: str, pattern: str) -> bool:
    """Whether `datasets` keeps a file its pattern matched: one in a hidden folder (.x) or a
    special one (__x) only where the pattern names such a part itself."""
    folders, spelled = name.split("/"), pattern.split("/")
    return sum(p.startswith(".") and set(p) != {"."} for p in folders) == sum(
        p.startswith(".") and set(p) != {"."} for p in spelled
    ) and sum(p.startswith("__") for p in folders[:-1]) == sum(
        p.startswith("__") for p in spelled[:-1]
    )


def _walk(root: Storage, folder: str, depth: int, path: str) -> list[str]:
    """The Parquet files in a folder of root and up to `depth` folders below it, as names
    relative to root (at most MAX_FILES); one folder deeper than MAX_DEPTH is refused."""
    if folder and root.kind(folder) != "dir":
        return []
    names, folders = [], [(folder, 0)]
    while folders:
        below, level = folders.pop()
        try:
            entries = sorted(root.entry_names(below))
        except OSError:
            continue
        for entry, is_dir in entries:
            name = f"{below}/{entry}" if below else entry
            if not is_dir:
                names += [name] if entry.endswith(SUFFIX) else []
            elif level < depth:
                folders.append((name, level + 1))
            elif depth == MAX_DEPTH:
                raise SourceError(f"{root.path(folder)}: holds folders nested over {MAX_DEPTH} "
                                  f"deep, where {path}'s data_files patterns look (a '**'); "
                                  "move them, or name the files' folders in the "
                                  "patterns")  # fmt: skip
        if len(names) > MAX_FILES:
            raise SourceError(f"{path}: its data_files patterns reach over {MAX_FILES:,} "
                              "Parquet files; narrow them")  # fmt: skip
    return names
