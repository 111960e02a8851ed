"""``python -m model.evaluate``: the scoring command's public name (docs/command-line.md).

The scoring code lives in model.training.evaluate; this module only runs its ``main``, so the
command and the commands recorded on checkpoint cards keep working.
"""

from model.training.evaluate import main

if __name__ == "__main__":
    main()
