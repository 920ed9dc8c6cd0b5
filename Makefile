# Everything a fresh machine needs: `make run`, `make test` and the benches create .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test test-fast lint bench-storage proto clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

run: $(STAMP)
	$(VENV)/bin/tubeq cluster up $(ARGS)

test: $(STAMP)
	$(PY) -m ruff check lib storage broker master portal_web spark_sink load tests
	$(PY) -m pytest -q tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests/unit

lint: $(STAMP)
	$(PY) -m ruff check .

bench-storage: $(STAMP)
	$(PY) -m load.bench_storage

proto: $(STAMP)
	$(PY) -m lib.proto.generate

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
