"""``python -m model.import_marian SRC_DIR OUT_DIR [--fp16]``: the older name of ``python -m model.import_hf``, from
when it converted OPUS-MT models only; it runs the same command.
"""

import sys

from model.interop.huggingface import main

if __name__ == "__main__":
    sys.exit(main())
