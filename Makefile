# Everything shardpack needs is installed here, into .venv; nothing relies on what is on the machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test bench bench-long lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: install
	$(BIN)/shardpack demo demo-out
	$(BIN)/shardpack verify demo-out/shards

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.read_speed

# The scaling run (photos-large to PNG, >= 60 s of one core's work, every worker count) and the
# listing-scale run (1,000,000 files): too long for `make bench`.
bench-long: install
	$(BIN)/python -m benchmarks.run --plan long --repeat 1 --no-extras $(BENCH_ARGS)

lint: install
	$(BIN)/ruff check shardpack tests benchmarks
	$(BIN)/ruff format --check shardpack tests benchmarks

clean:
	rm -rf demo-out .pytest_cache
