"""Runnable examples of both processor forms (docs/processing.md)."""
