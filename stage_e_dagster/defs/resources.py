"""Resources: the settings and the catalogue every asset and sensor of this location shares.

The catalogue URL is read from ``STAGE_E_DATABASE_URL`` when a run or tick needs it, with the same
default as the CLI (the SQLite file in the state folder), so an unset variable is the embedded
set-up, not a tick error. It never enters Dagster's config, so the UI and run records never show it.
"""

from __future__ import annotations

from dataclasses import replace

import sqlalchemy as sa
from dagster import ConfigurableResource

from ..catalog.engine import engine_for
from ..settings import Settings, load_settings
from ..stage_c.fetch import ImageFetcher


class StageEResource(ConfigurableResource):
    """The catalogue and settings of this location. ``database_url`` overrides the environment (tests)."""

    database_url: str | None = None

    def settings(self) -> Settings:
        settings = load_settings()
        return settings if self.database_url is None else replace(settings, database_url=self.database_url)

    def engine(self) -> sa.Engine:
        return engine_for(self.settings().database_url)

    def image_fetcher(self, settings: Settings) -> ImageFetcher:
        return ImageFetcher.from_settings(settings, engine_for(settings.database_url))
