# The two commands: `make demo` and `make test`. Both create .venv when it is
# missing and install what they need into it (again only when pyproject.toml
# changed), then run.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test bench notebook clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

# An editable install: new modules and subpackages of dqkm need no re-install.
$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PIP) install -e '.[test,plot,dashboard,jupyter]'
	@touch $@

$(VENV)/.installed-demo: pyproject.toml | $(PY)
	$(PIP) install -e '.[dashboard]'
	@touch $@

$(VENV)/.installed-bench: pyproject.toml | $(PY)
	$(PIP) install -e '.[test,plot,dashboard,bench]'
	@touch $@

demo: $(VENV)/.installed-demo
	$(PY) -m dqkm demo

test: $(VENV)/.installed-test
	$(PY) -m pytest -q

# examples/monitoring.ipynb executed (small mode) with its outputs and widget state, in place
notebook: $(VENV)/.installed-test
	DQKM_NOTEBOOK_SMALL=1 MPLBACKEND=module://matplotlib_inline.backend_inline \
		$(VENV)/bin/jupyter execute --inplace examples/monitoring.ipynb

bench: $(VENV)/.installed-bench
	$(PY) benchmarks/bench_kmeans.py

clean-venv:
	rm -rf $(VENV)
