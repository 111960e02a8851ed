"""The test suite, by layer: tests/model, tests/viz, tests/explorer, tests/browser, tests/benchmarks (and tests/docs).

Shared fixtures are in tests/conftest.py; shared helpers in tests/helpers.py, app_helpers.py (AppTest),
browser_helpers.py (a real server, Chromium) and marian_helpers.py (the tiny MarianMT model).
"""
