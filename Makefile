# Quick start: `make demo` runs the demo, `make test` runs the tests. Both create .venv
# and install the project when needed (pip's cache makes later installs fast). `make test-quick` runs
# the unit and contract tests alone (no Prefect server, no training).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder
# The quick tier: unit and contract tests, no Prefect server, no training, no external services.
QUICK_MARKERS := not service and not integration and not training

.PHONY: install demo test test-quick docs-reference up down bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,onnx]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/yoloq demo

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

test-quick: install
	$(PY) -m pytest -n 2 -m "$(QUICK_MARKERS)"

docs-reference: install
	$(PY) -m yoloq.ops.reference

up: install
	$(VENV)/bin/yoloq up

down:
	$(VENV)/bin/yoloq down

bench: install
	$(PY) bench/decide.py
	$(PY) bench/policies.py
	$(PY) bench/overhead.py
	$(PY) bench/preemption.py

clean:
	rm -rf $(VENV) .yoloq
