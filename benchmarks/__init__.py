"""Side-by-side measurements of the attention explorer; ``python -m benchmarks.run --help``."""
