"""What beam search returns and examines, as plain data: its hypotheses and the tree of every candidate it looked at.

model.decoding.search.beam_search returns Hypotheses; beam_search_tree also records a BeamTree (JSON-able), which
viz.beam draws and Translator.beam_node_trace opens one node of.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from model.decoding.scoring import GNMT_SCORING, Scoring


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # generated ids after BOS (prefix included), ending with EOS when finished
    score: float  # log-probability divided by the length penalty
    log_prob: float


@dataclass
class BeamNode:
    """One hypothesis beam search looked at: the root (BOS and the prefix) or a candidate extension."""

    id: int
    parent: int | None  # None for the root
    step: int  # search step that proposed it (1 = first token after the prefix); 0 for the root
    token: int  # the token it adds (BOS for the root)
    log_prob: float  # cumulative log-probability of the tokens after the prefix
    score: float  # log_prob / the search's length penalty (Scoring.penalty): what finished hypotheses rank by
    rank: int  # position among the step's candidates (the top 2 * beam_size extensions), best first
    status: str  # "kept" (a live beam), "pruned" (a candidate not kept), "finished" (EOS or length limit), "root"
    final_rank: int | None = None  # position in beam_search's result; None when it is not returned
    piece: str = ""  # the token's piece, filled in by Translator.beam_tree


@dataclass
class BeamTree:
    """One sentence's beam search as plain data: every candidate of every step, linked to its parent.

    ``hypotheses`` is exactly what beam_search returns for the sentence; the nodes with a
    ``final_rank`` are those hypotheses. Candidates beyond the top 2 * beam_size of a step are
    never examined by the search and are not recorded.
    """

    nodes: list[BeamNode]
    hypotheses: list[Hypothesis]
    prefix: list[int]
    beam_size: int
    scoring: Scoring  # how the search ranked (its length penalty) and stopped
    max_new_tokens: int  # tokens the search could add after the prefix
    stop: (
        str  # why the search ended: "bound" (no live beam can beat the finished ones), "max_new_tokens", "no live beam"
    )
    source_text: str = ""
    source_ids: list[int] = field(default_factory=list)
    source_pieces: list[str] = field(default_factory=list)
    prefix_pieces: list[str] = field(default_factory=list)
    source_language: str | None = None  # a many-language model's codes the search read and wrote
    target_language: str | None = None

    def path(self, node_id: int) -> list[BeamNode]:
        """The nodes from the root's first child down to ``node_id``."""
        path = []
        node = self.nodes[node_id]
        while node.parent is not None:
            path.append(node)
            node = self.nodes[node.parent]
        return path[::-1]

    def sequence(self, node_id: int) -> list[int]:
        """Output ids of the hypothesis ending at ``node_id`` (prefix included, BOS excluded)."""
        return self.prefix + [node.token for node in self.path(node_id)]

    def trace_row(self, node_id: int) -> int:
        """The decoder attention row of the step that chose the node, in a trace forced on ``sequence(node_id)``."""
        return len(self.prefix) + self.nodes[node_id].step - 1

    def results(self) -> list[BeamNode]:
        """The returned hypotheses' nodes, best first."""
        ranked = [(n.final_rank, n) for n in self.nodes if n.final_rank is not None]
        return [n for _, n in sorted(ranked, key=lambda pair: pair[0])]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scoring": self.scoring.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BeamTree:
        """From to_dict's output, or a tree saved when it kept the scoring's alpha and style and named its limit
        ``max_len``."""
        values = dict(data)
        values["nodes"] = [BeamNode(**node) for node in data["nodes"]]
        values["hypotheses"] = [Hypothesis(**hypothesis) for hypothesis in data["hypotheses"]]
        if "scoring" in values:
            values["scoring"] = Scoring.from_dict(values["scoring"])
        else:
            values["scoring"] = Scoring(style=values.pop("style", GNMT_SCORING.style), alpha=values.pop("alpha"))
        if "max_len" in values:
            values["max_new_tokens"] = values.pop("max_len")
            values["stop"] = "max_new_tokens" if values["stop"] == "max_len" else values["stop"]
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> BeamTree:
        return cls.from_dict(json.loads(text))
