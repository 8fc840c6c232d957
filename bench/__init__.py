"""Benchmarks: each runs beside its baseline in the same process and reports a ratio."""
