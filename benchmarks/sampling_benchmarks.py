"""Benchmarks of sampling: a sampled trace against a greedy trace of the same output, and "sample again" (20 draws in
one batch, scored, with greedy and beam beside them) against 20 sampled traces one by one."""

from __future__ import annotations

from benchmarks.context import Context
from benchmarks.model_benchmarks import timing_params
from benchmarks.records import Check, Record
from benchmarks.timing import alternate
from model.analysis.samples import MAX_SAMPLES, sample_again
from model.decoding import Sampling

SENTENCE = "A man in a blue shirt is riding a bike down the street past a crowded cafe."
# Every sampling step (temperature, top-k, top-p, the draw) is taken, yet the draw can only be greedy's token: the same
# output, so the two traces differ only in how each token is chosen
GREEDY_LIKE = Sampling(temperature=1e-4, top_k=50, top_p=0.9, seed=1)


def sampled_trace_ms(ctx: Context) -> list[Record]:
    """Translator.trace sampling vs greedy, on the same output (GREEDY_LIKE draws greedy's tokens)."""
    translator = ctx.subject.translator
    sampled = translator.trace(SENTENCE, sampling=GREEDY_LIKE)
    greedy = translator.trace(SENTENCE, beam_size=1)
    if sampled.target_ids != greedy.target_ids:
        raise RuntimeError("the near-zero temperature drew another output than greedy's: the comparison is void")
    paired = alternate(
        lambda: translator.trace(SENTENCE, sampling=GREEDY_LIKE),
        lambda: translator.trace(SENTENCE, beam_size=1),
        ctx.reps(9, 31),
        2,
        ctx.subject.device,
    )
    return [
        Record(
            "sampled_trace_ms",
            paired.candidate_median * 1000,
            "ms",
            paired.baseline_median * 1000,
            (Check("ratio", "<=", 1.1),),
            {
                "case": f"{GREEDY_LIKE.describe()}, {greedy.n_steps} output tokens",
                "baseline_is": "Translator.trace of the same sentence with greedy search: the same output",
                "output_tokens": greedy.n_steps,
                **timing_params(paired),
            },
        )
    ]


def sample_again_ms(ctx: Context) -> list[Record]:
    """sample_again with 20 draws (one batched search, each distinct output scored, greedy and beam beside) vs 20
    sampled traces of the sentence, one per seed."""
    translator = ctx.subject.translator
    sampling = Sampling(temperature=1.0, seed=1)
    table = sample_again(translator, SENTENCE, sampling, MAX_SAMPLES)
    seeds = [Sampling(temperature=1.0, seed=seed) for seed in range(MAX_SAMPLES)]
    paired = alternate(
        lambda: sample_again(translator, SENTENCE, sampling, MAX_SAMPLES),
        lambda: [translator.trace(SENTENCE, sampling=drawn) for drawn in seeds],
        ctx.reps(3, 11),
        1,
        ctx.subject.device,
    )
    return [
        Record(
            "sample_again_ms",
            paired.candidate_median * 1000,
            "ms",
            paired.baseline_median * 1000,
            (Check("value", "<=", 1000.0), Check("ratio", "<=", 1.0)),
            {
                "case": f"{MAX_SAMPLES} draws at temperature 1, {len(table.samples)} distinct",
                "baseline_is": f"{MAX_SAMPLES} Translator.trace calls sampling the sentence, one seed each",
                "distinct_outputs": len(table.samples),
                **timing_params(paired),
            },
        )
    ]
