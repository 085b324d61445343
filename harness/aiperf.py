"""AIPerf in its own environment (build/aiperf-venv, from requirements-aiperf.txt): its
dependencies would otherwise replace packages vLLM needs in the project's environment.

    python -m harness.aiperf      # makes it (once, and again when the requirements change)
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from harness import BUILD, ROOT

VENV = BUILD / "aiperf-venv"
REQUIREMENTS = ROOT / "requirements-aiperf.txt"


def stamp() -> Path:
    return VENV / (".ready-" + hashlib.sha1(REQUIREMENTS.read_bytes()).hexdigest()[:12])


def aiperf() -> Path:
    """The `aiperf` command of the environment, made first when needed."""
    binary = VENV / "bin" / "aiperf"
    if not stamp().exists():
        print(f"installing AIPerf into {VENV} (once)", file=sys.stderr, flush=True)
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-compile", "-r", str(REQUIREMENTS)], check=True)
        stamp().touch()
    return binary


if __name__ == "__main__":
    print(aiperf())
