"""``python -m model.import_hf FOLDER_OR_MODEL_ID OUT_DIR [--fp16]``: the Hugging Face converter's public name
(OPUS-MT, mBART-50, M2M100, NLLB).

The conversion lives in model.interop.huggingface; this module only runs its ``main``.
"""

import sys

from model.interop.huggingface import main

if __name__ == "__main__":
    sys.exit(main())
