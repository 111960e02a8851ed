"""The recorded beam search tree: its results are beam_search's, its scores are the model's, its fates the rule's.

The tree figure is tested in tests/viz/test_beam_tree.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model import Transformer
from model.beam_tree import BeamTree
from model.decoding import beam_search, beam_search_tree, length_penalty, next_token_log_probs
from tests.helpers import SENTENCE, small_config


@pytest.fixture(scope="module")
def model() -> Transformer:
    """A random model whose EOS is likely enough that hypotheses finish early and the bound stops searches."""
    torch.manual_seed(1)
    model = Transformer(small_config(24, d_model=16, n_heads=2, d_ff=32)).eval()
    with torch.no_grad():
        model.generator.bias[model.config.eos_id] = 2.0
    return model


@pytest.fixture(scope="module")
def sources() -> torch.Tensor:
    src = torch.randint(4, 24, (6, 7), generator=torch.Generator().manual_seed(5))
    src[1, 4:] = 0  # a padded sentence in the batch
    return src


@pytest.mark.parametrize("beam_size", [1, 2, 4])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_tree_results_are_exactly_what_beam_search_returns(model, sources, beam_size, alpha):
    for prefix in (None, [5, 6]):
        expected = beam_search(model, sources, beam_size, max_len=7, alpha=alpha, prefix=prefix)
        trees = beam_search_tree(model, sources, beam_size, max_len=7, alpha=alpha, prefix=prefix)
        assert [tree.hypotheses for tree in trees] == expected
        for tree, hypotheses in zip(trees, expected, strict=True):
            results = tree.results()
            assert [tree.sequence(node.id) for node in results] == [h.tokens for h in hypotheses]
            assert [node.score for node in results] == [h.score for h in hypotheses]
            assert [node.log_prob for node in results] == [h.log_prob for h in hypotheses]
            assert all(node.status == "finished" for node in results)
            assert tree.stop in ("bound", "max_len", "no live beam")


def forced_log_probs(model: Transformer, src: torch.Tensor, sequences: list[list[int]]) -> torch.Tensor:
    """(N, T, V) next-token log-probabilities of equally long sequences, one teacher-forced pass."""
    inputs = torch.tensor([[model.config.bos_id, *sequence[:-1]] for sequence in sequences])
    with torch.inference_mode():
        return next_token_log_probs(model, model(src.expand(len(sequences), -1), inputs))


def expected_statuses(step_nodes, beam_size: int, eos_id: int, last_step: bool) -> list[str]:
    """The documented rule: the first beam_size non-EOS candidates live on, an EOS in the top beam_size finishes."""
    statuses, kept = [], 0
    for node in step_nodes:
        if kept == beam_size:
            statuses.append("pruned")
        elif node.token == eos_id:
            statuses.append("finished" if node.rank < beam_size else "pruned")
        else:
            kept += 1
            statuses.append("finished" if last_step else "kept")  # at the length limit live beams end there
    return statuses


def check_steps(model: Transformer, src: torch.Tensor, tree: BeamTree, alpha: float) -> None:
    """Every step's candidates are the top extensions of the previous step's live beams, with the rule's fates."""
    beam_size, prefix, eos = tree.beam_size, tree.prefix, model.config.eos_id
    live = [tree.nodes[0]]
    for step in range(1, max(node.step for node in tree.nodes) + 1):
        recorded = sorted((n for n in tree.nodes if n.step == step), key=lambda n: n.rank)
        assert [n.rank for n in recorded] == list(range(len(recorded))) and len(recorded) <= 2 * beam_size
        # Recompute every extension of every live beam from a teacher-forced pass.
        log_probs = forced_log_probs(model, src, [tree.sequence(parent.id) + [0] for parent in live])[:, -1]
        totals = torch.tensor([parent.log_prob for parent in live])[:, None] + log_probs  # (live, V)
        top = totals.flatten().topk(len(recorded))
        vocab = totals.size(1)
        assert [(live[i // vocab].id, i % vocab) for i in top.indices.tolist()] == [
            (n.parent, n.token) for n in recorded
        ]
        np.testing.assert_allclose([n.log_prob for n in recorded], top.values.numpy(), atol=1e-4)
        penalty = length_penalty(len(prefix) + step, alpha)
        np.testing.assert_allclose([n.score for n in recorded], [n.log_prob / penalty for n in recorded], rtol=1e-12)
        at_limit = step == tree.max_len
        assert [n.status for n in recorded] == expected_statuses(recorded, beam_size, eos, at_limit)
        live = [n for n in recorded if n.status == "kept"]
    if tree.stop == "bound":  # no live beam could still beat the worst returned hypothesis
        best_alive = max(n.log_prob for n in live) / length_penalty(len(prefix) + tree.max_len, alpha)
        assert best_alive <= min(h.score for h in tree.hypotheses)


@pytest.mark.parametrize(("beam_size", "alpha", "prefix"), [(3, 0.6, []), (2, 1.0, [7, 9]), (5, 0.0, [])])
def test_every_step_holds_the_top_extensions_of_the_live_beams(model, sources, beam_size, alpha, prefix):
    stops, eos_fates = set(), set()
    for row in range(sources.size(0)):
        src = sources[row : row + 1]
        tree = beam_search_tree(model, src, beam_size, max_len=6, alpha=alpha, prefix=prefix)[0]
        check_steps(model, src, tree, alpha)
        stops.add(tree.stop)
        eos_fates |= {n.status for n in tree.nodes if n.token == model.config.eos_id}
    assert stops == {"bound", "max_len"} and "finished" in eos_fates  # both ways to stop were exercised


def test_translator_tree_is_the_search_behind_the_trace(translator):
    for beam_size in (2, 4):
        tree = translator.beam_tree(SENTENCE, beam_size=beam_size, max_len=8)
        trace = translator.trace(SENTENCE, beam_size=beam_size, max_len=8)
        best = tree.results()[0]
        assert tree.sequence(best.id) == trace.target_ids[1:]
        assert [node.piece for node in tree.path(best.id)] == trace.target_pieces[1:]
        assert tree.source_ids == trace.source_ids and tree.source_pieces == trace.source_pieces
        assert tree.nodes[0].status == "root" and tree.nodes[0].piece == "<s>"
        assert BeamTree.from_json(tree.to_json()) == tree


def test_node_trace_shows_that_beams_steps(translator):
    tree = translator.beam_tree(SENTENCE, beam_size=3, max_len=8)
    best = tree.results()[0]
    full = translator.beam_node_trace(tree, best.id)
    for node in tree.path(best.id):
        partial = translator.beam_node_trace(tree, node.id)
        assert partial.target_ids == [translator.config.bos_id] + tree.sequence(node.id)
        row = tree.trace_row(node.id)
        assert row == partial.n_steps - 1  # the node's own step is the last one of its trace
        for name in ("decoder.layers.1.cross_attn", "decoder.layers.0.cross_attn"):
            np.testing.assert_allclose(partial.attention[name][:, row], full.attention[name][:, row], atol=1e-6)
    pruned = next(n for n in tree.nodes if n.status == "pruned")
    assert translator.beam_node_trace(tree, pruned.id).target_ids[1:] == tree.sequence(pruned.id)
    with pytest.raises(ValueError, match="node_id"):
        translator.beam_node_trace(tree, 0)


def test_prefix_ids_are_checked(translator):
    tree = translator.beam_tree(SENTENCE, beam_size=2, max_len=5, prefix_ids=[10, 11])
    assert all(tree.sequence(n.id)[:2] == [10, 11] for n in tree.results())
    with pytest.raises(ValueError, match="EOS"):
        translator.beam_tree(SENTENCE, beam_size=2, prefix_ids=[10, translator.config.eos_id])
    with pytest.raises(ValueError, match="not a token the decoder can produce"):
        translator.beam_tree(SENTENCE, beam_size=2, prefix_ids=[translator.config.bos_id])
