PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint schemas golden cli-docs typecheck bench bench-quick clean focus-validator

$(STAMP): pyproject.toml ledger/_digests.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuledger demo --out demo-out

# lint and types first: both take seconds (mypy ~11 s from a cold cache), the tests many minutes
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

schemas: $(STAMP)
	$(BIN)/python -m schemas.export

# rewrite fixtures/golden/ from the ingestors' output on fixtures/samples/: on purpose only,
# then read `git diff fixtures/golden` record by record before committing it
golden: $(STAMP)
	GPULEDGER_GOLDEN=write $(BIN)/python -m pytest -q tests/test_golden_ingest.py

# docs/cli.md's reference part, from every command's --help (a test fails when they differ)
cli-docs: $(STAMP)
	$(BIN)/python -m tests.cli_reference --write

# mypy --strict over the packages, tests/ and bench/ (the list is in pyproject.toml)
typecheck: $(STAMP)
	$(BIN)/mypy

# Benchmarks (never part of `make test`): results merge into bench/results.json.
bench: $(STAMP)
	$(BIN)/python -m bench.run

bench-quick: $(STAMP)
	$(BIN)/python -m bench.run --quick

# focus-validator 2.x (FinOps FOCUS 1.2 conformance, PyPI) in a venv of its own: it needs
# Python 3.12, numpy<2 and pyarrow<20; tests/test_credit_note.py runs it on credit notes
FOCUS_PYTHON ?= /root/.pyenv/versions/3.12.1/bin/python
FOCUS_VENV := .venv-focus

focus-validator: $(FOCUS_VENV)/.installed

$(FOCUS_VENV)/.installed:
	test -x $(FOCUS_VENV)/bin/python || $(FOCUS_PYTHON) -m venv $(FOCUS_VENV)
	$(FOCUS_VENV)/bin/pip install --quiet 'focus-validator>=2,<3' 'numpy<2' 'pyarrow<20'
	touch $@

clean:
	rm -rf $(VENV) $(FOCUS_VENV) demo-out .pytest_cache
