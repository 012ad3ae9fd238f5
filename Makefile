# kafkalake: `make demo` and `make test` are the two commands a newcomer needs.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export KAFKALAKE_CACHE ?= $(HOME)/.cache/kafkalake
export PIP_CACHE_DIR ?= $(KAFKALAKE_CACHE)/pip
export npm_config_cache ?= $(KAFKALAKE_CACHE)/npm
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION ?= 1

.PHONY: install bytecode fetch browser up down status lint test permissions test-fast test-unit demo interop bench synth iac-scan scan-templates clean

$(BIN)/.installed: requirements.txt requirements-dev.txt pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	@echo "[install] Python packages (wheels cached in $(PIP_CACHE_DIR))"
	@$(BIN)/pip install -q --upgrade pip
	@# --no-compile: pip compiles nothing; `make bytecode` compiles everything once, in parallel
	@$(BIN)/pip install -q --no-compile -r requirements.txt -r requirements-dev.txt
	@# AWS SDK for pandas (the readers' tests): 3.17.1 pins pyarrow<26, the project pins pyarrow 26.0.1, so pip's
	@# resolver would refuse it in requirements-dev.txt; it imports and reads with pyarrow 26, so it goes in without
	@# its dependencies (all of them are in the requirements already).
	@$(BIN)/pip install -q --no-compile --no-deps awswrangler==3.17.1
	@$(BIN)/pip install -q --no-deps -e .
	@touch $@

install: $(BIN)/.installed

# Bytecode of every installed and every project module, written here (compileall skips what is up to date: ~2 s then,
# ~20 s the first time). Where PYTHONDONTWRITEBYTECODE is set, as on these machines, Python never writes it, so every
# process compiled what it imported from source on each import, pandas and botocore included, and each of Spark's
# Python workers did so again: half of their CPU in a light topic's archiver run (measured with py-spy, issue #37).
bytecode: install
	@$(BIN)/python -m compileall -q -j 0 $(VENV)/lib $(wildcard kafkalake kafkalake_dev lambdas spark_jobs infra bench tests) > /dev/null

# The one step that downloads build inputs (jars, the jobs' wheels) into the cache; synth only reads them there.
fetch: install
	@$(BIN)/python -m infra.fetch

browser:
	@bash scripts/bootstrap.sh chromium

up: install
	@$(BIN)/kafkalake stack up

down:
	@if [ -x $(BIN)/kafkalake ]; then $(BIN)/kafkalake stack down; fi

status: install
	@$(BIN)/kafkalake stack status

lint: install
	@echo "[lint] ruff"; $(BIN)/ruff check .
	@# mypy's cache outside the clone: a fresh clone re-checks only the files whose contents differ
	@echo "[lint] mypy"; $(BIN)/mypy --cache-dir "$(KAFKALAKE_CACHE)/mypy" \
		$(wildcard kafkalake kafkalake_dev lambdas spark_jobs infra app.py bench tests)
	@echo "[lint] import direction (import-linter)"; $(BIN)/lint-imports --no-cache --no-logo

# pytest-xdist workers (2 on this 2-core machine: the suite waits on Kafka, S3 and JVM starts as much as it computes);
# a file's tests stay on one worker (they share its fixtures); the slowest tests are listed at the end.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider

# The pipeline principals' AWS calls during the stack tests (docs/permission-check.md), outside the clone's sources.
CALL_LOG := $(CURDIR)/build/permission-check/calls.jsonl
# The broker's authorizer decisions (kafkalake_dev.local.stack.AUTHORIZER_LOG): emptied with the call log, so the
# permission check reads this run's Kafka requests only.
KAFKA_DECISIONS := $(CURDIR)/.stack/logs/kafka-authorizer.log

# lint and the IaC scan of the templates synth wrote, side by side (each mostly one process). Then the unit tests,
# then the stack tests in a pytest run of their own (a worker's Spark JVM must start inside the stack tests' moto
# credentials), the longest test files first (LONGEST_FIRST in tests/conftest.py), recording every call the pipeline's
# roles make; then the permission check evaluates those calls against the synthesized templates.
test: install bytecode browser synth
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint scan-templates
	@$(PYTEST) -n $(TEST_WORKERS) --dist loadfile tests/unit
	@rm -f $(CALL_LOG) $(CALL_LOG).keys.json $(KAFKA_DECISIONS).1 $(KAFKA_DECISIONS).2
	@mkdir -p $(dir $(KAFKA_DECISIONS)) && : > $(KAFKA_DECISIONS)
	@KAFKALAKE_CALL_LOG=$(CALL_LOG) $(PYTEST) -n $(TEST_WORKERS) --dist loadfile --durations=10 tests/e2e tests/integration
	@$(MAKE) --no-print-directory permissions

# The permission check over the last recorded stack tests (make test records them).
permissions: install
	@$(BIN)/python -m kafkalake_dev.checks.permissions $(CALL_LOG)

# The edit loop: lint, the unit tests, and the integration tests that run no Spark (on the local stack).
test-fast: install bytecode fetch lint
	@$(PYTEST) -n $(TEST_WORKERS) --dist loadfile tests/unit
	@$(PYTEST) -m "not spark" tests/integration

test-unit: install bytecode fetch
	@$(PYTEST) tests/unit

demo: up bytecode
	@$(BIN)/kafkalake demo

interop: up
	@$(BIN)/kafkalake interop

bench: up bytecode
	@$(BIN)/python -m bench

clean: down
	rm -rf .stack cdk.out

node_modules/.installed: package.json package-lock.json
	@npm ci --no-audit --no-fund --silent
	@touch $@

synth: install fetch node_modules/.installed
	@CDK_DISABLE_CLI_TELEMETRY=true npx cdk synth --quiet --no-notices
	@echo "[synth] templates for every environment in cdk.out/ (kafkalake-<env>.template.json)"

iac-scan: synth
	@$(MAKE) --no-print-directory scan-templates

scan-templates:
	@bash scripts/iac-scan.sh
