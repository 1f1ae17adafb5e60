"""Compare stored evidence and votes with a ground-truth label file (synthetic or a user's golden set)."""
