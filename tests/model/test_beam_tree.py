"""The recorded beam search tree: its results are beam_search's, its scores are the model's, its fates the rule's.

The tree figure is tested in tests/viz/test_beam_tree.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model import Transformer
from model.decoding.beam_tree import BeamNode, BeamTree
from model.decoding.scoring import Scoring, length_penalty
from model.decoding.search import beam_search, beam_search_tree, greedy_decode, next_token_log_probs
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
        expected = beam_search(model, sources, beam_size, max_new_tokens=7, scoring=Scoring(alpha=alpha), prefix=prefix)
        trees = beam_search_tree(
            model, sources, beam_size, max_new_tokens=7, scoring=Scoring(alpha=alpha), prefix=prefix
        )
        assert [tree.hypotheses for tree in trees] == expected
        for tree, hypotheses in zip(trees, expected, strict=True):
            results = tree.results()
            assert [tree.sequence(node.id) for node in results] == [h.tokens for h in hypotheses]
            assert [node.score for node in results] == [h.score for h in hypotheses]
            assert [node.log_prob for node in results] == [h.log_prob for h in hypotheses]
            assert all(node.status == "finished" for node in results)
            assert tree.stop in ("bound", "max_new_tokens", "no live beam")


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
        assert [n.rank for n in recorded] == list(range(len(recorded)))
        # Recompute every extension of every live beam from a teacher-forced pass.
        log_probs = forced_log_probs(model, src, [tree.sequence(parent.id) + [0] for parent in live])[:, -1]
        totals = torch.tensor([parent.log_prob for parent in live])[:, None] + log_probs  # (live, V)
        # All of the top 2 * beam_size possible extensions are examined, also those after an EOS.
        assert len(recorded) == min(2 * beam_size, int(totals.isfinite().sum()))
        top = totals.flatten().topk(len(recorded))
        vocab = totals.size(1)
        assert [(live[i // vocab].id, i % vocab) for i in top.indices.tolist()] == [
            (n.parent, n.token) for n in recorded
        ]
        np.testing.assert_allclose([n.log_prob for n in recorded], top.values.numpy(), atol=1e-4)
        penalty = length_penalty(len(prefix) + step, alpha)
        np.testing.assert_allclose([n.score for n in recorded], [n.log_prob / penalty for n in recorded], rtol=1e-12)
        at_limit = step == tree.max_new_tokens
        assert [n.status for n in recorded] == expected_statuses(recorded, beam_size, eos, at_limit)
        live = [n for n in recorded if n.status == "kept"]
    if tree.stop == "bound":  # no live beam could still beat the worst returned hypothesis
        best_alive = max(n.log_prob for n in live) / length_penalty(len(prefix) + tree.max_new_tokens, alpha)
        assert best_alive <= min(h.score for h in tree.hypotheses)


@pytest.mark.parametrize(("beam_size", "alpha", "prefix"), [(3, 0.6, []), (2, 1.0, [7, 9]), (5, 0.0, [])])
def test_every_step_holds_the_top_extensions_of_the_live_beams(model, sources, beam_size, alpha, prefix):
    stops, eos_fates = set(), set()
    for row in range(sources.size(0)):
        src = sources[row : row + 1]
        tree = beam_search_tree(model, src, beam_size, max_new_tokens=6, scoring=Scoring(alpha=alpha), prefix=prefix)[0]
        check_steps(model, src, tree, alpha)
        stops.add(tree.stop)
        eos_fates |= {n.status for n in tree.nodes if n.token == model.config.eos_id}
    assert stops == {"bound", "max_new_tokens"} and "finished" in eos_fates  # both ways to stop were exercised


def test_translator_tree_is_the_search_behind_the_trace(translator):
    for beam_size in (2, 4):
        tree = translator.beam_tree(SENTENCE, beam_size=beam_size, max_new_tokens=8)
        trace = translator.trace(SENTENCE, beam_size=beam_size, max_new_tokens=8)
        best = tree.results()[0]
        assert tree.sequence(best.id) == trace.target_ids[1:]
        assert [node.piece for node in tree.path(best.id)] == trace.target_pieces[1:]
        assert tree.source_ids == trace.source_ids and tree.source_pieces == trace.source_pieces
        assert tree.nodes[0].status == "root" and tree.nodes[0].piece == "<s>"
        assert BeamTree.from_json(tree.to_json()) == tree


def test_a_tree_saved_before_it_kept_its_scoring_opens(translator):
    tree = translator.beam_tree(SENTENCE, beam_size=2, max_new_tokens=3, scoring=Scoring("transformers", alpha=0.5))
    saved = tree.to_dict()
    del saved["scoring"]
    saved |= {"alpha": 0.5, "style": "transformers", "max_len": saved.pop("max_new_tokens")}
    saved["stop"] = "max_len" if tree.stop == "max_new_tokens" else tree.stop
    assert BeamTree.from_dict(saved) == tree


def test_node_trace_shows_that_beams_steps(translator):
    tree = translator.beam_tree(SENTENCE, beam_size=3, max_new_tokens=8)
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
    tree = translator.beam_tree(SENTENCE, beam_size=2, max_new_tokens=5, prefix_ids=[10, 11])
    assert all(tree.sequence(n.id)[:2] == [10, 11] for n in tree.results())
    with pytest.raises(ValueError, match="EOS"):
        translator.beam_tree(SENTENCE, beam_size=2, prefix_ids=[10, translator.config.eos_id])
    with pytest.raises(ValueError, match="not a token the decoder can produce"):
        translator.beam_tree(SENTENCE, beam_size=2, prefix_ids=[translator.config.bos_id])


@pytest.mark.parametrize("prefix", [[], [7, 9]])
def test_the_tree_starts_at_a_root_and_keeps_the_searchs_settings(model, sources, prefix):
    tree = beam_search_tree(model, sources[:1], 3, max_new_tokens=5, scoring=Scoring(alpha=0.6), prefix=prefix)[0]
    # The root stands for BOS and the prefix: no log-probability, score or rank of its own.
    assert tree.nodes[0] == BeamNode(0, None, 0, model.config.start_id, 0.0, 0.0, 0, "root")
    # Checked before any path is walked: the first step extends the root, the only live beam.
    assert {node.parent for node in tree.nodes if node.step == 1} == {0}
    assert (tree.prefix, tree.beam_size, tree.scoring.alpha, tree.max_new_tokens) == (prefix, 3, 0.6, 5)


def test_a_beam_wider_than_the_vocabulary_keeps_only_possible_tokens():
    """With fewer possible tokens than candidates, the impossible ones (log-probability -inf) are never examined."""
    torch.manual_seed(2)
    tiny = Transformer(small_config(7, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=16)).eval()
    src = torch.randint(4, 7, (1, 4), generator=torch.Generator().manual_seed(0))
    config = tiny.config
    possible = [t for t in range(config.tgt_vocab_size) if t not in config.never_generated]
    # One token allowed: each possible token is one hypothesis, scored by its own log-probability.
    hypotheses = beam_search(tiny, src, beam_size=6, max_new_tokens=1, scoring=Scoring(alpha=0.0))[0]
    assert sorted(h.tokens for h in hypotheses) == [[t] for t in possible]
    log_probs = forced_log_probs(tiny, src, [[0]])[0, 0]
    for hypothesis in hypotheses:
        assert hypothesis.log_prob == pytest.approx(float(log_probs[hypothesis.tokens[0]]), abs=1e-6)
    for max_new_tokens in (1, 2, 3):
        tree = beam_search_tree(tiny, src, beam_size=6, max_new_tokens=max_new_tokens, scoring=Scoring(alpha=0.6))[0]
        assert all(np.isfinite(node.log_prob) for node in tree.nodes)
        assert all(set(h.tokens).isdisjoint(config.never_generated) and np.isfinite(h.score) for h in tree.hypotheses)


def script_decoder(model: Transformer, monkeypatch, possible: list[int]) -> None:
    """Replace model.decode: at every step the tokens ``possible`` are equally likely, any other impossible.

    The real decoder still runs (it fills the key/value cache the search reorders); its logits are dropped."""
    decode = model.decode

    def scripted(tgt_ids, *args, **kwargs):
        decode(tgt_ids, *args, **kwargs)
        logits = torch.full((tgt_ids.size(0), tgt_ids.size(1), model.config.tgt_vocab_size), float("-inf"))
        logits[..., possible] = 0.0
        return logits

    monkeypatch.setattr(model, "decode", scripted)


def test_a_live_beam_that_can_at_best_tie_the_worst_finished_hypothesis_ends_the_search(model, sources, monkeypatch):
    """EOS and token 5 each have probability 1/2 at every step. With 2 beams and alpha 0, step 1 finishes [EOS]
    (log 1/2) and keeps [5]; step 2 finishes [5, EOS] (log 1/4) and keeps [5, 5], also log 1/4: that beam cannot
    beat the worst finished hypothesis, only tie it (scores only fall), so the search stops after step 2."""
    eos = model.config.eos_id
    script_decoder(model, monkeypatch, [eos, 5])
    tree = beam_search_tree(model, sources[:1], beam_size=2, max_new_tokens=5, scoring=Scoring(alpha=0.0))[0]
    assert tree.stop == "bound"
    assert max(node.step for node in tree.nodes) == 2
    assert [h.tokens for h in tree.hypotheses] == [[eos], [5, eos]]
    assert [h.log_prob for h in tree.hypotheses] == pytest.approx([-np.log(2), -2 * np.log(2)])


def test_a_search_whose_beams_all_finished_stops_for_want_of_a_live_beam(model, sources, monkeypatch):
    eos = model.config.eos_id
    script_decoder(model, monkeypatch, [eos])  # EOS is certain
    tree = beam_search_tree(model, sources[:1], beam_size=1, max_new_tokens=5, scoring=Scoring(alpha=0.6))[0]
    assert tree.stop == "no live beam"
    assert [h.tokens for h in tree.hypotheses] == [[eos]] and tree.hypotheses[0].log_prob == 0.0


@pytest.mark.parametrize("search", [beam_search, greedy_decode])
def test_a_max_len_of_zero_means_the_default_limit(model, sources, search):
    options = {} if search is greedy_decode else {"beam_size": 2}
    assert str(search(model, sources, max_new_tokens=0, **options)) == str(
        search(model, sources, max_new_tokens=None, **options)
    )


@pytest.mark.parametrize("search", [beam_search_tree, beam_search, greedy_decode])
def test_a_negative_max_len_is_refused_by_every_search(model, sources, search):
    """A search allowed no step would return nothing (an IndexError or an empty translation further on)."""
    options = {} if search is greedy_decode else {"beam_size": 2}
    with pytest.raises(ValueError, match=r"max_new_tokens must be at least 1, or 0 or None for the default; got -1"):
        search(model, sources[:1], max_new_tokens=-1, **options)
