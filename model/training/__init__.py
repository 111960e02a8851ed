"""Training and scoring: the translation models' training (``python -m model.train``) and scoring, and the toy trainings
a class watches.

The layout and the rules between the packages: docs/architecture.md.
"""
