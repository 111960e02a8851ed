"""Tests of the benchmark harness (benchmarks/)."""
