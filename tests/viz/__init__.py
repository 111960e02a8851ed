"""Tests of viz/: the plotly figure builders, the quiz scoring and the lesson export (no page, no browser)."""
