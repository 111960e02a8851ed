"""The page's map: Figure 1 of the paper for the open model, drawn by figure_map.js (beside this file).

Every box is a button: a click sends an "open" trigger with the box and the layer, and its callback sets the view
and the settings that show that box (``open_box``), so the rerun draws the box's view with the map marking it. The
boxes come from model.analysis.figure_one (the model's layers, pre- or post-norm order, shared embeddings), their
numbers from the page's trace (explorer.compute.compute_box_numbers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from explorer.compute import compute_box_numbers
from explorer.context import PageContext
from explorer.state import presenting
from model.analysis.figure_one import NUMBER_MEANINGS, NUMBER_NAMES, Box, figure_boxes
from viz.presenter import PRESENTER_SCALE

HERE = Path(__file__).parent
EVENTS_KEY = "figure_map_events"
FIGURE_MAP = st.components.v2.component(
    "attention_explorer.figure_map",
    html='<div class="fm-root"></div>',
    css=(HERE / "figure_map.css").read_text(encoding="utf-8"),
    js=(HERE / "figure_map.js").read_text(encoding="utf-8"),
    isolate_styles=False,  # plain DOM: the page's font, and browser tests find its boxes directly
)
STACK_TITLES = {"encoder": "Encoder", "decoder": "Decoder"}
STACK_INPUTS = {"encoder": "Inputs (the source)", "decoder": "Outputs, shifted right"}
# The view a box opens, by its kind (an attention box opens its kind's view)
VIEW_OF_KIND = {
    "embedding": "embedding",
    "positional": "positional",
    "add_norm": "residual",
    "add": "residual",
    "norm": "residual",
    "feed_forward": "feed_forward",
    "linear": "residual",
    "softmax": "steps",
}

# The views that show one layer (URL: layer); Add & Norm shows every layer of its stack
LAYER_VIEWS = ("encoder_self", "decoder_self", "cross", "feed_forward")


def view_of(box: Box) -> str:
    return box.attention_kind or VIEW_OF_KIND[box.kind]


def settings_to_open(box: Box, layer: int) -> dict[str, Any]:
    """The page settings that show ``box`` at ``layer``: its view, and the layer and stack the view reads."""
    settings: dict[str, Any] = {"view": view_of(box)}
    if box.layer_box and settings["view"] in LAYER_VIEWS:
        settings["layer"] = layer
    if box.kind == "positional":
        settings["positional_stack"] = box.stack
    elif box.kind == "linear":
        settings["stack"] = "decoder"  # the logit lens: each decoder layer read through Linear and Softmax
    elif box.stack is not None and settings["view"] in ("embedding", "residual", "feed_forward"):
        settings["stack"] = box.stack
    return settings


def open_box(boxes: dict[str, Box]) -> None:
    """The "open" trigger's callback: the settings that show the box clicked (``settings_to_open``)."""
    event = st.session_state[EVENTS_KEY].open
    box = boxes.get(event.get("key")) if isinstance(event, dict) else None
    layer = event.get("layer") if isinstance(event, dict) else None
    if box is not None and isinstance(layer, int):  # anything else did not come from the map: ignored
        st.session_state.update(settings_to_open(box, layer))


def marked(view: str, boxes: list[Box]) -> tuple[list[str], int | None]:
    """The boxes the open ``view`` shows, and the layer it shows them at (None: every layer)."""
    state = st.session_state
    stack = state.get("stack", "encoder")
    if view in ("encoder_self", "decoder_self", "cross"):
        return [box.key for box in boxes if box.attention_kind == view], state.get("layer", 0)
    if view == "positional":
        return [f"{state.get('positional_stack', 'encoder')}.positional"], None
    if view == "embedding":
        return [f"{stack}.embed"], None
    if view == "feed_forward":
        return [f"{stack}.feed_forward"], state.get("layer", 0)
    if view == "residual":  # on the decoder with the logit lens, which reads each layer through Linear
        lens = ["linear"] if stack == "decoder" else []
        return [box.key for box in boxes if box.stack == stack and box.kind in ("add_norm", "add", "norm")] + lens, None
    if view == "steps":
        return ["softmax"], None
    return [], None


def data(ctx: PageContext, view: str, boxes: list[Box]) -> dict[str, Any]:
    current, layer = marked(view, boxes)
    layers = {"encoder": ctx.config.n_encoder_layers, "decoder": ctx.config.n_decoder_layers}

    def plain(box: Box) -> dict[str, Any]:
        return {"key": box.key, "kind": box.kind, "label": box.label, "layer_box": box.layer_box}

    stacks = []
    for stack, title in STACK_TITLES.items():
        own = [box for box in boxes if box.stack == stack]
        stacks.append(
            {
                "stack": stack,
                "title": title,
                "inputs": STACK_INPUTS[stack],
                "layers": layers[stack],
                "below": [plain(box) for box in own if box.kind in ("embedding", "positional")],
                "layer": [plain(box) for box in own if box.layer_box],
                "above": [plain(box) for box in own if not box.layer_box and box.kind == "norm"],
            }
        )
    return {
        "title": "The model (Figure 1)",
        "stacks": stacks,
        "output": [plain(box) for box in boxes if box.stack is None],
        "numbers": compute_box_numbers(ctx.trace_key),
        "names": NUMBER_NAMES,
        "meanings": NUMBER_MEANINGS,
        "current": current,
        "layer": layer,
        "scale": PRESENTER_SCALE if presenting() else 1.0,  # presenter mode: the map is a view of its own
    }


def draw(ctx: PageContext, view: str) -> None:
    """The map for the page's model and sentence, marking ``view``."""
    boxes = figure_boxes(ctx.config)
    by_key = {box.key: box for box in boxes}
    FIGURE_MAP(data=data(ctx, view, boxes), key=EVENTS_KEY, on_open_change=lambda: open_box(by_key))
