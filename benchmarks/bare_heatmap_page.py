"""The floor for benchmarks/browser_benchmarks.py: a bare Streamlit page with one text box and one plotly heatmap.

Run by ``streamlit run`` like app.py, it does the least a page showing attention must do: read
a sentence and draw a word-by-word heatmap of it, redrawn when its one control (a head) changes. It runs no
model.
"""

import numpy as np
import plotly.graph_objects as go
import streamlit as st

words = st.text_input("Sentence", "A man in a blue shirt is riding a bike .").split() or ["(empty)"]
head = st.selectbox("Head", range(4), format_func=lambda n: f"head {n + 1}")  # the floor of a control's rerun
weights = np.random.default_rng([len(words), head]).dirichlet(np.ones(len(words)), size=len(words))
figure = go.Figure(go.Heatmap(z=weights, x=list(range(len(words))), y=list(range(len(words)))))
figure.update_layout(title=f"head {head + 1}")
figure.update_xaxes(tickmode="array", tickvals=list(range(len(words))), ticktext=words)
figure.update_yaxes(tickmode="array", tickvals=list(range(len(words))), ticktext=words, autorange="reversed")
st.plotly_chart(figure)
