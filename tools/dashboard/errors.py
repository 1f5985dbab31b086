"""The dashboard's one exception."""

from __future__ import annotations


class DashboardError(Exception):
    """The dashboard could not be drawn or served (no metrics found, an unreadable source, a port
    taken, the chart library not installed): the message says what to do."""
