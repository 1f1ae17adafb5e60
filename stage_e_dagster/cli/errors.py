"""The errors the CLI turns into one line and exit code 1."""

from __future__ import annotations


class CliError(Exception):
    """A user-facing failure: bad input or a refused operation, said in one line."""
