# The two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast bench screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

## Start a 3-node embedded cluster (SQLite + file locks) with the API on 127.0.0.1:8080.
run: $(STAMP)
	$(BIN)/jobserver cluster --nodes 3 --demo

## Test processes running the suite side by side (pytest-xdist); 0 runs it in this one.
TEST_WORKERS ?= 2

PYTEST = $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

## Run the whole test suite (PostgreSQL and ZooKeeper tests skip loudly if absent, fail in CI).
test: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

## The suite without the slow cluster and chaos tests.
test-fast: $(STAMP)
	$(PYTEST) -m 'not slow and not chaos' $(PYTEST_ARGS)

## The benchmark (bench/): every scenario, tables on stdout, JSON in bench/results/.
## BENCH_ARGS='--smoke' for the 10-second-per-scenario version, '--only latency' etc.
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench $(BENCH_ARGS)

## The dashboard's screenshots in docs/screenshots/ (the README and docs/ show them): make run's
## demo cluster on free ports, headless Chromium (Debian's /usr/bin/chromium).
screenshots: $(STAMP)
	$(BIN)/python -m tests.browser.screenshots docs/screenshots

clean:
	rm -rf $(VENV) .jobserver .pytest_cache
