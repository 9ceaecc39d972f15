"""Benchmarks: `python -m benchmarks [NAME ...]` (or `make bench`).

Every benchmark measures this project against a reference measured in the same
run and prints the ratio, so figures compare across machines.
"""
