"""Side-by-side measurements of the attention explorer; ``python -m benchmarks.run --help``.

What each benchmark measures: benchmarks/README.md. The layout and the rules between the packages: docs/architecture.md.
"""
