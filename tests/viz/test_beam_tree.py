"""The beam search tree figure (viz.beam): every node drawn, labels escaped. The tree itself is tested in
tests/model/test_beam_tree.py."""

from __future__ import annotations

from tests.helpers import SENTENCE
from viz.beam import beam_tree_figure


def test_tree_figure_draws_every_node_with_escaped_labels(translator):
    tree = translator.beam_tree(SENTENCE, beam_size=3, max_new_tokens=6)
    figure = beam_tree_figure(tree, title="<b>tree</b>")
    markers = [t for t in figure.data if t.mode == "markers+text" and t.hovertemplate]
    assert sum(len(t.x) for t in markers) == len(tree.nodes)
    drawn = {(x, y) for t in markers for x, y in zip(t.x, t.y, strict=True)}
    assert drawn == {(n.step, n.rank) for n in tree.nodes}
    edges = [t for t in figure.data if t.mode == "lines"]
    assert sum(len(t.x) for t in edges) == 3 * (len(tree.nodes) - 1)  # one segment per non-root node
    rings = next(t for t in figure.data if t.name == "returned hypotheses")
    assert list(rings.text) == [f"#{n.final_rank + 1}" for n in tree.nodes if n.final_rank is not None]
    assert figure.layout.title.text == "&lt;b&gt;tree&lt;/b&gt;"
    kept_only = beam_tree_figure(tree, show_pruned=False)
    assert sum(len(t.x) for t in kept_only.data if t.mode == "markers+text" and t.hovertemplate) == sum(
        n.status != "pruned" for n in tree.nodes
    )
    for node in tree.nodes:
        node.piece = "\u2581<script>x</script>"
    hostile = beam_tree_figure(tree)
    for trace in hostile.data:
        for value in list(trace.text or []) + [str(row) for row in (trace.customdata or [])]:
            assert "<script>" not in value
