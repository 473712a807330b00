"""The benchmarks: each module runs as ``python -m bench.NAME`` from the repository root."""
