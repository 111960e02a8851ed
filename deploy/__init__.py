"""Serving the explorer to a lecture hall: several Streamlit replicas behind nginx (``python -m deploy.launch``).

The layout and the rules between the packages: docs/architecture.md.
"""
