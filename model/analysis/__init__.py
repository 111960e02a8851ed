"""Analyses of a trained model, each a plain function that returns plain data (no Streamlit, no plotly).

The layout and the rules between the packages: docs/architecture.md.
"""
