"""Benchmarks: `make bench` (python -m bench) runs them all and writes bench/RESULTS.md."""
