"""Benchmarks: each module prints a table and writes bench/results/<name>.json."""
