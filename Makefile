# Horizon: everything a fresh machine needs is done by these targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROTO_SRC := $(shell find proto -name '*.proto' 2>/dev/null)
PROTO_STAMP := horizon_broker/broker/_proto/.generated
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(abspath $(BIN)/python)
export PYTHONHASHSEED ?= 0

.PHONY: all install system-deps proto lint test test-fast docs config-reference demo bench chaos clean

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) system-deps proto

system-deps:
	@bash scripts/ensure-system-deps.sh

$(PROTO_STAMP): $(PROTO_SRC) scripts/gen-proto.sh $(STAMP)
	@bash scripts/gen-proto.sh $(BIN)/python
	@touch $(PROTO_STAMP)

proto: $(PROTO_STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

test: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# The pure rooms and everything that needs neither Spark nor programs of its own (tests are
# marked from their fixtures and files in tests/conftest.py); `make test` stays the whole suite.
test-fast: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not spark and not processes"

# The documentation site (mkdocs.yml, docs/), strict: broken links and pages missing from the nav fail.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# The configuration reference page, generated from the models (tests/packaging checks it is current).
config-reference: $(STAMP)
	$(BIN)/python -m horizon_broker.broker.config_reference > docs/reference/configuration.md

demo: install
	$(BIN)/horizon demo

bench: install
	$(BIN)/python -m bench

DURATION ?= 300
SEED ?= 1
chaos: install
	$(BIN)/python -m bench.chaos --duration $(DURATION) --seed $(SEED)

clean:
	rm -rf $(VENV) horizon_broker/broker/_proto .pytest_cache .ruff_cache .mypy_cache .import_linter_cache .hypothesis site
