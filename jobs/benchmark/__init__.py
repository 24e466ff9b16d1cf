"""Benchmarks of a running revision: a short bounded load through the gateway, its figures kept
per revision (docs/benchmarks.md). The plan and the figures are pure (plan.py, stats.py,
prompts.py); the load (load.py) and the runs' rows (runs.py) are services."""
