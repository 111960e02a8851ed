"""The beam search tree: every hypothesis the search examined, step by step, with its scores and fate."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from model.decoding.beam_tree import BeamNode, BeamTree
from model.tokenizer import WORD_START
from viz.style import base_layout, head_colour
from viz.tokens import display_piece

# Colour and legend name of each node status; the returned hypotheses are drawn on top, ringed.
STATUS_STYLE = {
    "root": ("#555555", "start (<s> and prefix)"),
    "kept": (head_colour(0), "kept (a live beam)"),
    "pruned": ("#bbbbbb", "pruned"),
    "finished": (head_colour(2), "finished (</s> or length limit)"),
}
RESULT_COLOUR = head_colour(1)
NODE_HOVER = (
    "step %{x}, candidate rank %{y}<br>token %{customdata[0]}<br>%{customdata[1]}<br>"
    "log-probability %{customdata[2]:.4f}<br>score (length-normalised) %{customdata[3]:.4f}<br>"
    "hypothesis: %{customdata[4]}<extra></extra>"
)


def _label(tree: BeamTree, node: BeamNode) -> str:
    """HTML-safe label of a node's token: its piece, or its id when the tree has no pieces."""
    return display_piece(node.piece) if node.piece else str(node.token)


def _hypothesis_text(tree: BeamTree, node: BeamNode) -> str:
    """HTML-safe text of the hypothesis ending at ``node`` (pieces joined, word starts as spaces)."""
    pieces = tree.prefix_pieces + [step.piece for step in tree.path(node.id)]
    if len(tree.prefix_pieces) != len(tree.prefix) or not all(pieces):  # a tree straight from beam_search_tree
        return html.escape(" ".join(str(token) for token in tree.sequence(node.id))) or "(empty)"
    return html.escape("".join(pieces).replace(WORD_START, " ").strip()) or "(empty)"


def _status_text(node: BeamNode) -> str:
    if node.final_rank is not None:
        return f"{node.status}; returned as hypothesis #{node.final_rank + 1}"
    return node.status


def beam_tree_figure(tree: BeamTree, *, show_pruned: bool = True, title: str = "") -> go.Figure:
    """The search as a tree: x = step, y = the candidate's rank at that step (best at the top).

    Each candidate is linked to the beam it extends. Colours: kept (live beams), pruned
    (among the top 2 × beam size candidates but not kept), finished (ended by </s> or the
    length limit); the hypotheses beam search returns are ringed and numbered. Hover shows
    the token, the cumulative log-probability, the length-normalised score and the whole
    hypothesis. ``show_pruned=False`` hides pruned candidates.
    """
    nodes = [node for node in tree.nodes if show_pruned or node.status != "pruned"]
    shown = {node.id for node in nodes}
    figure = go.Figure()
    for status, (colour, _) in STATUS_STYLE.items():
        edges_x: list[float | None] = []
        edges_y: list[float | None] = []
        for node in nodes:
            if node.status == status and node.parent in shown:
                parent = tree.nodes[node.parent]
                edges_x.extend([parent.step, node.step, None])
                edges_y.extend([parent.rank, node.rank, None])
        if edges_x:
            figure.add_trace(
                go.Scatter(
                    x=edges_x,
                    y=edges_y,
                    mode="lines",
                    line={"color": colour, "width": 1 if status == "pruned" else 2},
                    hoverinfo="skip",
                    legendgroup=status,
                    showlegend=False,
                )
            )
    for status, (colour, name) in STATUS_STYLE.items():
        group = [node for node in nodes if node.status == status]
        if group:
            figure.add_trace(_node_trace(tree, group, name, status, colour))
    results = [(node, node.final_rank) for node in nodes if node.final_rank is not None]
    if results:
        figure.add_trace(
            go.Scatter(
                x=[node.step for node, _ in results],
                y=[node.rank for node, _ in results],
                mode="markers+text",
                text=[f"#{final_rank + 1}" for _, final_rank in results],
                textposition="bottom center",
                marker={"size": 20, "color": "rgba(0,0,0,0)", "line": {"color": RESULT_COLOUR, "width": 3}},
                hoverinfo="skip",
                name="returned hypotheses",
            )
        )
    steps = max((node.step for node in nodes), default=0)
    ranks = max((node.rank for node in nodes), default=0)
    figure.update_xaxes(title_text="step", dtick=1, range=[-0.5, steps + 0.8])
    figure.update_yaxes(title_text="candidate rank at this step", autorange="reversed", dtick=1)
    figure.update_layout(legend={"orientation": "h", "y": 1.0, "yanchor": "bottom"}, hovermode="closest")
    return base_layout(figure, html.escape(title), height=220 + 40 * (ranks + 1))


def _node_trace(tree: BeamTree, nodes: list[BeamNode], name: str, status: str, colour: str) -> go.Scatter:
    return go.Scatter(
        x=[node.step for node in nodes],
        y=[node.rank for node in nodes],
        mode="markers+text",
        text=[_label(tree, node) for node in nodes],
        textposition="top center",
        textfont={"size": 11, "color": "#6b6b6b" if status == "pruned" else "#222222"},
        marker={"size": 8 if status == "pruned" else 11, "color": colour},
        customdata=[
            [_label(tree, node), _status_text(node), node.log_prob, node.score, _hypothesis_text(tree, node)]
            for node in nodes
        ],
        hovertemplate=NODE_HOVER,
        name=html.escape(name),
        legendgroup=status,
    )
