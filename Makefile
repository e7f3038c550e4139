# Two entry points for a fresh machine with only python3 and make:
#   make test   create .venv, install pinned versions, run the whole suite (2 workers)
#   make demo   create .venv, install pinned versions, reproduce seed 002's figures
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo bench install clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test,plot]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal

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
	rm -rf $(VENV) .pytest_cache
