"""Model repositories for local servers: `openai_chat` copies with chosen parameters, the
stand-in models of `harness/models`, the vLLM model for a model directory. Used by the tests, the
benchmark and the disconnect storm."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tritonchat.repository import set_parameter

ROOT = Path(__file__).resolve().parent.parent
# The stand-in generation models (scripted, TensorRT-LLM interfaces), kept with the tests.
STAND_INS = ROOT / "harness" / "models"

# vLLM engine settings for the tiny model on this machine's CPU.
TINY_ENGINE_ARGS = {
    "dtype": "float32",
    "enforce_eager": True,
    "gpu_memory_utilization": 0.1,
    "max_model_len": 2048,
    "served_model_name": "tiny-chat",
}


def add_chat_model(repo: Path, name: str, source: str = "openai_chat", **parameters: str) -> Path:
    """Copy `openai_chat` (or `source`) into `repo` under `name` with the given config parameters."""
    dst = repo / name
    shutil.copytree(ROOT / "model_repository" / source, dst, ignore=shutil.ignore_patterns("__pycache__"))
    config = (dst / "config.pbtxt").read_text()
    for key, value in parameters.items():
        config = set_parameter(config, key, value)
    (dst / "config.pbtxt").write_text(config)
    return dst


def add_test_model(repo: Path, name: str, source: str | None = None) -> Path:
    """A model from harness/models (`source`, default `name`) under `name`."""
    dst = repo / name
    shutil.copytree(STAND_INS / (source or name), dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def add_llmapi_model(repo: Path, name: str, tokenizer: Path, decoupled: bool = True) -> Path:
    """The stand-in for TensorRT-LLM's LLM API model under `name`; its model.yaml names
    `tokenizer` as the model and sets whether it is decoupled (as NVIDIA's model.yaml does)."""
    import yaml  # noqa: PLC0415

    dst = add_test_model(repo, name, "llmapi_mock")
    path = dst / "1" / "model.yaml"
    config = yaml.safe_load(path.read_text())
    config["model"] = str(tokenizer)
    config["triton_config"]["decoupled"] = decoupled
    path.write_text(yaml.safe_dump(config))
    return dst


def tokenizer_with_template(base: Path, out: Path, template: str) -> Path:
    """A copy of `base`'s tokenizer files whose chat template is `template` (no weights)."""
    out.mkdir(parents=True)
    for name in ("tokenizer.json", "config.json", "generation_config.json"):
        if (base / name).is_file():
            shutil.copy(base / name, out / name)
    config = json.loads((base / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "chat_template.jinja").write_text(template)
    return out


def tokenizer_with_turn_end(base: Path, out: Path, eos_token: str, turn_end: str) -> Path:
    """A copy of `base`'s tokenizer files shaped like Llama 3's: the tokenizer's EOS is
    `eos_token`, and generation_config.json lists it and `turn_end` (the token that ends a
    chat turn) as `eos_token_id`."""
    from transformers import AutoTokenizer  # noqa: PLC0415

    config = json.loads((base / "tokenizer_config.json").read_text())
    tokenizer_with_template(base, out, config["chat_template"])
    config["eos_token"] = eos_token
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    ids = AutoTokenizer.from_pretrained(base).convert_tokens_to_ids([eos_token, turn_end])
    generation = json.loads((base / "generation_config.json").read_text())
    generation["eos_token_id"] = ids
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    return out


# What the ensemble's interface lacked before TensorRT-LLM renamed `random_seed` / `min_length`
# and added per-request token counts, exclude_input_in_output and guided decoding.
OLD_ENSEMBLE_RENAMES = {"seed": "random_seed", "min_tokens": "min_length"}
OLD_ENSEMBLE_ABSENT = ("exclude_input_in_output", "return_num_input_tokens", "return_num_output_tokens",
                       "guided_decoding_guide_type", "guided_decoding_guide", "num_input_tokens", "num_output_tokens")


def old_release_config(config: str) -> str:
    """An ensemble config.pbtxt as an older TensorRT-LLM release declares it."""
    for new, old in OLD_ENSEMBLE_RENAMES.items():
        config = config.replace(f'name: "{new}"', f'name: "{old}"')
    lines = [line for line in config.splitlines()
             if not any(f'name: "{name}"' in line for name in OLD_ENSEMBLE_ABSENT)]
    return re.sub(r",(\s*)\]", r"\1]", "\n".join(lines) + "\n")


def add_vllm_model(repo: Path, name: str, model_dir: Path, lora_adapters: dict | None = None, **engine_args) -> Path:
    """The committed vllm_model config with a model.json for `model_dir` (and LoRA adapters)."""
    dst = repo / name
    (dst / "1").mkdir(parents=True)
    shutil.copy(ROOT / "model_repository" / "vllm_model" / "config.pbtxt", dst / "config.pbtxt")
    write_engine_args(dst / "1", model_dir, lora_adapters, **engine_args)
    return dst


def write_engine_args(version_dir: Path, model_dir: Path, lora_adapters: dict | None = None, **engine_args) -> None:
    """`model.json` (the tiny model's engine settings, with `engine_args`) and, with LoRA adapters,
    `multi_lora.json` in a model's version directory, as Triton's vLLM backend reads them."""
    args = {"model": str(model_dir), **TINY_ENGINE_ARGS, **engine_args}
    if lora_adapters:
        args.update(enable_lora=True, max_lora_rank=8)
        (version_dir / "multi_lora.json").write_text(json.dumps({k: str(v) for k, v in lora_adapters.items()}))
    (version_dir / "model.json").write_text(json.dumps(args, indent=2))


def add_inprocess_chat_model(repo: Path, name: str, model_dir: Path, source: str = "openai_chat",
                             lora_adapters: dict | None = None, engine_args: dict | None = None,
                             **parameters: str) -> Path:
    """`openai_chat` (or `source`) with its own vLLM engine (`engine: inprocess`): its version
    directory holds the model.json (and multi_lora.json) a vllm_model would."""
    dst = add_chat_model(repo, name, source, engine="inprocess", **parameters)
    write_engine_args(dst / "1", model_dir, lora_adapters, **(engine_args or {}))
    return dst


def write_random_lora(base: Path, out: Path, rank: int = 8) -> Path:
    """A PEFT-format LoRA adapter (q_proj, v_proj) with random weights for the tiny Llama."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((base / "config.json").read_text())
    hidden = config["hidden_size"]
    kv_width = config["num_key_value_heads"] * (hidden // config["num_attention_heads"])
    generator = torch.Generator().manual_seed(1)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module, width in (("q_proj", hidden), ("v_proj", kv_width)):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=generator) * 0.5
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(width, rank, generator=generator) * 0.5
    out.mkdir(parents=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"],
        "bias": "none",
        "fan_in_fan_out": False,
        "base_model_name_or_path": str(base),
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config))
    return out


def model_targets(repo: Path, name: str) -> list[str]:
    """The models `name` calls: the `target_model` of a chat or completions model (none for the
    stand-ins and vLLM models)."""
    config = repo / name / "config.pbtxt"
    if not config.is_file():
        return []
    found = re.search(r'key:\s*"target_model",\s*value:\s*\{\s*string_value:\s*"([^"]+)"', config.read_text())
    return [found.group(1)] if found else []
