# Two commands for a fresh machine: `make demo` (the whole system, locally, end to end)
# and `make test`. Both create .venv and install the project into it first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install demo test bench template lint-schema clean

$(BIN)/upvotes: setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench,serve]'
	touch $@

install: $(BIN)/upvotes

demo: install
	$(BIN)/upvotes demo

test: install
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m bench

template: install
	$(BIN)/upvotes deploy all --dry-run

lint-schema: install
	$(BIN)/upvotes lint-schema schemas/*.sql

clean:
	rm -rf $(VENV) .upvotes build *.egg-info
