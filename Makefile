# One entry point for everything. Every target that needs the environment depends on `setup`,
# which is idempotent: it only reinstalls when requirements.txt or package.json changed.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# EMR Serverless runs the pipeline on its release's PySpark: emr-7.5.0 has Spark 3.5.2
# (infra/pipeline_resources.py EMR_RELEASE), whose PySpark pins py4j 0.10.9.7. A second virtualenv
# holds requirements.txt with those two pins swapped, and `make test` runs the pipeline's tests
# marked `emr` in it too (tests/pipeline/test_on_emr_pyspark.py, beside the other tests).
SPARK35 := .venv-spark35
SPARK35_STAMP := $(SPARK35)/.installed
EMR_PYSPARK := 3.5.2
EMR_PY4J := 0.10.9.7
NODE_STAMP := node_modules/.installed
ENV ?= local
PYTEST_ARGS ?=
# Three pytest-xdist workers on the machine's two cores: a third of the run waits on paced loads,
# failover timers and child processes, and a third worker fills that time (on one fresh clone, one
# run after the other: 9 m 35 s against 10 m 52 s with two). A fourth does not: the cores are then
# busy throughout, and it adds a Spark JVM (on 3745eaa, one after the other: 12 m 42 s against
# 10 m 42 s with three). Since the Spark tests share one worker (4b70b1e) a fourth adds no JVM, and
# still does not pay: 11 m 20 s against 11 m 5 s with three on new clones of ddf45ac and 1ea07e0,
# the machine's cores busy all but 18 of 1 369 core-s. tests/conftest.py keeps the tests that share
# a fixture on one worker.
# TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 3
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export PATH := $(CURDIR)/$(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
# An environment that sets PYTHONDONTWRITEBYTECODE (this kind of machine does) makes every Python
# process the tests and the demo start (workers, emulators, CLI runs) compile the repository's
# modules from source, and every pytest worker rewrite the tests' asserts afresh: bytecode is
# written instead, under __pycache__/ (ignored by git).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup java spark-classes browser wheelhouse lock demo test check lint typecheck bench bench-check synth clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

$(SPARK35_STAMP): requirements.txt pyproject.toml
	@test -x $(SPARK35)/bin/python || $(PYTHON) -m venv $(SPARK35)
	sed -e 's/^pyspark==.*/pyspark==$(EMR_PYSPARK)/' -e 's/^py4j==.*/py4j==$(EMR_PY4J)/' requirements.txt > $(SPARK35)/requirements.txt
	$(SPARK35)/bin/python -m pip install --quiet --disable-pip-version-check -r $(SPARK35)/requirements.txt
	$(SPARK35)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

java:  ## make sure a Java 17+ runtime is present (Spark needs it)
	@./scripts/ensure-java.sh

browser:  ## make sure Debian's chromium and chromium-driver are present (the live dashboard's browser test)
	@./scripts/ensure-browser.sh

setup: $(STAMP) $(SPARK35_STAMP) $(NODE_STAMP) java spark-classes browser wheelhouse  ## create/refresh .venv (and .venv-spark35), node_modules (CDK CLI, uPlot), Java, Spark's class archives, Chromium and the wheelhouse (idempotent)

# Each local Spark driver JVM (the pipeline's commands, the demo, the tests) starts on a class
# archive instead of loading Spark's classes afresh: about 40 % less CPU per JVM. One archive per
# Java runtime and PySpark, in ~/.cache/consumer-pipeline/ (pipeline/class_archive.py); built
# once (both in under 70 s on 2 cores); an existing one is kept.
spark-classes: $(STAMP) $(SPARK35_STAMP) java  ## build the local Spark driver's class archives (one per PySpark)
	$(BIN)/python -m pipeline.build_class_archive
	$(SPARK35)/bin/python -m pipeline.build_class_archive

# The instances' wheels, downloaded once per lock into var/wheels/ (synth ships them in the asset).
wheelhouse: $(STAMP)  ## download the lock's wheels for the instances (deploy/requirements.lock)
	$(BIN)/python -m infra.wheelhouse fetch --arch x86_64

lock: $(STAMP)  ## re-resolve deploy/requirements.lock from requirements.txt's pins (needs PyPI)
	$(BIN)/python -m infra.wheelhouse lock

demo: setup  ## run the whole system locally on the emulator and print the verdict
	$(BIN)/consumer demo --env local

test: setup  ## run every test (unit, functional, e2e, infra, pipeline; the pipeline's `emr` tests on EMR's PySpark too)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=30 $(PYTEST_ARGS)

lint: setup  ## ruff
	$(BIN)/ruff check .
	$(BIN)/ruff format --check app.py bench consumer deploy emulator examples ground infra pipeline scripts simulation tests tools

typecheck: setup  ## mypy (strict on ground/, consumer/ and tools/)
	$(BIN)/mypy

check: lint typecheck test  ## the one gate: ruff, mypy, tests

bench: setup  ## benchmarks; writes bench/RESULTS.md
	$(BIN)/python -m bench

bench-check: setup  ## is every row of bench/RESULTS.md true of the code as it is? (names what to re-run)
	$(BIN)/python -m pytest -q tests/unit/bench/test_results_current.py

synth: $(STAMP) $(NODE_STAMP) wheelhouse  ## synthesize the CDK stacks for ENV (make synth ENV=prod)
	$(CURDIR)/node_modules/.bin/cdk synth -c env=$(ENV) --quiet

clean:  ## remove the virtualenv, node_modules and build outputs
	rm -rf $(VENV) $(SPARK35) node_modules cdk.out .pytest_cache .mypy_cache .ruff_cache
