"""The exact bytes of a token, for OpenAI's `logprobs[].bytes`.

A token's decoded text can be a lone piece of a multi-byte character (shown as U+FFFD);
OpenAI clients rebuild such characters from `bytes`, so they must be the token's own
bytes. Byte-level BPE (GPT-2, Llama 3, Qwen) and SentencePiece byte fallback both encode
them in the vocabulary entry; other tokenizers fall back to the decoded text.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
    """Character -> byte of byte-level BPE: printable bytes stand for themselves, the rest
    are shifted past 255 in order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    alphabet = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in printable:
            alphabet[chr(256 + shifted)] = b
            shifted += 1
    return alphabet


def _decoder_kinds(tokenizer) -> set[str]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return set()
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    kinds = {decoder.get("type")}
    for part in decoder.get("decoders") or []:
        kinds.add(part.get("type"))
    return {k for k in kinds if k}


class TokenBytes:
    """token id (and its decoded text) -> the token's bytes."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        kinds = _decoder_kinds(tokenizer)
        self._byte_level = "ByteLevel" in kinds
        self._sentencepiece = bool(kinds & {"ByteFallback", "Metaspace", "Replace"})
        self._cache: dict[int, list[int]] = {}

    def __call__(self, token_id: int, text: str) -> list[int]:
        if token_id < 0:  # unknown id: the text's own bytes
            return list(text.encode("utf-8"))
        cached = self._cache.get(token_id)
        if cached is None:
            cached = self._cache[token_id] = self._bytes(token_id, text)
        return cached

    def _bytes(self, token_id: int, text: str) -> list[int]:
        try:
            piece = self._tokenizer.convert_ids_to_tokens(token_id)
        except Exception:  # noqa: BLE001  (ids outside the vocabulary)
            piece = None
        if isinstance(piece, str):
            if self._byte_level:
                alphabet = byte_level_alphabet()
                if all(ch in alphabet for ch in piece):
                    return [alphabet[ch] for ch in piece]
            if self._sentencepiece:
                match = _BYTE_TOKEN.match(piece)
                if match:
                    return [int(match.group(1), 16)]
                return list(piece.replace("\u2581", " ").encode("utf-8"))
        return list(text.encode("utf-8"))
