"""Benchmarks of the model itself: forward pass against torch.nn.Transformer, capture, KV cache,
one decoding step, a full trace, a trace at opus-mt-en-de's size, a long input, and training throughput."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from benchmarks.context import Context
from benchmarks.records import Check, Record
from benchmarks.subject import sentence_with_pieces
from benchmarks.timing import alternate
from model import capture_attention
from model.analysis.attribution import ATTRIBUTION_METHODS
from model.decoding import greedy_decode, next_token_log_probs
from model.interop import export_torch
from model.interop.marian import marian_config
from model.interop.torch_transformer import tutorial_logits
from model.tokenizer import Tokenizer
from model.training.data import Example, collate, encode_examples, read_parallel, split_file, token_batches
from model.training.loss import TranslationLoss, logits_loss
from model.training.optimization import train_step
from model.transformer import Transformer
from model.translator import Translator

SOURCE_TOKENS = 30  # "a 30-token sentence": source ids including EOS
MAX_TOKENS = 4096  # python -m model.train's default --max-tokens: the batches an epoch of training makes
EPOCH_SEED = 1001  # model.train's batch order of epoch 1 with its default --seed 1 (seed * 1000 + epoch)
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
    model = ctx.subject.model
    device = ctx.subject.device
    src = random_ids(model, 1, SOURCE_TOKENS, seed=3).to(device)
    tgt = random_ids(model, 1, SOURCE_TOKENS, seed=4).to(device)

    def captured():
        with capture_attention(model) as capture:
            model(src, tgt)
        return capture

    with torch.inference_mode():
        modules = len(captured().attention)
        paired = alternate(captured, lambda: model(src, tgt), ctx.reps(15, 61), ctx.reps(2, 5), device)
    return [
        Record(
            "capture_overhead",
            paired.candidate_median * 1000,
            "ms",
            paired.baseline_median * 1000,
            (Check("ratio", "<=", 1.3),),
            {
                "case": f"batch 1 x {SOURCE_TOKENS}",
                "baseline_is": "the same forward with nothing captured (fused attention kernel)",
                "captured_attention_modules": modules,
                "captured_to": "CPU tensors (Capture.record copies)",
                **timing_params(paired),
            },
        )
    ]


class NeverEnds:
    """The model as greedy_decode sees it, with an EOS id no token can equal: decoding runs to max_len."""

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
    """Greedy decoding of 60 tokens with the KV cache (model.decoding.greedy_decode) vs recomputing the prefix."""
    steps = 60
    model = NeverEnds(ctx.subject.model)
    device = ctx.subject.device
    src = random_ids(ctx.subject.model, 1, SOURCE_TOKENS, seed=5).to(device)
    cached = greedy_decode(model, src, max_len=steps)
    recomputed = greedy_recompute(model, src, steps)
    paired = alternate(
        lambda: greedy_decode(model, src, max_len=steps),
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
    by itself, so max_len stops it there)."""
    shipped = ctx.subject.translator
    device = ctx.subject.device
    opus = opus_shaped_translator(shipped.tokenizer, device)
    text = sentence_with_pieces(shipped, SOURCE_TOKENS, seed=8)
    records = []
    for beam_size, budget_ms in ((1, 1000.0), (5, 2500.0)):
        expected = shipped.trace(text, beam_size=beam_size)
        steps = expected.n_steps
        traced = opus.trace(text, beam_size=beam_size, max_len=steps)
        paired = alternate(
            lambda beam_size=beam_size, steps=steps: opus.trace(text, beam_size=beam_size, max_len=steps),
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
            translator.attribute(trace, method)

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


class TrainingPair:
    """Our model in training mode and its tutorial nn.Transformer copy (same weights), each with the optimizer of
    python -m model.train (AdamW, betas 0.9/0.98, no weight decay), both stepped by
    model.training.optimization.train_step."""

    def __init__(self, model: Transformer, device: torch.device) -> None:
        self.ours = copy.deepcopy(model).float().to(device).train().requires_grad_(True)
        self.theirs = tutorial_copy(self.ours).to(device).train().requires_grad_(True)
        self.pad = model.config.pad_id
        self.modules = {"ours": self.ours, "theirs": self.theirs}
        self.losses = {
            "ours": TranslationLoss(self.ours, self.pad, label_smoothing=0.1),
            "theirs": logits_loss(
                lambda src, tgt_in: tutorial_logits(self.theirs, src, tgt_in, self.pad), self.pad, label_smoothing=0.1
            ),
        }
        self.optimizers = {
            side: torch.optim.AdamW(module.parameters(), lr=1e-4, betas=(0.9, 0.98), weight_decay=0.0)
            for side, module in self.modules.items()
        }

    def step(self, side: str, src: torch.Tensor, tgt: torch.Tensor, use_amp: bool) -> torch.Tensor:
        """One train_step of "ours" or "theirs" (label smoothing 0.1, clipping at 1, the token-mean loss): ours
        through python -m model.train's TranslationLoss (fused with the output projection on the CPU), theirs from
        its logits."""
        return train_step(
            self.losses[side],
            self.modules[side].parameters(),
            self.optimizers[side],
            src,
            tgt,
            clip_norm=1.0,
            use_amp=use_amp,
            loss_divisor=float((tgt[:, 1:] != self.pad).sum()),
        )


def train_tokens_vs_torch(ctx: Context) -> list[Record]:
    """Training steps (model.training.optimization.train_step: forward, label-smoothed loss, backward, clip,
    AdamW) of our model vs the tutorial-layout nn.Transformer with the same weights, on the same batches, steps
    alternating; target tokens per second."""
    device = ctx.subject.device
    pair = TrainingPair(ctx.subject.model, device)
    batch, length = (32, 32) if ctx.quick else (128, 32)  # ~ --max-tokens 4096 of python -m model.train
    batches = [
        (
            random_ids(pair.ours, batch, length, seed=10 + i).to(device),
            random_ids(pair.ours, batch, length + 1, seed=20 + i).to(device),
        )
        for i in range(3)
    ]
    tokens = batch * length  # target tokens predicted per step (nothing padded)
    counter = {"ours": 0, "theirs": 0}

    def step(side: str) -> None:
        src, tgt = batches[counter[side] % len(batches)]
        counter[side] += 1
        pair.step(side, src, tgt, use_amp=False)

    paired = alternate(lambda: step("ours"), lambda: step("theirs"), ctx.reps(3, 15), 1, device)
    return [
        Record(
            "train_tokens_vs_torch",
            tokens / paired.candidate_median,
            "tokens/s",
            tokens / paired.baseline_median,
            (Check("ratio", ">=", 0.95),),
            {
                "case": f"batch {batch} x {length}",
                "baseline_is": "export_torch(model): tutorial Seq2SeqTransformer on nn.Transformer, same weights, "
                "same batches, the same loss (from its logits; ours fused with the output projection on the CPU) "
                "and optimizer",
                "tokens_per_step": tokens,
                "dropout": pair.ours.config.dropout,
                "value_samples_s": paired.candidate,
                "baseline_samples_s": paired.baseline,
                "statistic": "tokens_per_step / median seconds",
            },
        )
    ]


def training_examples(ctx: Context, limit: int | None = None) -> tuple[list[Example], tuple[str, str]]:
    """The subject's training examples (the first ``limit`` pairs of --data's train split, in the checkpoint card's
    languages), encoded as ``python -m model.train`` encodes them, and the languages."""
    translator = ctx.subject.translator
    languages = (translator.card.get("source_language", "en"), translator.card.get("target_language", "de"))
    pairs = read_parallel(*(split_file(ctx.data, "train", language) for language in languages))[:limit]
    return encode_examples(pairs, translator.tokenizer, translator.config), languages


def train_epoch_s(ctx: Context) -> list[Record]:
    """Wall time of one training epoch over the Multi30k training split: every batch ``python -m model.train``
    would make (token-bucketed, --max-tokens 4096, its seed), each collated, moved to the device and passed through
    model.training.optimization.train_step (bf16 autocast on CUDA, as there), ours and the tutorial nn.Transformer
    in turns."""
    device = ctx.subject.device
    config = ctx.subject.translator.config
    examples, languages = training_examples(ctx)
    batches = token_batches(examples, MAX_TOKENS, seed=EPOCH_SEED)
    pair = TrainingPair(ctx.subject.model, device)
    pad = config.pad_id
    use_amp = device.type == "cuda"
    counter = {"ours": 0, "theirs": 0}
    warmup = min(3, len(batches))
    report_every = max(1, len(batches) // 10)

    def step(side: str) -> None:
        # warm-up takes the first batches; the timed steps then wrap round, so each batch is timed once per side
        indices = batches[counter[side] % len(batches)]
        counter[side] += 1
        timed = counter[side] - warmup
        if side == "theirs" and timed > 0 and timed % report_every == 0:  # minutes on a CPU: show it moving
            print(f"  train_epoch_s: {timed}/{len(batches)} batches", file=sys.stderr, flush=True)
        src, tgt = collate([examples[i] for i in indices], pad)
        src, tgt = src.to(device, non_blocking=True), tgt.to(device, non_blocking=True)
        loss = pair.step(side, src, tgt, use_amp)
        float(loss)  # model.train reads every step's loss, which waits for the device as this does

    paired = alternate(lambda: step("ours"), lambda: step("theirs"), len(batches), warmup, device)
    target_tokens = sum(len(example.tgt) - 1 for example in examples)
    value, baseline = sum(paired.candidate), sum(paired.baseline)
    return [
        Record(
            "train_epoch_s",
            value,
            "s",
            baseline,
            (),
            {
                "case": f"{ctx.data.name} train {languages[0]}-{languages[1]}, {len(batches)} batches",
                "baseline_is": "the same epoch (same batches, same train_step) for export_torch(model), the tutorial "
                "Seq2SeqTransformer on nn.Transformer with the same weights, its steps in turns with ours",
                "data": str(ctx.data),
                "sentences": len(examples),
                "batches": len(batches),
                "max_tokens": MAX_TOKENS,
                "target_tokens": target_tokens,
                "tokens_per_s": target_tokens / value,
                "baseline_tokens_per_s": target_tokens / baseline,
                "bf16_autocast": use_amp,
                "value_samples_s": paired.candidate,
                "baseline_samples_s": paired.baseline,
                "statistic": "sum of the epoch's step times (collate, copy to the device, train_step)",
            },
        )
    ]
