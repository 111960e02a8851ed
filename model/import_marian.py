"""``python -m model.import_marian SRC_DIR OUT_DIR [--fp16]``: the MarianMT importer's public name.

The conversion lives in model.interop.marian; this module only runs its ``main``.
"""

import sys

from model.interop.marian import main

if __name__ == "__main__":
    sys.exit(main())
