# Everything shardpack needs is installed here, into .venv; nothing relies on what is on the machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test bench lint clean

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

lint: install
	$(BIN)/ruff check shardpack tests benchmarks
	$(BIN)/ruff format --check shardpack tests benchmarks

clean:
	rm -rf demo-out .pytest_cache
