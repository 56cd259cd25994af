# chaosflow — developer entry points. Everything installs into a project-local virtualenv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
EXAMPLE ?= examples/quickstart.yaml
SEED ?= 7

.PHONY: run test lint typecheck unit bench clean install test-binaries e2e

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

## run: the main job — a bundled example workflow on the simulated cluster with the virtual clock
run: $(STAMP)
	@$(VENV)/bin/chaosflow run $(EXAMPLE) --seed $(SEED)

## test: lint, type check and the whole test suite
test: $(STAMP) lint typecheck
	@$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	@$(VENV)/bin/mypy

## test-binaries: etcd, kube-apiserver, kubectl for e2e (cached; built from hack/tools/* with Go)
test-binaries:
	@hack/build-test-binaries.sh

## e2e: only the tests against a real kube-apiserver + etcd
e2e: $(STAMP)
	@CHAOSFLOW_REQUIRE_E2E=1 $(PY) -m pytest -q -p no:cacheprovider -m e2e tests/e2e

## bench: performance figures as JSON (bench/results.json)
bench: $(STAMP)
	@$(PY) -m bench.engine_bench --out bench/results.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
