# Everything shardpack needs is installed here, into .venv, at the versions constraints.txt names;
# nothing relies on what is on the machine.
# Three stamps: `make demo` installs the runtime only; `make test-fast` adds the light test extras
# (no TensorFlow, torch or DALI; enough for lint); `make test` (and bench) adds all the test extras
# (4.6 GB).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
TESTDEPS := $(VENV)/.installed-test
TESTLIGHT := $(VENV)/.installed-test-light
# The data card's test opens it in a real browser: Debian's chromium (headless), from apt.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install install-test constraints demo test test-fast test-long bench bench-long peers peers-img2dataset lint clean

install: $(RUNTIME)

install-test: $(TESTDEPS)

$(RUNTIME): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e .
	touch $@

$(TESTLIGHT): $(RUNTIME)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test-light]'
	touch $@

# The one system package: `make test` installs Debian's chromium with apt (sudo where not root);
# the quick tier skips the browser test without it.
$(TESTDEPS): $(TESTLIGHT)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	command -v chromium >/dev/null || ($(SUDO) apt-get update && $(SUDO) apt-get install -y chromium)
	touch $@

# constraints.txt: the versions every install above takes, written from a .venv that passes `make
# test` (after a deliberate upgrade: pip install -U there, make test, then this).
VENV_PYTHON = $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
constraints: $(TESTDEPS)
	{ sed -n '/^#/p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable \
	  | grep -v '^torch==' | sed 's/$$/; python_version == "$(VENV_PYTHON)"/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

demo: $(RUNTIME)
	$(BIN)/shardpack demo demo-out
	$(BIN)/shardpack verify demo-out/shards

# The tests on every core and two more (pytest-xdist), a file to a worker (tests/conftest.py
# keeps the files that load TensorFlow on one), in the order conftest sorts them: a file's
# module fixtures are made once, and its tests share them. The extra workers fill the time the
# others wait on servers, timers and child processes (2 cores: make test 2:50 against 3:07 with
# 2 workers; 2:42 and 2:55 with 4 against 2:50 and 3:02 with 3, paired in a slow hour).
# TEST_WORKERS=0 runs them in this one process. They start hundreds of interpreters: let those
# reuse compiled bytecode even where the shell says not to.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 2 )))
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n $(TEST_WORKERS) \
	--dist loadfile --no-loadscope-reorder

test: $(TESTDEPS)
	$(PYTEST)

# The quick tier: every test but those marked heavy (TensorFlow, TFDS, torch, DALI) or slow (a Dask
# cluster, the S3 server, signals); those are skipped, with the reason.
test-fast: $(TESTLIGHT)
	SHARDPACK_TEST_TIER=fast $(PYTEST)

# Everything `make test` runs and the tests marked long: a fault already shown for one container,
# store or signal, shown again for the others (real kills, each a pack of its own: seconds each).
test-long: $(TESTDEPS)
	SHARDPACK_TEST_TIER=long $(PYTEST)

# img2dataset, for benchmarks.urls' side-by-side run, in a venv of its own: its pins (pyarrow,
# albumentations, fire, ...) conflict with ours. By name from the package index, as pip finds it.
IMG2DATASET_VENV := .venv-img2dataset
PEERS_IMG2DATASET := $(IMG2DATASET_VENV)/.installed

peers-img2dataset: $(PEERS_IMG2DATASET)

$(PEERS_IMG2DATASET):
	test -x $(IMG2DATASET_VENV)/bin/python || $(PYTHON) -m venv $(IMG2DATASET_VENV)
	$(IMG2DATASET_VENV)/bin/python -m pip install --quiet img2dataset==1.47.0
	touch $@

# The PyTorch readers benchmarks/torch_read.py compares with, in a venv of their own: both pull
# torchvision, hence torch 2.14 with CUDA, and MosaicML pins numpy < 2.2, where the test venv
# holds torch 2.13 (CPU) and numpy 2.4. shardpack (its runtime) goes in too: it decodes for them.
PEERS := .venv-peers/.installed

peers: $(PEERS)

$(PEERS): pyproject.toml
	test -x .venv-peers/bin/python || $(PYTHON) -m venv .venv-peers
	.venv-peers/bin/python -m pip install --quiet mosaicml-streaming litdata .
	touch $@

# The last row is shardpack beside img2dataset on 2,000 URLs at 50 and 200 ms a response,
# passthrough and center-cropped to 256 px (#36's bar: 8 whole runs, about 1.5 min on 2 cores
# at load 6; img2dataset's are most of it).
bench: $(TESTDEPS) $(PEERS) $(PEERS_IMG2DATASET)
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.read_speed
	$(BIN)/python -m benchmarks.torch_read
	$(BIN)/python -m benchmarks.storage
	$(BIN)/python -m benchmarks.storage --manifest 1000 --latency 0.02 \
		--json benchmarks/results/manifest-store-2cpu.json
	$(BIN)/python -m benchmarks.reduced
	$(BIN)/python -m benchmarks.convert
	$(BIN)/python -m benchmarks.hub_parquet photos-6000
	$(BIN)/python -m benchmarks.dedup
	$(BIN)/python -m benchmarks.listing --pack
	$(BIN)/python -m benchmarks.near_distance
	$(BIN)/python -m benchmarks.peer_writers photos-6000
	$(BIN)/python -m benchmarks.run photos-6000 --encode keep --cold --workers 1,2 --no-extras \
		--contenders shardpack,baseline-keep,io-ceiling --json benchmarks/results/cold-2cpu.json
	$(BIN)/python -m benchmarks.urls --img2dataset -- --per-host 128
	$(BIN)/python -m benchmarks.urls --retry-run -- --per-host 128

# The scaling run (photos-large to PNG, >= 60 s of one core's work, every worker count), the
# listing-scale run (1,000,000 files), the manifest scan at 100k and 1M rows (CSV, JSONL,
# Parquet), a whole streamed pack of 100k and 1M tiny JPEGs (~5 min, and ~4 GB of files made
# once) and --append of 1,000 files to 1,000,000 records: too long for `make bench`. The
# side-by-side with img2dataset on 2,000 URLs runs here too, as in `make bench`, and the retry
# run with a 6,000-URL list besides (a list of 6 shards: Retry-After's second paid a shard).
bench-long: $(TESTDEPS) $(PEERS_IMG2DATASET)
	$(BIN)/python -m benchmarks.run --plan long --repeat 1 --no-extras $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.manifest_scale --scan
	$(BIN)/python -m benchmarks.manifest_scale --urls --rows 1000000,10000000 --formats jsonl,parquet
	$(BIN)/python -m benchmarks.manifest_scale --urls --stream --rows 1000000,10000000 --formats jsonl,parquet
	$(BIN)/python -m benchmarks.manifest_scale --pack --rows 100000,1000000 --formats jsonl
	$(BIN)/python -m benchmarks.grow --files 1000000 --new 1000
	$(BIN)/python -m benchmarks.urls --img2dataset -- --per-host 128
	$(BIN)/python -m benchmarks.urls --retry-run --long 6000 -- --per-host 128

lint: $(TESTLIGHT)
	$(BIN)/ruff check shardpack tests benchmarks
	$(BIN)/ruff format --check shardpack tests benchmarks

clean:
	rm -rf demo-out .pytest_cache
