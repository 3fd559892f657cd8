# kernbench: `make demo` and `make test` work on a fresh machine (they create .venv).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench mutation docs-check clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# setup.py compiles the simulator core (ADR-1315, kernbench/native.py): an edit of one of
# its modules rebuilds, so the build is never older than its source
NATIVE_SRC := $(shell sed -n 's/^    "\(kernbench\.[a-z_.]*\)",$$/src\/\1.py/p' src/kernbench/native.py \
		| sed 's/\./\//g; s/\/py$$/.py/')
$(STAMP): $(BIN)/python pyproject.toml constraints.txt setup.py src/kernbench/native.py \
		$(NATIVE_SRC)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kernbench demo

test: $(STAMP)
	$(BIN)/ruff check src tests scripts benchmarks benches
	$(BIN)/python -m pytest -n 2 tests
	@# the float checks again with numpy's SIMD dispatch limited to its baseline and
	@# OpenBLAS's kernels to an SSE-only core, as on an older CPU (docs/verification.md,
	@# "Golden outputs on any CPU")
	NPY_DISABLE_CPU_FEATURES="$$($(BIN)/python scripts/npy_baseline.py)" \
		OPENBLAS_CORETYPE=Nehalem $(BIN)/python -m pytest -n 2 -m float_cpu tests

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts benchmarks benches

bench: $(STAMP)
	$(BIN)/python benchmarks/sim_throughput.py

# not part of `make test`: each mutant re-runs its tests (docs/testing.md)
mutation: $(STAMP)
	$(BIN)/python benchmarks/mutation.py

# every marked figure and promised file of README.md and docs/ against a fresh run of the
# command named beside it (ADR-0935); the cheap runs are also in `make test`
docs-check: $(STAMP)
	$(BIN)/python scripts/docs_check.py

clean:
	rm -rf $(VENV) out build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
