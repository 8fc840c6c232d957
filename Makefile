PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test schemas typecheck clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuledger demo --out demo-out

test: $(STAMP)
	$(BIN)/python -m pytest -q

schemas: $(STAMP)
	$(BIN)/python -m schemas.export

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) demo-out .pytest_cache
