"""The `servedeck` terminal client, and the presenter the console's own commands share."""

__version__ = "0.1.0"
