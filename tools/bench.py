"""`make bench`: `openai_chat` against the generation model it calls, in one run.

The benchmark itself is harness/bench/ (`--help` lists the options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
