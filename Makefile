# The two commands a fresh machine needs: `make demo` runs the main job, `make test` runs every test.
VENV ?= .venv

.PHONY: setup demo test test-fast

setup:
	@VENV=$(VENV) scripts/setup.sh

demo: setup
	$(VENV)/bin/stage-e demo --headless --until-idle

# Two pytest-xdist workers, the longest tests first (tests/conftest.py). On a quiet 2-core machine the
# tests took 35 min one at a time, 24 min with two in file order, 22 min longest first; 21 min on 2026-12-07
# (quiet), 30 min on a slower, busier machine earlier that day. `pytest`: one at a time.
TEST_WORKERS ?= 2

test: setup
	@scripts/ensure-postgres.sh
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist worksteal

test-fast: setup
	$(VENV)/bin/pytest -m "not slow and not postgres"
