"""Training and scoring.

train: the training loop (``python -m model.train``), with what a run starts from (start:
corpus, tokenizer, configuration, --init-from), its command line and saved arguments
(options), resumable state (state), process group (distributed), optimisation step and
schedule (optimization) and per-epoch validation (validation). data: corpora,
examples and token-bucketed batches. evaluate: BLEU and chrF on a test set
(``python -m model.evaluate``). toy_tasks: synthetic tasks whose attention has a known answer.

model/train.py and model/evaluate.py only run ``main`` of train and evaluate, so the public
commands keep their names.
"""
