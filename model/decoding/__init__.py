"""Decoding: how the model's output is found and recorded. The searches (search), how a beam ranks and stops
(scoring), what a beam search examined (beam_tree), what-if decoding's forced choice (whatif), an imported model's own
generate settings (authors) and the passes a Trace is built from (passes).

Nothing is imported here, so that plain-data modules (scoring, beam_tree) load without torch. The layout and the rules
between the packages: docs/architecture.md.
"""
