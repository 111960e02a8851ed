"""Tests that drive a real `streamlit run` server or a lesson file in headless Chromium through Selenium."""
