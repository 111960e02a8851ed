"""Parts of the page drawn by our own JavaScript (st.components.v2).

One module per component, its .js and .css beside it.
"""
