"""The test suite, by layer: tests/model, tests/viz, tests/explorer, tests/browser, tests/benchmarks (and tests/docs).

Shared helpers are in tests/helpers.py, shared fixtures in tests/conftest.py.
"""
