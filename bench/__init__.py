"""Benchmarks: each measures our figure and its baseline in the same run and writes JSON to bench/results/."""
