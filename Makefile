# The two commands a fresh machine needs: `make demo` runs the main job, `make test` runs every test.
VENV ?= .venv

.PHONY: setup demo test test-fast

setup:
	@VENV=$(VENV) scripts/setup.sh

demo: setup
	$(VENV)/bin/stage-e demo --headless --until-idle

test: setup
	@scripts/ensure-postgres.sh
	$(VENV)/bin/pytest

test-fast: setup
	$(VENV)/bin/pytest -m "not slow and not postgres"
