"""`make serve`: a local Triton server with openai_chat in front of vLLM on the CPU (see
harness/serve.py, where it is built, and `python tools/serve.py --help`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.serve import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
