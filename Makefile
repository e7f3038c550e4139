# Entry points for a fresh machine with only python3 and make:
#   make test   create .venv, install pinned versions, run the suite but its slow tests (2 workers), build the docs
#   make test-slow   the tests marked slow (processes, signals, devices, the dearest parametrized cases)
#   make demo   create .venv, install pinned versions, reproduce the seeds' figures
#   make docs   build the documentation site into site/ (mkdocs --strict)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test test-slow docs demo bench install clean

# uv installs no bytecode, and with PYTHONDONTWRITEBYTECODE set (as on the development machines) every Python
# process of the suite (pytest, its workers, the tests' subprocesses) would compile jax, numpy and
# the rest from source: about 6 s each. Unset, the first import writes the .pyc files into .venv.
unexport PYTHONDONTWRITEBYTECODE

# uv installs the pinned set in about 15 s where pip takes about 75 s; pip is the fallback
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	( $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt uv \
	  && $(VENV)/bin/uv pip install --quiet --python $(PY) -c constraints.txt -e ".[test,plot,docs]" ) \
	|| $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test,plot,docs]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal -m "not slow"
	$(MAKE) --no-print-directory docs

test-slow: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal -m slow

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

demo: $(STAMP)
	MPLBACKEND=Agg $(VENV)/bin/lpjax reproduce all
	MPLBACKEND=Agg $(PY) examples/rigid_body.py

bench: $(STAMP)
	MPLBACKEND=Agg $(PY) benchmarks/rigid_body.py
	MPLBACKEND=Agg $(PY) benchmarks/collective.py
	MPLBACKEND=Agg $(PY) benchmarks/explicit_maps.py
	MPLBACKEND=Agg $(PY) benchmarks/implicit_kernel.py
	MPLBACKEND=Agg $(PY) benchmarks/work_precision.py

clean:
	rm -rf $(VENV) .pytest_cache site
