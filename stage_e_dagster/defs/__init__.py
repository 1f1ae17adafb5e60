"""The Dagster layer: partitions, assets, the dispatch job, sensors and resources. Thin on purpose."""
