"""The ``stage-e`` command line: the root only wires; each command group lives in its own module."""
