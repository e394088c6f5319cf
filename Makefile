# Two commands do all set-up on a fresh clone:
#   make run    create .venv if needed, then train and evaluate a model
#   make test   create .venv if needed, then run the test suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the CPU wheel first: an unpinned torch would pull a multi-GB CUDA build
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) scripts/quickstart.py $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) benchmarks/embed_speed.py
	$(PY) benchmarks/train_speed.py

clean:
	rm -rf $(VENV) runs .pytest_cache
