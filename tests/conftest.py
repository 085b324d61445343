"""Fixtures of unit and integration tests alike: the tiny chat model made at setup, its
tokenizer, and the same model as an embedding model. Integration fixtures (the server) are in tests/integration/conftest.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.repositories import ROOT

TINY_MODEL = ROOT / "build" / "tiny-chat"
TINY_EMBED = ROOT / "build" / "tiny-embed"


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    if not (TINY_MODEL / ".complete").exists():
        subprocess.run([sys.executable, str(ROOT / "harness" / "tiny_model.py"), "--out", str(TINY_MODEL)], check=True)
    return TINY_MODEL


@pytest.fixture(scope="session")
def tiny_embedding_model(tiny_model) -> Path:
    """The tiny model's weights as an embedding model (harness/tiny_embedding_model.py; quick,
    and left alone when up to date)."""
    from harness import tiny_embedding_model  # noqa: PLC0415

    tiny_embedding_model.build(tiny_model, TINY_EMBED)
    return TINY_EMBED


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    from tritonchat.template import load_tokenizer  # noqa: PLC0415  (transformers is a heavy import)

    return load_tokenizer(str(tiny_model))


@pytest.fixture(scope="session")
def harmony_vocab():
    """The o200k vocabulary openai_harmony reads (gpt-oss parsers), made offline from
    quicktok-v1's ranks, with TIKTOKEN_ENCODINGS_BASE pointing at it (as `make setup` does)."""
    from harness import o200k as make_o200k_vocab  # noqa: PLC0415

    target = make_o200k_vocab.make(ROOT / "build" / "o200k")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_ENCODINGS_BASE", str(target.parent))
        yield target.parent
