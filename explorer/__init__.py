"""The Streamlit page: everything that imports streamlit. app.py only routes to it.

The layout and the rules between the packages: docs/architecture.md.
"""
