"""`make bench-token-path`: the chat layer's own CPU per token, without a server.

The micro-benchmark itself is harness/bench/token_path.py (`--help` lists the options).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from harness.bench.token_path import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
