"""Build the tiny embedding model from the tiny chat model.

    python harness/tiny_embedding_model.py --chat build/tiny-chat --out build/tiny-embed

The same weights and tokenizer as the tiny chat model (harness/tiny_model.py; the weights file
is linked, not copied), with a config.json that says it is an embedding model of Matryoshka
dimensions (`matryoshka_dimensions`, as vLLM reads them). vLLM serves it as an embedding model
with the engine arguments `EMBEDDING_ENGINE_ARGS` (its Llama run by the pooling runner, each
input's last token pooled and normalized), so its vectors are random but real: the engine
computes them. Takes well under a second; a directory built from the same chat model and this
script's recipe is left alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

# What vLLM needs to run the Llama of the chat model as an embedding model.
EMBEDDING_ENGINE_ARGS = {"runner": "pooling", "convert": "embed"}
# The embedding sizes a request's `dimensions` may ask for (the full size is the hidden size, 128).
MATRYOSHKA_DIMENSIONS = [32, 64, 128]
COPIED = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja")
WEIGHTS = "model.safetensors"
STAMP_FILE = ".tiny-embed-version"

README = """\
# tritonchat tiny embedding model

The tiny chat model's weights and tokenizer (random weights, built by `harness/tiny_model.py`),
served as an embedding model: `harness/tiny_embedding_model.py` writes this directory. vLLM runs
it with `runner: pooling`, `convert: embed`; its config names the Matryoshka dimensions
32, 64 and 128 that a request's `dimensions` may ask for. Its vectors mean nothing; they exist
so the embedding path can be tested on a CPU without downloading anything.
"""


def recipe_stamp(chat_dir: Path) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for name in ("config.json", WEIGHTS, *COPIED):
        path = chat_dir / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def build(chat_dir: Path, out_dir: Path, force: bool = False) -> bool:
    """Write the embedding model into `out_dir`; False when an up-to-date one is there."""
    stamp = recipe_stamp(chat_dir)
    stamp_path = out_dir / STAMP_FILE
    if not force and stamp_path.is_file() and stamp_path.read_text().strip() == stamp:
        return False
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp_path.unlink(missing_ok=True)
    for name in COPIED:
        if (chat_dir / name).is_file():
            shutil.copyfile(chat_dir / name, out_dir / name)
    weights = out_dir / WEIGHTS
    weights.unlink(missing_ok=True)
    try:
        os.link(chat_dir / WEIGHTS, weights)
    except OSError:  # another file system
        shutil.copyfile(chat_dir / WEIGHTS, weights)
    config = json.loads((chat_dir / "config.json").read_text())
    config["matryoshka_dimensions"] = MATRYOSHKA_DIMENSIONS
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out_dir / "README.md").write_text(README)
    stamp_path.write_text(stamp + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chat", type=Path, required=True, help="the tiny chat model's directory")
    parser.add_argument("--out", type=Path, required=True, help="directory to write the embedding model into")
    parser.add_argument("--force", action="store_true", help="rebuild even if DIR holds an up-to-date build")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if build(args.chat.resolve(), out, args.force):
        print(f"built tiny embedding model in {out}")
    else:
        print(f"tiny embedding model in {out} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
