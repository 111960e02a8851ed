"""Tests of explorer/ and app.py: the page under streamlit.testing AppTest, its state, admission, copy and views."""
