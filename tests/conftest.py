"""Fixtures of unit and integration tests alike: the tiny chat model made at setup, and its
tokenizer. Integration fixtures (the server) are in tests/integration/conftest.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.repositories import ROOT

TINY_MODEL = ROOT / "build" / "tiny-chat"


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    if not (TINY_MODEL / ".complete").exists():
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_model.py"), "--out", str(TINY_MODEL)], check=True)
    return TINY_MODEL


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    from tritonchat.template import load_tokenizer  # noqa: PLC0415  (transformers is a heavy import)

    return load_tokenizer(str(tiny_model))
