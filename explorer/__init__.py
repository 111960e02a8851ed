"""The Streamlit page: everything that imports streamlit. app.py only routes to it.

state (the URL-bound settings), compute (cached model calls), context (what every view
receives), admission (taking turns on a shared server), sidebar and page (the parts around
the views), widgets (shared building blocks), copy (the words on the page), views/ (one
module per view, in the order of views.VIEWS).
"""
