# Everything a fresh machine needs: `make run`, `make test` and the benches create .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test test-fast lint bench-storage proto clean browser

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

run: $(STAMP)
	$(VENV)/bin/tubeq cluster up $(ARGS)

# The portal's browser tests need Debian's chromium and chromedriver: installed here when missing
# and this is root with apt-get (elsewhere the tests say why they skip; under CI they fail).
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null \
	    && command -v kcat >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing chromium and chromium-driver (the portal's browser tests) and kcat (the Kafka port's)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver kcat >/dev/null \
	  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
	       apt-get install -y -q chromium chromium-driver kcat >/dev/null; }; \
	else echo "no chromium: the portal's browser tests will skip (apt-get install chromium chromium-driver)"; fi

# The suite runs in TEST_WORKERS processes (pytest-xdist): a file's tests stay together in one
# (its module fixtures are made once) and the tests on the Spark session share one worker and one
# JVM (tests/conftest.py). Three keep two cores busy: the real servers, JVMs and browsers the
# tests start use the CPU more than the tests wait on them.
TEST_WORKERS ?= 3

test: $(STAMP) browser
	@start=$$(date +%s); \
	$(PY) -m ruff check lib storage broker master portal_web spark_sink load tests \
	&& $(PY) -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile tests; \
	rc=$$?; echo "make test: ruff and the suite took $$(( $$(date +%s) - start )) s (exit $$rc)"; exit $$rc

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
