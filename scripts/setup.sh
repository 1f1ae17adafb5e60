#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine: chromium (a Debian package, for the screenshots)
# and a virtual environment with the project installed (the OCR model comes inside a wheel). Safe to run
# again; it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

# Debian's headless chromium, for scripts/screenshots.py and its test (Playwright drives it; no
# browser download). Without root it is only a note: everything else works without it.
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing chromium (Debian)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "setup: chromium is missing (only the screenshots need it): sudo apt-get install chromium" >&2
    fi
fi

stamp="$VENV/.stage-e-installed"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing the project into $VENV" >&2
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    touch "$stamp"
fi
