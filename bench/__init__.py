"""Benchmarks: run each from the repository root as ``.venv/bin/python -m bench.<name>``
(docs/benchmarks.md). Their shared harness is the devkit package."""
