# Two commands for a fresh machine: `make demo` (the whole system, locally, end to end)
# and `make test`. Both create .venv and install the project into it first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install demo test test-fast bench-smoke docs bench template lint-schema clean

# The install goes through uv (https://docs.astral.sh/uv/): from PyPI, as pip, the same releases
# (the newest that setup.py allows), in a fraction of pip's time from a fresh clone
# (docs/development.md); compiled to bytecode at install, as pip does, not by every process that
# first imports a module (the suite's streams and commands, in parallel).
$(BIN)/upvotes: setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[test,bench,serve,docs]'
	touch $@

install: $(BIN)/upvotes

demo: install
	$(BIN)/upvotes demo

# The suite (time: README.md and docs/development.md); the benchmarks' smoke run is apart
# (bench-smoke), as it alone takes 15-25 minutes. CI (.ci/run) runs both. The tests run on
# TEST_WORKERS pytest-xdist workers, each with emulators of its own, taking whole test files
# (--dist loadfile: a module's tests share its database and run in order) in collection order, the
# long ones first (tests/support/scheduling.py; xdist would otherwise hand out the modules with the
# most tests first, and the long ones, which have few, last); TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 3
test: install
	$(BIN)/lint-imports
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory typecheck
	$(BIN)/python -m pytest -m "not bench_smoke" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# While editing: every test that needs no emulator (tests/conftest.py marks the others `emulators`),
# each property test with a tenth of its examples (the `fast` Hypothesis profile), on FAST_WORKERS
# pytest-xdist workers (FAST_WORKERS=0: one process); about a minute on 2 quiet cores.
FAST_WORKERS ?= 2
test-fast: install
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -m "not emulators and not bench_smoke" --hypothesis-profile=fast -n $(FAST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Lint and format, as ruff.toml says; `$(BIN)/ruff format .` fixes what the format check finds.
.PHONY: lint
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Types: mypy over the whole tree (packages, templates/*.py, setup.py, tests), as mypy.ini says.
.PHONY: typecheck
typecheck: install
	$(BIN)/mypy

bench-smoke: install
	$(BIN)/python -m pytest -m bench_smoke $(PYTEST_ARGS)

# The documentation site in site/; --strict fails on a broken link, anchor or include.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: install
	$(BIN)/python -m bench

template: install
	$(BIN)/upvotes deploy all --dry-run

lint-schema: install
	$(BIN)/upvotes lint-schema schemas/*.sql

clean:
	rm -rf $(VENV) .upvotes build site *.egg-info
