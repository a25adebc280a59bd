# Quick start: `make demo` runs the demo, `make test` runs the tests. Both create .venv
# and install the project when needed (pip's cache makes later installs fast); `make test`
# also installs the YOLO-NAS engine's environment once (`yoloq engine install yolo-nas`). `make test-quick` runs
# the unit and contract tests alone (no Prefect server, no training).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder
# The quick tier: unit and contract tests, no Prefect server, no training, no external services.
QUICK_MARKERS := not service and not integration and not training

.PHONY: install engines demo test test-quick docs-reference up down bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,onnx]'
	touch $@

install: $(VENV)/.installed

# The engines that live in their own environment (YOLO-NAS: super-gradients' pins cannot sit
# beside ultralytics). Once per host; a later run only checks the marker.
engines: install
	$(VENV)/bin/yoloq engine install yolo-nas

demo: install
	$(VENV)/bin/yoloq demo

test: engines
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
