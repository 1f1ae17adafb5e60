"""Plain-Python dispatch logic the Dagster layer calls: batch selection and claims, the guard, the ledger."""
