# The two commands: `make demo` and `make test`. Both create .venv when it is
# missing and install what they need into it (again only when pyproject.toml
# changed), then run.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test test-fast bench docs docs-check notebook clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

# An editable install: new modules and subpackages of dqkm need no re-install.
$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PIP) install -e '.[test,plot,dashboard,docs,jupyter]'
	@touch $@

$(VENV)/.installed-docs: pyproject.toml | $(PY)
	$(PIP) install -e '.[docs]'
	@touch $@

$(VENV)/.installed-demo: pyproject.toml | $(PY)
	$(PIP) install -e '.[dashboard]'
	@touch $@

$(VENV)/.installed-bench: pyproject.toml | $(PY)
	$(PIP) install -e '.[test,plot,dashboard,bench]'
	@touch $@

demo: $(VENV)/.installed-demo
	$(PY) -m dqkm demo

# The CPU table at the end (tests/conftest.py, --cpu-durations) shows where the time
# goes: CPU does not grow with the machine's load, and a fresh clone's cold numba
# cache shows up as compile seconds in the test that first calls each kernel.
# Two pytest processes (pytest-xdist): numba's compiles and the tests' single-threaded
# Python keep one core busy each.  A test file's tests run in one of them (its module
# fixtures set up once), the heaviest files first and the files of many short tests
# last (the order: tests/conftest.py; --no-loadscope-reorder keeps it).
test: $(VENV)/.installed-test
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --cpu-durations=30

# The quick part: no test that starts a cluster, none over ~10 s (markers in tests/conftest.py).
test-fast: $(VENV)/.installed-test
	$(PY) -m pytest -q -m "not slow and not distributed"

# examples/monitoring.ipynb executed (small mode) with its outputs and widget state, in place
notebook: $(VENV)/.installed-test
	DQKM_NOTEBOOK_SMALL=1 MPLBACKEND=module://matplotlib_inline.backend_inline \
		$(VENV)/bin/jupyter execute --inplace examples/monitoring.ipynb

bench: $(VENV)/.installed-bench
	$(PY) benchmarks/bench_kmeans.py

# The documentation site, into docs/_build/html; any warning (a broken reference,
# a malformed docstring) fails the build.
docs: $(VENV)/.installed-docs
	$(PY) -m sphinx -b html -W --keep-going -q docs docs/_build/html
	@echo "docs/_build/html/index.html"

# Open the built site's index, "choosing an algorithm" and one API page in
# headless Chromium and check that they render.
docs-check: docs
	$(PY) docs/check_rendered.py docs/_build/html

clean-venv:
	rm -rf $(VENV)
