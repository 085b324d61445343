"""Disconnect storm: streaming clients that drop their connection at random points (see
harness/storm.py and `python tools/storm.py --help`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.storm import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
