"""Benchmarks of leakbed: its overhead over plain Flower, and a larger Ray cohort (see README.md)."""
