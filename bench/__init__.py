"""Benchmarks: ``python -m bench [names]`` (``make bench``: all of them) runs them and records every figure,
with the commit it was measured on, in bench/results.json, rendered as bench/RESULTS.md; the code each one
measures is declared in bench/measured.py, and a test fails when that code changed since (bench/__main__.py
says how)."""
