"""What the generation model really takes: its inputs and outputs, read from the server.

TensorRT-LLM's input names and optional inputs changed between releases (`random_seed` became
`seed` and `min_length` became `min_tokens`; `return_num_input_tokens` / `num_input_tokens`
and the guided-decoding inputs are recent). Rather than trusting hand-set parameters, the
request format learns the target's interface from Triton's model-configuration endpoint
(`GET /v2/models/<name>/config`) at the first request (the server's endpoints are not up
while models load) and chooses names and features from it; the parameters stay as
overrides. If the server cannot be asked, the parameters and their defaults apply.

Triton's vLLM backend renamed its constrained-generation key with the vLLM it ships:
`guided_decoding` in 25.01-25.10, `structured_outputs` from 25.11 (the release that also
added the `embedding_request` input); before 25.01 it had none. Its inputs tell 25.11 and
later apart; the server's version tells the two older eras apart.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, replace

from .formats import FormatOptions


@dataclass(frozen=True)
class TargetInterface:
    """A generation model's input and output names, and the server's version."""

    inputs: frozenset[str]
    outputs: frozenset[str]
    server_version: str = ""
    decoupled: bool = True

    @classmethod
    def from_config(cls, config: dict, server_version: str = "") -> TargetInterface:
        return cls(
            frozenset(tensor["name"] for tensor in config.get("input", [])),
            frozenset(tensor["name"] for tensor in config.get("output", [])),
            server_version,
            bool((config.get("model_transaction_policy") or {}).get("decoupled", False)),
        )


def fetch_interface(http_url: str, model: str, version: int = -1, headers: dict[str, str] | None = None,
                    timeout: float = 5.0) -> TargetInterface:
    """Ask the server at `http_url` (host:port) for `model`'s configuration and its version."""
    base = http_url if "://" in http_url else f"http://{http_url}"

    def get(path: str) -> dict:
        request = urllib.request.Request(base + path, headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (the configured server)
            return json.loads(response.read())

    path = f"/v2/models/{model}" + (f"/versions/{version}" if version >= 0 else "") + "/config"
    config = get(path)
    try:
        server_version = str(get("/v2").get("version", ""))
    except Exception:  # noqa: BLE001  (the version is informative only)
        server_version = ""
    return TargetInterface.from_config(config, server_version)


# Triton's version of its 25.01 release, the first whose vLLM backend takes `guided_decoding`.
GUIDED_DECODING_SINCE = (2, 54)


def _version(text: str) -> tuple[int, ...] | None:
    parts = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def vllm_structured_outputs_key(interface: TargetInterface) -> str:
    """The vLLM backend's sampling-parameters key for constrained generation, or "" if its
    release has none."""
    if "embedding_request" in interface.inputs:  # 25.11 and later
        return "structured_outputs"
    version = _version(interface.server_version)
    if version is None:  # unknown: assume the current release
        return "structured_outputs"
    return "guided_decoding" if version >= GUIDED_DECODING_SINCE else ""


def _first_present(names: tuple[str, ...], inputs: frozenset[str]) -> str:
    return next((name for name in names if name in inputs), "")


def adapt_options(options: FormatOptions, interface: TargetInterface, *, seed_input: str = "",
                  min_tokens_input: str = "", token_counts: str = "auto",
                  structured_outputs_key: str = "") -> FormatOptions:
    """`options` with what the target takes: input names of its release (unless set by
    `seed_input` / `min_tokens_input`), whether it reports token counts (unless
    `token_counts` is "true" / "false"), the vLLM backend's constrained-generation key
    (unless set by `structured_outputs_key`), and its input names for the formats' checks."""
    inputs = interface.inputs
    counts = {"true": True, "false": False}.get(
        token_counts, "return_num_input_tokens" in inputs and "num_input_tokens" in interface.outputs)
    return replace(
        options,
        seed_input=seed_input or _first_present(("seed", "random_seed"), inputs),
        min_tokens_input=min_tokens_input or _first_present(("min_tokens", "min_length"), inputs),
        token_count_outputs=counts,
        structured_outputs_key=structured_outputs_key or vllm_structured_outputs_key(interface),
        target_inputs=inputs,
        target_decoupled=interface.decoupled,
    )
