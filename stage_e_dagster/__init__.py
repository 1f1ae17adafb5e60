"""stage-e-dagster: streaming orchestration, on Dagster, for a card catalogue's identification pipeline."""

__version__ = "0.1.0"
