"""Tests that drive a real `streamlit run` server or a handout file in headless Chromium through Selenium."""
