"""Sensors, one per module."""
