"""Parts of the page drawn by our own JavaScript (st.components.v2).

The layout and the rules between the packages: docs/architecture.md.
"""
