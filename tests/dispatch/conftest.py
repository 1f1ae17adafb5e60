"""Dispatch fixtures: the real HTTP image host of the Stage C tests (a throttle comes from a real fetch)."""

from tests.stage_c.conftest import card_jpeg, image_host  # noqa: F401  (fixtures)
