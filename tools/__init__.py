"""Repository tooling (not installed): benchmarks, fuzz harness, GPU checks."""
