"""Fixture repos of the fake Hugging Face Hub, one folder per repo (see tests/fakes/hub.py)."""
