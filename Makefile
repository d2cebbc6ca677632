# Two commands for a fresh machine: `make demo` (the whole system, locally, end to end)
# and `make test`. Both create .venv and install the project into it first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install demo test docs bench template lint-schema clean

$(BIN)/upvotes: setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench,serve,docs]'
	touch $@

install: $(BIN)/upvotes

demo: install
	$(BIN)/upvotes demo

test: install
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

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
