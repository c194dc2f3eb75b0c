"""Benchmarks for tidegauge: `python benchmarks/run.py` (see run.py)."""
