# ckit — `make demo` and `make test` work on a fresh Debian 12 machine (run as root: they apt-get what they need).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# the interpreter the venv is made from: the first that can make one. A python3 on PATH can be a version manager's
# shim whose own files are gone (it fails before Python starts); Debian's /usr/bin/python3 is installed by `deps`.
PYTHON ?= $(shell for p in python3 /usr/bin/python3 /usr/local/bin/python3; do \
            "$$p" -c 'import ensurepip, venv' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
export CKIT_RUN_DIR ?= $(CURDIR)/.run
export NO_MKDOCS_2_WARNING := 1  # mkdocs-material prints an end-of-life notice on every build

.PHONY: install deps check test lint docs demo bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@[ -n "$(PYTHON)" ] || { echo "make: no python3 that can make a venv (tried python3, /usr/bin/python3): run 'make deps' as root" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,docs]'
	touch $@

deps:  ## system packages and base images the tests and the demo use
	bash tests/infra/install.sh

test: deps install
	$(VENV)/bin/ruff check buildkit ckit tests docs examples
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/mkdocs build --strict --quiet
	$(VENV)/bin/pytest -q --durations=30 -n 2 --dist loadfile

check: install  ## the edit loop, before every commit (CONTRIBUTING.md): no root, no components, about a minute
	$(VENV)/bin/ruff check buildkit ckit tests docs examples
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/mkdocs build --strict --quiet
	$(VENV)/bin/pytest -q --durations=10 tests/unit

lint: install
	$(VENV)/bin/ruff check buildkit ckit tests docs examples
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

docs: install  ## the docs site into .run/site (reference pages generated from the code)
	$(VENV)/bin/mkdocs build --strict

demo: deps install
	bash tests/infra/demo.sh

bench: deps install
	$(PY) -m compileall -q buildkit  # timed as installed: byte code written once, as pip does
	$(PY) -m tests.bench

clean:
	rm -rf $(VENV) .run out .pytest_cache
