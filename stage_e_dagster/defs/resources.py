"""Resources: the catalogue URL comes through ``EnvVar`` (resolved at launch, hidden in the UI); the
remaining ``STAGE_E_*`` settings are read when a run or tick needs them."""

from __future__ import annotations

from dataclasses import replace

import sqlalchemy as sa
from dagster import ConfigurableResource

from ..catalog.engine import engine_for
from ..settings import Settings, load_settings
from ..stage_c.fetch import ImageFetcher


class StageEResource(ConfigurableResource):
    """The catalogue and settings every asset and sensor of this location shares."""

    database_url: str

    def settings(self) -> Settings:
        return replace(load_settings(), database_url=self.database_url)

    def engine(self) -> sa.Engine:
        return engine_for(self.database_url)

    def image_fetcher(self, settings: Settings) -> ImageFetcher:
        return ImageFetcher.from_settings(settings, self.engine())
