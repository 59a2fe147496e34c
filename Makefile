# Every target sets itself up: a .venv with the project (editable) and its dev tools.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tensorwire-installed
# A pinned torch release is taken from this machine's local wheel store (a CPU build);
# a bare requirement would download a multi-GB CUDA build. An existing torch is left alone.
TORCH_PIN ?= torch==2.13.0

.PHONY: venv test floor pythons lint typecheck gen gen-check compat-check wheel-smoke demo demo-rpc bench fuzz gpu-wheels clean

venv: $(STAMP)

# The editable install is a tree of links (editable_mode=strict) that maps codec/ to tensorwire and
# transports/ to tensorwire.transports, found through a plain .pth, so mypy finds it too; a module
# added or removed changes its folder, which reinstalls; so does a change to the C source it compiles.
$(STAMP): pyproject.toml $(shell find codec transports -type d ! -name __pycache__) $(wildcard codec/*.c)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_PIN)"
	rm -rf build/__editable__.*  # a fresh tree of links: none left to a module that was moved
	$(PY) -m pip install -q -e ".[dev]" --config-settings editable_mode=strict
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check codec transports tests tools
	$(BIN)/ruff format --check codec transports tests tools

# mypy reads the package through its installed tree of links (module names tensorwire.*); the tests
# are a package (tests/__init__.py), their modules tests.*.
typecheck: $(STAMP)
	$(BIN)/mypy "$$($(PY) -c 'import os, tensorwire; print(os.path.dirname(tensorwire.__file__))')" tools tests

# The built-in types: schemas/ -> tensorwire.builtins, as [tool.tensorwire] in pyproject.toml says.
gen: $(STAMP)
	$(BIN)/tensorwire gen

gen-check: $(STAMP)
	$(BIN)/tensorwire gen --check

# The schemas of this commit against the previous commit's (when git history is there).
compat-check: $(STAMP)
	@if git rev-parse --verify -q HEAD~1 >/dev/null 2>&1; then \
		$(BIN)/tensorwire compat --against HEAD~1 schemas; \
	else echo "compat-check: no previous commit in this clone, skipped"; fi

# The wheel, built from the tracked files and used from outside the repository (tools/wheel_smoke.py).
wheel-smoke: $(STAMP)
	$(PY) -m tools.wheel_smoke

test: lint typecheck gen-check compat-check wheel-smoke
	$(BIN)/pytest

# The lowest releases pyproject.toml accepts, tested: the suite in a venv of its own with the
# package installed from its wheel (not editable) and exactly these dependency floors (a test
# keeps them in step with pyproject.toml). Part of CI (.ci/run), after `make test`.
FLOOR_VENV ?= .venv-floor
FLOOR_PINS := torch==2.13.0 numpy==1.24.4 msgspec==0.23.0 jsonschema==4.21.0 pyzmq==25.1.2

floor:
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install -q $(FLOOR_PINS) "setuptools>=77" wheel pytest hypothesis
	rm -rf build/floor-src && mkdir -p build/floor-src  # the wheel from the files git sees only
	git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C build/floor-src
	$(FLOOR_VENV)/bin/python -m pip install -q --no-deps --no-build-isolation --force-reinstall build/floor-src
	$(FLOOR_VENV)/bin/python -c "import sys; from importlib.metadata import version; \
		pins = dict(p.split('==') for p in sys.argv[1:]); got = {n: version(n).split('+')[0] for n in pins}; \
		print('floor:', got); sys.exit(got != pins)" $(FLOOR_PINS)
	$(FLOOR_VENV)/bin/pytest -p no:cacheprovider

# The compiled shorter paths (tensorwire._speedups) on CPython 3.12 and 3.13 where this machine has
# them: a venv .venv-X.Y each, the package built from the files git tracks, the tests of those paths
# (tools/other_pythons.py; its --all runs the whole suite). Part of CI (.ci/run), after `make floor`.
pythons: $(STAMP)
	$(PY) -m tools.other_pythons

demo: $(STAMP)
	$(BIN)/tensorwire demo

# An API-server-like client and an engine-like server over ZeroMQ, tensors through shared memory.
demo-rpc: $(STAMP)
	$(BIN)/tensorwire demo --rpc

# The decoder against hostile input and a live victim process (a few minutes); every failing input
# goes to the regression corpus that `make test` replays.
fuzz: $(STAMP)
	$(PY) -m tools.fuzz --cases 100000 --save-failures --corpus tests/hostile/corpus

BENCH_STAMP := $(VENV)/.tensorwire-bench-installed

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[dev,bench]" --config-settings editable_mode=strict
	touch $(BENCH_STAMP)

# Every mode and peer, 4 KiB to 1 GiB: table on stdout, plot in docs/bench.png (a few minutes).
bench: $(BENCH_STAMP)
	$(BIN)/tensorwire bench --plot docs/bench.png

# Wheels of the dependencies a GPU machine lacks (it has torch and numpy), for CPython 3.12 on
# x86-64: tools/gpu_check.sh installs them from .whl/ there.
GPU_WHEELS ?= msgspec==0.23.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1

gpu-wheels:
	mkdir -p .whl
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .whl $(GPU_WHEELS)

clean:
	rm -rf $(VENV) $(FLOOR_VENV) .venv-3.* .pytest_cache .mypy_cache .ruff_cache build *.egg-info
