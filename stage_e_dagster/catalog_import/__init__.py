"""Importers that load the canonical catalogue (expansions and printings) from outside sources."""
