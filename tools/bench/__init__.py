"""Benchmarks: tensorwire against the floors and peers, measured in the same run."""
