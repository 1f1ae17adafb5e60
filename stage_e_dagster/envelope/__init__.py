"""The operating envelope: signals, bars, trips and the shared fetch-outcome window."""
