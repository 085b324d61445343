"""Write the o200k vocabulary that `openai_harmony` needs, without a download.

    python harness/o200k.py [--out DIR] [--source FILE]

`openai_harmony` (the gpt-oss output format library that vLLM uses) fetches its
o200k_base vocabulary from the internet the first time it is used, unless the environment
variable TIKTOKEN_ENCODINGS_BASE names a folder that already holds `o200k_base.tiktoken`.
This script writes that file from the copy of the same ranks that the `quicktok-v1`
package ships (`quicktok/data/o200k.vocab`), so gpt-oss parsing works offline and in
air-gapped deployments:

    python harness/o200k.py --out build/o200k
    export TIKTOKEN_ENCODINGS_BASE=$PWD/build/o200k

quicktok's file is a little-endian u32 token count, then per token a u16 length, the
token's bytes and a u32 rank. tiktoken's format is one line per token: the bytes in
base64, a space, the rank. The result must have the sha256 that tiktoken and
openai_harmony check (the published one); anything else is refused and nothing is written.
A file that is already there with the right hash is left alone.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import os
import struct
import sys
import tempfile
from importlib import metadata
from pathlib import Path

FILE_NAME = "o200k_base.tiktoken"
SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
TOKEN_COUNT = 199_998
DISTRIBUTION = "quicktok-v1"
SOURCE_IN_PACKAGE = "quicktok/data/o200k.vocab"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "build" / "o200k"


class VocabError(Exception):
    pass


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_source() -> Path:
    """quicktok's o200k.vocab in the installed package (found without importing quicktok)."""
    try:
        path = Path(metadata.distribution(DISTRIBUTION).locate_file(SOURCE_IN_PACKAGE))
        if path.is_file():
            return path
    except metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("quicktok")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "data" / "o200k.vocab"
        if path.is_file():
            return path
    raise VocabError(
        f"{SOURCE_IN_PACKAGE} not found: install the pinned {DISTRIBUTION} package "
        "(see requirements-local.txt), or pass --source"
    )


def convert(data: bytes) -> bytes:
    """quicktok's binary vocabulary as the text of a .tiktoken file, lines in rank order."""
    try:
        (count,) = struct.unpack_from("<I", data, 0)
        position = 4
        ranks: dict[int, bytes] = {}
        for _ in range(count):
            (length,) = struct.unpack_from("<H", data, position)
            position += 2
            token = data[position : position + length]
            if len(token) != length:
                raise VocabError("the file ends inside a token")
            position += length
            (rank,) = struct.unpack_from("<I", data, position)
            position += 4
            if rank in ranks:
                raise VocabError(f"rank {rank} appears twice")
            ranks[rank] = token
    except struct.error as error:
        raise VocabError(f"truncated vocabulary file ({error})") from None
    if position != len(data):
        raise VocabError(f"{len(data) - position} unexpected bytes after {count} tokens")
    return b"".join(base64.b64encode(ranks[rank]) + b" %d\n" % rank for rank in sorted(ranks))


def make(out: Path, source: Path | None = None) -> Path:
    """Write `out`/o200k_base.tiktoken unless it is already there and right; return its path."""
    target = out / FILE_NAME
    if target.is_file() and sha256_of(target) == SHA256:
        return target
    source = source or find_source()
    text = convert(source.read_bytes())
    digest = hashlib.sha256(text).hexdigest()
    if digest != SHA256:
        lines = text.count(b"\n")
        raise VocabError(
            f"{source} does not convert to the official {FILE_NAME}: sha256 {digest}, expected {SHA256}"
            f" ({lines} tokens, expected {TOKEN_COUNT})"
        )
    out.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=out, prefix=FILE_NAME + ".")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder for {FILE_NAME} (default: build/o200k)")
    parser.add_argument("--source", type=Path, help="quicktok's o200k.vocab (default: the installed package's)")
    args = parser.parse_args(argv)
    try:
        target = make(args.out, args.source)
    except (VocabError, OSError) as error:
        print(f"make_o200k_vocab: error: {error}", file=sys.stderr)
        return 1
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
