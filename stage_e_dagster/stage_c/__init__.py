"""Stage C: fetch each image once and extract its evidence. Knows nothing of Dagster or batches."""
