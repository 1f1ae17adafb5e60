"""Resources: the settings and the catalogue every asset and sensor of this location shares.

The catalogue URL is read from ``STAGE_E_DATABASE_URL`` when a run or tick needs it, with the same
default as the CLI (the SQLite file in the state folder), so an unset variable is the embedded
set-up, not a tick error. It never enters Dagster's config, so the UI and run records never show it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa
from dagster import ConfigurableResource

from ..catalog.engine import engine_for, masked_url
from ..settings import Settings, load_settings

if TYPE_CHECKING:
    from ..stage_c.fetch import ImageFetcher


class StageEResource(ConfigurableResource):
    """The catalogue and settings of this location. ``database_url`` overrides the environment (tests)."""

    database_url: str | None = None

    def __repr_args__(self):  # type: ignore[no-untyped-def]
        # The URL carries the catalogue's password: a repr (a traceback, a test report) shows it masked.
        for name, value in super().__repr_args__():
            yield name, masked_url(value) if name == "database_url" and isinstance(value, str) else value

    def settings(self) -> Settings:
        settings = load_settings()
        if self.database_url is None:
            return settings
        return settings.model_copy(update={"database_url": self.database_url})

    def engine(self) -> sa.Engine:
        return engine_for(self.settings().database_url)

    def image_fetcher(self, settings: Settings) -> ImageFetcher:
        from ..stage_c.fetch import ImageFetcher  # HTTP (httpx, which pulls in Rich) only in a run that fetches

        return ImageFetcher.from_settings(settings, engine_for(settings.database_url))


# The code location's resource: ``definitions.py`` binds it as ``stage_e``, and the sensors, which
# declare no resource (``defs/sensor_context.py``), use it as it is. It carries no Dagster config
# (everything is read from ``STAGE_E_*`` when a tick or run asks), so it is the same as Dagster's copy.
LOCATION_RESOURCE = StageEResource()
