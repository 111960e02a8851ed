"""Tests of viz/: the plotly figure builders and the handout (no page, no browser)."""
