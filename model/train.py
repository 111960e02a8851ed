"""``python -m model.train``: the training command's public name (docs/command-line.md).

The training code lives in model.training.train; this module only runs its ``main``, so the
command, ``torchrun -m model.train`` and the commands recorded on checkpoint cards keep working.
"""

from model.training.train import main

if __name__ == "__main__":
    main()
