"""Benchmarks of the model at inference: forward pass against torch.nn.Transformer, capture, KV cache, one
decoding step, a full trace, a trace at opus-mt-en-de's size, and the attributions. Training against
torch.nn.Transformer: benchmarks/training_vs_torch.py."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from benchmarks.context import Context
from benchmarks.records import Check, Record
from benchmarks.subject import sentence_with_pieces
from benchmarks.timing import alternate
from model import capture_attention
from model.analysis.attribution import ATTRIBUTION_METHODS, attribute
from model.decoding.search import greedy_decode, next_token_log_probs
from model.interop import export_torch
from model.interop.marian import marian_config
from model.interop.torch_transformer import tutorial_logits
from model.tokenizer import Tokenizer
from model.transformer import Transformer
from model.translator import Translator

SOURCE_TOKENS = 30  # "a 30-token sentence": source ids including EOS
# Helsinki-NLP/opus-mt-en-de's config.json, the fields model.interop.marian reads: 6+6 layers, d_model 512, 8 heads
OPUS_MT_EN_DE = {
    "model_type": "marian",
    "architectures": ["MarianMTModel"],
    "vocab_size": 58101,
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "activation_function": "swish",
    "scale_embedding": True,
    "max_position_embeddings": 512,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "decoder_start_token_id": 58100,
    "dropout": 0.1,
}


def tutorial_copy(model: Transformer):
    """export_torch without nn.Transformer's note that sequence-first layers skip the nested-tensor fast path
    (that is the point of comparing with the tutorial layout)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        return export_torch(model)


def random_ids(model: Transformer, batch: int, length: int, seed: int) -> torch.Tensor:
    """Token ids that are never special (no padding: every position is real)."""
    generator = torch.Generator().manual_seed(seed)
    config = model.config
    special = {config.pad_id, config.unk_id, config.bos_id, config.eos_id, config.start_id}
    ordinary = torch.tensor([i for i in range(config.src_vocab_size) if i not in special])  # MarianMT: pad is last
    return ordinary[torch.randint(len(ordinary), (batch, length), generator=generator)]


def timing_params(paired, unit_scale: float = 1000.0) -> dict:
    """Raw samples (in the record's unit) so that a reader can recompute the medians."""
    return {
        "value_samples": [t * unit_scale for t in paired.candidate],
        "baseline_samples": [t * unit_scale for t in paired.baseline],
        "statistic": "median",
    }


def forward_vs_torch(ctx: Context) -> list[Record]:
    """Our forward (nothing captured, fused attention) vs the tutorial-layout nn.Transformer, same weights."""
    model = ctx.subject.model
    device = ctx.subject.device
    reference = tutorial_copy(model).eval()
    records = []
    for batch, repeats in ((1, ctx.reps(15, 61)), (64, ctx.reps(5, 21))):
        src = random_ids(model, batch, SOURCE_TOKENS, seed=1).to(device)
        tgt = random_ids(model, batch, SOURCE_TOKENS, seed=2).to(device)
        pad = model.config.pad_id
        with torch.inference_mode():
            difference = float((model(src, tgt) - tutorial_logits(reference, src, tgt, pad)).abs().max())
            paired = alternate(
                lambda src=src, tgt=tgt: model(src, tgt),
                lambda src=src, tgt=tgt: tutorial_logits(reference, src, tgt, pad),  # noqa: B023 - pad is fixed
                repeats=repeats,
                warmup=ctx.reps(2, 5),
                device=device,
            )
        records.append(
            Record(
                "forward_vs_torch",
                paired.candidate_median * 1000,
                "ms",
                paired.baseline_median * 1000,
                (Check("ratio", "<=", 1.0),),
                {
                    "case": f"batch {batch} x {SOURCE_TOKENS}",
                    "batch": batch,
                    "src_tokens": SOURCE_TOKENS,
                    "tgt_tokens": SOURCE_TOKENS,
                    "baseline_is": "model.interop.export_torch: the PyTorch tutorial's Seq2SeqTransformer "
                    "(sequence-first nn.Transformer, masks from tutorial_logits), eval + inference_mode; "
                    "sequence-first means nn.Transformer's batch_first fast path is not taken, as for tutorial users",
                    "max_abs_logit_difference": difference,
                    "repeats": repeats,
                    **timing_params(paired),
                },
            )
        )
    return records


def capture_overhead(ctx: Context) -> list[Record]:
    """A forward pass with every attention and positional encoding captured vs the same pass without."""
    return [_captured_forward(ctx, "capture_overhead", activations=False)]


def activation_capture_overhead(ctx: Context) -> list[Record]:
    """A forward pass with every hook point of Figure 1 captured (activations=True, attention too) vs without."""
    return [_captured_forward(ctx, "activation_capture_overhead", activations=True)]


def _captured_forward(ctx: Context, name: str, activations: bool) -> Record:
    """A forward pass, batch 1 x SOURCE_TOKENS, under capture_attention(activations=...) vs the same pass without."""
    model = ctx.subject.model
    device = ctx.subject.device
    src = random_ids(model, 1, SOURCE_TOKENS, seed=3).to(device)
    tgt = random_ids(model, 1, SOURCE_TOKENS, seed=4).to(device)

    def captured():
        with capture_attention(model, activations=activations) as capture:
            model(src, tgt)
        return capture

    with torch.inference_mode():
        capture = captured()
        paired = alternate(captured, lambda: model(src, tgt), ctx.reps(15, 61), ctx.reps(2, 5), device)
    counted = {"captured_hook_points": len(capture.activations)} if activations else {}
    return Record(
        name,
        paired.candidate_median * 1000,
        "ms",
        paired.baseline_median * 1000,
        (Check("ratio", "<=", 1.3),),
        {
            "case": f"batch 1 x {SOURCE_TOKENS}",
            "baseline_is": "the same forward with nothing captured (fused attention kernel)",
            "captured_attention_modules": len(capture.attention),
            **counted,
            "captured_to": "CPU tensors (Capture.record copies)",
            **timing_params(paired),
        },
    )


class NeverEnds:
    """The model as greedy_decode sees it, with an EOS id no token can equal: decoding runs to max_new_tokens."""

    def __init__(self, model: Transformer) -> None:
        self._model = model
        config = model.config
        derived = {"start_id": config.start_id, "never_generated": config.never_generated}  # properties, not fields
        self.config = SimpleNamespace(**{**config.to_dict(), **derived, "eos_id": -1})

    def __getattr__(self, name: str):
        return getattr(self._model, name)


@torch.inference_mode()
def greedy_recompute(model, src_ids: torch.Tensor, steps: int) -> list[list[int]]:
    """Greedy decoding without a cache: every step runs the decoder over the whole prefix again."""
    memory, src_allowed = model.encode(src_ids)
    tokens = torch.full((src_ids.size(0), 1), model.config.start_id, dtype=torch.long, device=src_ids.device)
    for _ in range(steps):
        logits = model.decode(tokens, memory, src_allowed)  # (B, T, V), the full prefix every time
        next_token = next_token_log_probs(model, logits[:, -1]).argmax(dim=-1)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
    return tokens[:, 1:].tolist()


def kv_cache_speedup(ctx: Context) -> list[Record]:
    """Greedy decoding of 60 tokens with the KV cache (model.decoding.search.greedy_decode) vs recomputing the
    prefix."""
    steps = 60
    model = NeverEnds(ctx.subject.model)
    device = ctx.subject.device
    src = random_ids(ctx.subject.model, 1, SOURCE_TOKENS, seed=5).to(device)
    cached = greedy_decode(model, src, max_new_tokens=steps)
    recomputed = greedy_recompute(model, src, steps)
    paired = alternate(
        lambda: greedy_decode(model, src, max_new_tokens=steps),
        lambda: greedy_recompute(model, src, steps),
        ctx.reps(9, 21),  # a busy machine needs more than a few pairs for a stable median
        1,
        device,
    )
    return [
        Record(
            "kv_cache_speedup",
            steps / paired.candidate_median,
            "tokens/s",
            steps / paired.baseline_median,
            (Check("ratio", ">=", 3.0),),
            {
                "case": f"greedy, {steps} tokens, source {SOURCE_TOKENS}",
                "baseline_is": "the same greedy loop without a cache: model.decode over the whole prefix each step",
                "eos": "disabled (EOS id replaced by -1) so that both decode exactly 60 tokens",
                "same_tokens": cached == recomputed,
                "value_samples_s": paired.candidate,
                "baseline_samples_s": paired.baseline,
                "statistic": f"{steps} / median seconds",
            },
        )
    ]


def step_ms(ctx: Context) -> list[Record]:
    """One incremental decoding step (cached keys/values) under capture, at step 15 of a 30-token source."""
    model = ctx.subject.model
    device = ctx.subject.device
    prefix_length = 15
    src = random_ids(model, 1, SOURCE_TOKENS, seed=6).to(device)
    prefix = random_ids(model, 1, prefix_length, seed=7).to(device)
    prefix[0, 0] = model.config.start_id
    with torch.inference_mode():
        memory, src_allowed = model.encode(src)
        filled = model.new_cache()
        logits = model.decode(prefix, memory, src_allowed, cache=filled)
        next_input = next_token_log_probs(model, logits[:, -1]).argmax(dim=-1)[:, None]
    state = {}

    def fresh_cache() -> None:  # a step appends to the cache: every timed step starts from the same one
        state["cache"] = [{"self": dict(layer["self"]), "cross": dict(layer["cross"])} for layer in filled]

    def one_step():
        logits = model.decode(next_input, memory, src_allowed, cache=state["cache"], start=prefix_length)
        return next_token_log_probs(model, logits[:, -1]).argmax(dim=-1)

    def captured_step():
        with capture_attention(model):
            return one_step()

    with torch.inference_mode():
        paired = alternate(captured_step, one_step, ctx.reps(21, 101), ctx.reps(3, 10), device, prepare=fresh_cache)
    return [
        Record(
            "step_ms",
            paired.candidate_median * 1000,
            "ms",
            paired.baseline_median * 1000,
            (Check("value", "<=", 10.0),),
            {
                "case": f"step {prefix_length}, source {SOURCE_TOKENS}",
                "baseline_is": "the same cached step with nothing captured",
                "includes": f"decoder ({model.config.n_decoder_layers} layers, cached K/V), generator, argmax",
                **timing_params(paired),
            },
        )
    ]


def trace_ms(ctx: Context) -> list[Record]:
    """Translator.trace of a 30-piece sentence with beam 5 (encode, beam search, captured pass, Trace)
    vs Translator.translate of the same sentence with the same beam (no capture, no Trace)."""
    translator = ctx.subject.translator
    text = sentence_with_pieces(translator, SOURCE_TOKENS, seed=8)
    trace = translator.trace(text, beam_size=5)
    paired = alternate(
        lambda: translator.trace(text, beam_size=5),
        lambda: translator.translate(text, beam_size=5),
        ctx.reps(5, 21),
        1,
        ctx.subject.device,
    )
    return [
        Record(
            "trace_ms",
            paired.candidate_median * 1000,
            "ms",
            paired.baseline_median * 1000,
            (Check("value", "<=", 300.0),),
            {
                "case": f"beam 5, source {len(trace.source_ids)} pieces",
                "baseline_is": "Translator.translate of the same sentence, beam 5: decoding without capture or Trace",
                "source_pieces": len(trace.source_ids),
                "output_tokens": trace.n_steps,
                "sentence": text,
                **timing_params(paired),
            },
        )
    ]


def opus_shaped_translator(tokenizer: Tokenizer, device: torch.device) -> Translator:
    """A random model of opus-mt-en-de's shape, configured as ``python -m model.import_marian`` configures the real
    one (swish, Marian positions, final_logits_bias, decoding from <pad>), reading ``tokenizer``'s SentencePiece
    models in Marian mode: their pieces in a vocab.json laid out as OPUS-MT's (</s> 0, <unk> 1, <pad> last),
    filled to 58101 entries with pieces no text encodes to."""
    pieces = dict.fromkeys(["</s>", "<unk>"])
    for processor in (tokenizer.source, tokenizer.target):
        for index in range(processor.get_piece_size()):
            if not (processor.is_control(index) or processor.is_unknown(index)):
                pieces.setdefault(processor.id_to_piece(index))
    size = OPUS_MT_EN_DE["vocab_size"]
    fillers = (f"<unseen {n}>" for n in range(size))
    while len(pieces) < size - 1:
        pieces.setdefault(next(fillers))
    vocab = {piece: index for index, piece in enumerate([*pieces, "<pad>"])}
    marian = Tokenizer(tokenizer.source, tokenizer.target, vocab)
    config = marian_config(OPUS_MT_EN_DE, marian, Path("Helsinki-NLP/opus-mt-en-de (random weights)"))
    torch.manual_seed(0)
    model = Transformer(config).eval().to(device)
    return Translator(model, marian, device, name="opus-mt-en-de shape, random weights")


def opus_trace_ms(ctx: Context) -> list[Record]:
    """Translator.trace of a 30-piece sentence by a random model of opus-mt-en-de's shape (6+6 layers, d_model 512,
    8 heads, d_ff 2048, 58101 pieces) vs the subject's (the shipped model's) trace of the same sentence, greedy (as
    the page decodes) and beam 5; the random model makes as many output tokens as the shipped one (it never ends
    by itself, so max_new_tokens stops it there)."""
    shipped = ctx.subject.translator
    device = ctx.subject.device
    opus = opus_shaped_translator(shipped.tokenizer, device)
    text = sentence_with_pieces(shipped, SOURCE_TOKENS, seed=8)
    records = []
    for beam_size, budget_ms in ((1, 1000.0), (5, 2500.0)):
        expected = shipped.trace(text, beam_size=beam_size)
        steps = expected.n_steps
        traced = opus.trace(text, beam_size=beam_size, max_new_tokens=steps)
        paired = alternate(
            lambda beam_size=beam_size, steps=steps: opus.trace(text, beam_size=beam_size, max_new_tokens=steps),
            lambda beam_size=beam_size: shipped.trace(text, beam_size=beam_size),
            ctx.reps(3, 11),
            1,
            device,
        )
        config = opus.config
        records.append(
            Record(
                "opus_trace_ms",
                paired.candidate_median * 1000,
                "ms",
                paired.baseline_median * 1000,
                (Check("value", "<=", budget_ms),),
                {
                    "case": "greedy" if beam_size == 1 else f"beam {beam_size}",
                    "baseline_is": "Translator.trace of the same sentence by the benchmarks' subject (the shipped "
                    "model), same beam",
                    "candidate_is": f"random weights, opus-mt-en-de's shape: {config.n_encoder_layers}+"
                    f"{config.n_decoder_layers} layers, d_model {config.d_model}, {config.n_heads} heads, d_ff "
                    f"{config.d_ff}, {config.tgt_vocab_size} pieces, {config.activation}, Marian positions",
                    "source_pieces": len(traced.source_ids),
                    "baseline_source_pieces": len(expected.source_ids),
                    "output_tokens": traced.n_steps,
                    "baseline_output_tokens": steps,
                    "parameters": sum(parameter.numel() for parameter in opus.model.parameters()),
                    "sentence": text,
                    **timing_params(paired),
                },
            )
        )
    return records


def attribution_ms(ctx: Context) -> list[Record]:
    """Every attribution method (model.analysis.attribution.ATTRIBUTION_METHODS) of a 30-piece sentence's trace
    vs Translator.trace of it (greedy, as the page decodes): what the Word sources view adds to a page run."""
    translator = ctx.subject.translator
    text = sentence_with_pieces(translator, SOURCE_TOKENS, seed=8)
    trace = translator.trace(text, beam_size=1)

    def attribute_all() -> None:
        for method in ATTRIBUTION_METHODS:
            attribute(translator, trace, method)

    paired = alternate(
        attribute_all, lambda: translator.trace(text, beam_size=1), ctx.reps(5, 21), 1, ctx.subject.device
    )
    return [
        Record(
            "attribution_ms",
            paired.candidate_median * 1000,
            "ms",
            paired.baseline_median * 1000,
            (Check("value", "<=", 1000.0),),
            {
                "case": f"{', '.join(ATTRIBUTION_METHODS)}; source {len(trace.source_ids)} pieces",
                "baseline_is": "Translator.trace of the same sentence, greedy",
                "source_pieces": len(trace.source_ids),
                "output_tokens": trace.n_steps,
                **timing_params(paired),
            },
        )
    ]
