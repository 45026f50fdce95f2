"""Fixtures that several test modules share, and the fast tier's skip of heavy and slow tests."""

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# Their asserts report the values compared, as a test module's do.
pytest.register_assert_rewrite("tests.helpers", "tests.s3server")

from tests.helpers import (  # noqa: E402
    OBJECT_ROWS,
    TIER,
    check_indexes_round_trip,
    make_tree,
    pack_objects,
    packed_tree,
    warm_reader,
)
from tests.s3server import s3, s3_server  # noqa: E402, F401

FAST = TIER == "fast"
# albumentations (the boxes' oracle) asks the package index for a newer version of itself as it
# is imported, unless told not to: no test reaches past loopback
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")


def pytest_configure(config: pytest.Config) -> None:
    """Tests send Ctrl-C to the runs they start, which inherit what SIGINT does here: a suite
    started as a shell's background job (`make test &`) has it ignored, and so would they."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# The test files that load TensorFlow (tf.data, TFDS's builders) into the test process: `make
# test` runs them all on one worker (pytest_xdist_make_scheduler below), so that one process
# pays its import (~10 s of CPU on 2 slow cores), not every worker. A file missing here costs
# time, not a result.
IN_PROCESS_TENSORFLOW = frozenset({
    "tests/containers/test_formats.py", "tests/containers/test_tfrecord.py",
    "tests/packing/test_features.py", "tests/packing/test_grow.py",
    "tests/packing/test_packer.py", "tests/read/test_changed.py", "tests/read/test_stream.py",
    "tests/read/test_tfds.py", "tests/sources/test_hf.py", "tests/sources/test_manifest.py",
    "tests/sources/test_splittree.py", "tests/test_images.py", "tests/test_transforms.py",
})  # fmt: skip
# Of those, the file whose read-backs first ask the reading Python for what warm_reader has it
# load: run last of them, so that it has loaded that by then.
TENSORFLOW_LAST = "tests/containers/test_formats.py"
# The test files whose oracles are slow imports (albumentations ~2.2 s of CPU, which takes scipy
# with it, datasets ~0.8 s, mlcroissant ~0.6 s: `python -c 'import numpy, cv2, X'` less
# numpy's and cv2's): `make test` and `make test-fast` run them on one worker (_unit), which pays
# each once, not once a worker. A file missing here costs time, not a result.
SHARED_ORACLES = frozenset({
    "tests/containers/test_parquet.py", "tests/hostile/test_labels.py",
    "tests/packing/test_boxes.py", "tests/sources/test_coco.py",
})  # fmt: skip
# The test files that take longest (wall time on `make test`'s workers, waits included: a file
# waiting on retries or a server ties up its worker as one that computes does), longest first,
# run first after those (`--no-loadscope-reorder`: a worker takes the next file in collection
# order): one of these taken last would run alone while the other cores idle. A unit of
# several files (_unit) is named by one of them: test_parquet.py for SHARED_ORACLES.
LONGEST_FIRST = (
    "tests/storage/test_remote.py", "tests/containers/test_parquet.py",
    "tests/packing/test_reliability.py", "tests/storage/test_fetch.py",
    "tests/hostile/test_src.py", "tests/hostile/test_out.py",
    "tests/cli/test_cli.py", "tests/test_torch.py", "tests/docs/test_docs.py",
    "tests/sources/test_tfdsdir_tars.py", "tests/read/test_random_access.py",
    "tests/packing/test_duplicates.py", "tests/packing/test_cluster.py",
    "tests/packing/test_grow_faults.py",
)  # fmt: skip


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def _unit(path: str) -> str:
    """What one worker runs together: a file, every file that loads TensorFlow (not in the
    fast tier, which skips their TensorFlow tests), every seam test (they walk the same
    parsed package: helpers.walked, once a process), or the files of SHARED_ORACLES."""
    if path.startswith("tests/seams/"):
        return "seams"
    if path in SHARED_ORACLES:
        return "oracles"
    return "tensorflow" if path in IN_PROCESS_TENSORFLOW and not FAST else path


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile`, but with the units `_unit` groups."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid.split("::")[0])

    return ByFile(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """As a pytest-xdist worker starts the files that load TensorFlow: the run's reading Python
    starts loading what their read-backs ask of it (warm_reader) while this process loads its
    own TensorFlow, not after (the first read-back waited ~13 s for it on `make test`'s 2
    cores). Not in a run of a few files (`-n 0`): they may ask it nothing."""
    if "PYTEST_XDIST_WORKER" in os.environ and _unit(_file(item)) == "tensorflow":
        warm_reader()


def _first(item: pytest.Item) -> int:
    path = _file(item)
    if _unit(path) == "tensorflow":
        return -1 if path == TENSORFLOW_LAST else -2
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the files that load TensorFlow (TENSORFLOW_LAST last of them), then the longest,
    first (a stable sort: each file's tests keep their order), each file's tests on one worker,
    and skip, saying why, the tests a tier leaves out: `make test` those marked long (the same
    fault shown again on another container or store), `make test-fast` those marked heavy or
    slow too (and those on the S3 server); `make test-long` runs them all."""
    items.sort(key=_first)
    if TIER == "long":
        return
    long = pytest.mark.skip(reason="shows again what another test shows: run `make test-long`")
    heavy = pytest.mark.skip(reason="needs TensorFlow, TFDS, torch or DALI: run `make test`")
    slow = pytest.mark.skip(
        reason="starts a server, a cluster or a browser, stops processes, or takes seconds of "
        "CPU: run `make test`"
    )
    for item in items:
        if item.get_closest_marker("long"):
            item.add_marker(long)
        elif not FAST:
            continue
        elif item.get_closest_marker("heavy"):
            item.add_marker(heavy)
        elif item.get_closest_marker("slow") or "s3_server" in getattr(item, "fixturenames", ()):
            item.add_marker(slow)


@pytest.fixture(scope="session")
def shared_tree(tmp_path_factory) -> Callable[[dict[str, int]], Path]:
    """A factory: shared_tree({"a": 5, "b": 4}) is a folder `src` of class folders of drawn
    JPEGs, made once a session for those counts; shared, so a test that changes it copies it."""
    made: dict[tuple, Path] = {}

    def make(classes: dict[str, int]) -> Path:
        key = tuple(classes.items())
        if key not in made:
            made[key] = make_tree(tmp_path_factory.mktemp("tree") / "src", classes)
        return made[key]

    return make


@pytest.fixture(scope="session")
def shared_pack(tmp_path_factory) -> Callable[..., Path]:
    """A factory: shared_pack({"a": 5, "b": 4}, shards=3) is OUT of that tree packed with those
    PackOptions fields, once a session for those arguments; shared as shared_tree's folders."""
    made: dict[tuple, Path] = {}

    def make(classes: dict[str, int], **options) -> Path:
        key = (tuple(classes.items()), tuple(sorted(options.items())))
        if key not in made:
            made[key] = packed_tree(tmp_path_factory.mktemp("packed"), classes, **options)
        return made[key]

    return make


@pytest.fixture(scope="session")
def objects_out(tmp_path_factory) -> Path:
    """OBJECT_ROWS packed once: one shard, records in their order, keyed objects.parquet:<row>;
    shared, so a test that changes it copies it."""
    return pack_objects(tmp_path_factory.mktemp("objects"), OBJECT_ROWS)


@pytest.fixture(autouse=True)
def indexes_round_trip(request: pytest.FixtureRequest):
    """After each test that has a tmp_path: every index.json pack wrote in it reads back into
    an Index (shardpack/index.py) that writes the same bytes."""
    root = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if root is not None:
        check_indexes_round_trip(root)


# What the fast tier's machine need not have (`make test-fast` installs the light extras only)
HEAVY_MODULES = ("tensorflow", "tensorflow_datasets", "torch", "nvidia.dali")


@pytest.fixture(autouse=True)
def fast_tier_stays_light():
    """In `make test-fast`: a test that imports TensorFlow, TFDS, torch or DALI without the heavy
    mark fails, named, here (it would fail on a machine with the light extras only)."""
    before = {name for name in HEAVY_MODULES if name in sys.modules}
    yield
    if FAST and (met := [n for n in HEAVY_MODULES if n in sys.modules and n not in before]):
        pytest.fail(f"the fast tier imported {', '.join(met)}: mark the test heavy")
