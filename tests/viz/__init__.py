"""Tests of viz/: the plotly figure builders, the quiz scoring and the handout export (no page, no browser)."""
