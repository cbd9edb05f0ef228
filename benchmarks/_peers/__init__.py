"""Helpers of benchmarks/bench_peers.py (the charts)."""
