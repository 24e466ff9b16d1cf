"""Canary rollouts: the judge (judge.py, pure), the figures it reads from the metering rows
(figures.py), and the steps the reconciler and the verbs take (steps.py)."""
