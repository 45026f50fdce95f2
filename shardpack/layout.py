"""OUT's layout: the name of every file shardpack writes beside the shards, in one place.

Shard names are each container's (shardpack.containers); everything else a pack, a grow, the
report or a reader finds in OUT is named here.
"""

from __future__ import annotations

# The contract between writer and readers, written last (shardpack.index).
INDEX_NAME = "index.json"
# TFDS metadata, so that tfds.builder_from_directory loads OUT (packing/tfdsmeta).
METADATA_NAMES = ("dataset_info.json", "features.json", "label.labels.txt",
                  "coarse_label.labels.txt")  # fmt: skip
# DALI's index files, one a shard (packing/daliindex), in a folder outside shard globs.
INDEX_FILES_DIR = "idx"
# The Hugging Face dataset card (packing/hubcard) and the HTML data card (read/report).
CARD_NAME = "README.md"
REPORT_NAME = "report.html"
# The pack in Croissant's JSON-LD (packing/croissant).
CROISSANT_NAME = "croissant.json"
# What a grow reads: each shard's content keys (packing/contents) and each file's mtime as it
# was packed (packing/stamps).
CONTENTS_NAME = "contents.json"
STAMPS_NAME = ".shardpack.stamps"
# Every image URL a pack skipped, with why, one JSON object a line (packing/urlfailures).
FAILURES_NAME = "failures.jsonl"
# One run at a time: a file held with flock, or an object created only if absent (storage).
LOCK_NAME = ".shardpack.lock"
# The journal of finished shards a rerun resumes from: one file on a disk, a folder of one
# object a shard (and its header) on an object store, where an object cannot be appended to.
JOURNAL_NAME = ".shardpack.journal"
JOURNAL_FOLDER = JOURNAL_NAME + ".d"
JOURNAL_HEAD = "head.json"
# A run's image URLs fetched by --dedup, kept for its workers until it ends: a hidden folder
# of this name and a random tail (storage/urlspool; in the system's temporary folder for OUT
# on an object store).
FETCHED_PREFIX = ".shardpack.fetched-"


def index_file_name(shard: str) -> str:
    """The DALI index file of one shard, inside OUT: idx/<shard>.idx."""
    return f"{INDEX_FILES_DIR}/{shard}.idx"
