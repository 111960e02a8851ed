"""Analyses of a trained model, each a plain function that returns plain data (no Streamlit, no plotly).

head_stats: what each head does, as numbers per head. internals: the stages inside one head.
pairs: one head on two sentences. alignment: two piece lists aligned (shared and changed
pieces). ablation: heads switched off. importance: how much a translation relies on each
head. positional: positional encoding removed or source words shuffled.
attribution: which source pieces made each output token.
"""
