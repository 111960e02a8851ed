"""Decoding: how the model's output is found and recorded. The searches (search), how sampling reshapes and draws
from each distribution (sampling; ``Sampling`` is exported here), how a beam ranks and stops (scoring), what a beam
search examined (beam_tree), what-if decoding's forced choice (whatif), an imported model's own generate settings
(authors) and the passes a Trace is built from (passes).

Only plain data is imported here, so that the plain-data modules (sampling, scoring, beam_tree) load without torch.
The layout and the rules between the packages: docs/architecture.md.
"""

from model.decoding.sampling import Sampling

__all__ = ["Sampling"]
