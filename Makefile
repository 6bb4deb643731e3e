# The README's two commands are the contract: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install sysdeps demo test test-quick lint typecheck bench fuzz clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,lab,spark]'
	touch $(STAMP)

install: $(STAMP)

sysdeps:
	@bash scripts/sysdeps.sh

demo: install sysdeps
	$(BIN)/python -m ringfence.demo --output out

lint: install
	$(BIN)/ruff check src tests benchmarks

typecheck: install
	$(BIN)/mypy --strict src/ringfence

# Every test, in three runs: the unit tests on both cores (pytest-xdist); the lab tests that prove behaviour
# two at a time, a module per worker (each lab has its own names, so two never clash); then the lab tests
# marked `alone`, one at a time — they measure the job or the host (stalls, busbw, capture windows), and a
# lab beside them would be measured too. All three always run; the target fails if any does (a run that
# collects nothing, exit 5, fails too).
test: install sysdeps lint typecheck
	@unit=0; lab=0; alone=0; \
	$(BIN)/pytest -q -p no:cacheprovider --timeout=600 -m "not privileged" -n 2 --durations=20 || unit=$$?; \
	$(BIN)/pytest -q -p no:cacheprovider --timeout=900 -m "privileged and not alone" -n 2 --dist loadfile \
		--durations=30 || lab=$$?; \
	$(BIN)/pytest -q -p no:cacheprovider --timeout=600 -m "privileged and alone" --durations=20 || alone=$$?; \
	echo "make test: unit tests exit $$unit, lab tests exit $$lab, measuring lab tests exit $$alone"; \
	[ "$$unit" -eq 0 ] && [ "$$lab" -eq 0 ] && [ "$$alone" -eq 0 ]

test-quick: install
	$(BIN)/pytest -q -m "not privileged and not slow"

bench: install sysdeps
	$(BIN)/python benchmarks/run_all.py

# Coverage-guided fuzzing (atheris) of every parser in tests/fuzz/fuzz_entries.py, one target at a time,
# at the lowest CPU and I/O priority; `make test` runs the same targets briefly. FUZZ_RUNS inputs per
# target, or FUZZ_SECONDS each where that comes first (0: no time limit). Figures: out/fuzz/results.json.
FUZZ_RUNS ?= 1000000
FUZZ_SECONDS ?= 0
fuzz: install
	nice -n 19 ionice -c3 $(BIN)/python benchmarks/fuzz/run_fuzz.py --runs $(FUZZ_RUNS) --seconds $(FUZZ_SECONDS) \
		--out out/fuzz $(if $(FUZZ_TARGET),--target $(FUZZ_TARGET))

clean:
	rm -rf out build dist .mypy_cache .ruff_cache .pytest_cache
