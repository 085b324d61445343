"""The committed model repository, the runnable-copy command and docker-compose.yml."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from harness.repositories import ROOT
from tritonchat.repository import config_context_length, main, parse_engine_arg, prepare_repository, set_parameter

REPO = ROOT / "model_repository"


@pytest.mark.parametrize("model", ["openai_chat", "openai_completions"])
def test_openai_model_configs_carry_what_users_change(model):
    """The shipped config.pbtxt: the Python backend, an instance group, and the parameters most
    deployments set at their defaults (the interface comes from auto_complete_config)."""
    from tritonchat.settings_docs import shipped_parameters  # noqa: PLC0415

    config = (REPO / model / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and "instance_group" in config
    assert shipped_parameters() in config
    assert "input [" not in config and "output [" not in config


def test_vllm_model_is_the_vllm_backend():
    """`model.json` names the model and leaves its context length to vLLM, which refuses a
    `max_model_len` above the model's own."""
    assert 'backend: "vllm"' in (REPO / "vllm_model" / "config.pbtxt").read_text()
    engine_args = json.loads((REPO / "vllm_model" / "1" / "model.json").read_text())
    assert "model" in engine_args and "max_model_len" not in engine_args


@pytest.mark.parametrize(("config", "expected"), [
    ({"max_position_embeddings": 8192}, 8192),
    ({"n_positions": 1024}, 1024),  # GPT-2
    ({"text_config": {"max_position_embeddings": 4096}}, 4096),  # multimodal
    ({"hidden_size": 64}, 0),
])
def test_config_context_length(tmp_path, config, expected):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert config_context_length(tmp_path) == expected


@pytest.mark.parametrize(("config", "expected"), [
    ({"max_position_embeddings": 131072}, 2048), ({"n_positions": 1024}, 1024), ({}, None)])
def test_serve_caps_the_cpu_context_at_the_models_own(tmp_path, config, expected):
    from harness.serve import cpu_engine_args  # noqa: PLC0415

    (tmp_path / "config.json").write_text(json.dumps(config))
    assert cpu_engine_args(tmp_path, {}).get("max_model_len") == expected
    assert cpu_engine_args(tmp_path, {"max_model_len": 512})["max_model_len"] == 512


def test_prepare_repository(tmp_path):
    dst = prepare_repository(REPO, tmp_path / "r", model="/m/x", served_model_name="x",
                             engine_args={"dtype": "float32", "max_model_len": 512})
    args = json.loads((dst / "vllm_model" / "1" / "model.json").read_text())
    assert args["model"] == "/m/x" and args["served_model_name"] == "x"
    assert args["dtype"] == "float32" and args["max_model_len"] == 512
    assert (dst / "openai_chat" / "1" / "model.py").read_text() == (REPO / "openai_chat" / "1" / "model.py").read_text()
    for model in ("openai_chat", "openai_completions"):  # readable by clients, e.g. the gateway's /v1/models
        assert 'key: "served_model_name", value: { string_value: "x" }' in (dst / model / "config.pbtxt").read_text()


def test_prepare_repository_command(tmp_path, capsys):
    main(["--src", str(REPO), "--dst", str(tmp_path / "r"), "--model", "/m", "--engine-arg", "enforce_eager=true",
          "--chat-parameter", "grpc_url=localhost:9101"])
    args = json.loads((tmp_path / "r" / "vllm_model" / "1" / "model.json").read_text())
    assert args["enforce_eager"] is True and args["model"] == "/m"
    for model in ("openai_chat", "openai_completions"):
        assert 'key: "grpc_url", value: { string_value: "localhost:9101" }' in (tmp_path / "r" / model / "config.pbtxt").read_text()
    assert parse_engine_arg("tokenizer_mode=auto") == ("tokenizer_mode", "auto")


def test_set_parameter():
    config = 'parameters { key: "a", value: { string_value: "1" } }\n'
    assert set_parameter(config, "a", "2") == 'parameters { key: "a", value: { string_value: "2" } }\n'
    assert 'key: "b"' in set_parameter(config, "b", "3")


def test_docker_compose_syntax():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    triton = services["triton"]
    assert triton["build"]["args"]["FLAVOR"] == "vllm"  # the Dockerfile: -vllm-python-py3 (test_image.py)
    assert any(v.endswith(":/models/hf:ro") for v in triton["volumes"])
    assert {"8000:8000", "8001:8001", "8002:8002"} <= set(triton["ports"])
    assert triton["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    script = triton["command"][-1]
    assert "python3 -m tritonchat.repository --src /opt/tritonchat/model_repository" in script
    assert "--model /models/hf" in script
    assert "tritonserver --model-repository=/tmp/model_repository" in script


def test_docker_compose_trtllm_profile():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service = compose["services"]["triton-trtllm"]
    assert service["profiles"] == ["trtllm"]
    assert service["build"]["args"]["FLAVOR"] == "trtllm"
    script = service["command"][-1]
    assert '--chat-parameter "request_format=$${REQUEST_FORMAT}"' in script
    assert "rm -rf /tmp/model_repository/vllm_model" in script
    assert "--model-repository=/models/trtllm --model-repository=/tmp/model_repository" in script
    assert service["environment"]["REQUEST_FORMAT"] == "${REQUEST_FORMAT:-tensorrt_llm}"
    assert service["environment"]["TARGET_MODEL"] == "${TARGET_MODEL:-tensorrt_llm}"


def test_docker_compose_fills_nvidias_templates_for_concurrency_and_guided_decoding():
    """The preparation commands in the trtllm profile's comments: guided decoding configured on
    tensorrt_llm, and as many BLS instances as the engine's batch size."""
    text = (ROOT / "docker-compose.yml").read_text()
    fill = {m.group(1): line for line in text.splitlines() if (m := re.search(r"\$F /out/(\w+)/config\.pbtxt", line))}
    for item in ("guided_decoding_backend:xgrammar", "tokenizer_dir:/models/hf", "xgrammar_tokenizer_info_path:/"):
        assert item in fill["tensorrt_llm"], item
    batch = re.search(r"triton_max_batch_size:(\d+)", fill["tensorrt_llm"]).group(1)
    assert f"bls_instance_count:{batch}" in fill["tensorrt_llm_bls"]


@pytest.mark.parametrize("model", ["openai_chat", "openai_completions"])
def test_shipped_configs_list_known_settings_at_their_defaults(model):
    from tritonchat.settings import parameter_fields  # noqa: PLC0415
    from tritonchat.settings_docs import config_value  # noqa: PLC0415

    text = (ROOT / "model_repository" / model / "config.pbtxt").read_text()
    listed = dict(re.findall(r'parameters \{ key: "([^"]+)", value: \{ string_value: "([^"]*)" \} \}', text))
    defaults = {spec.name: config_value(spec) for spec in parameter_fields()}
    assert listed and set(listed) <= set(defaults)
    assert {key: defaults[key] for key in listed} == listed


def test_configuration_page_table_is_the_settings_table():
    """The table of docs/configuration.md is made from the settings declared in settings.py."""
    from tritonchat.settings_docs import markdown_table  # noqa: PLC0415

    assert markdown_table() in (ROOT / "docs" / "configuration.md").read_text()


@pytest.mark.parametrize(("generation", "expected"), [
    ({"eos_token_id": [128001, 128008, 128009]}, [128001, 128008, 128009]), ({"eos_token_id": 2}, [2]), ({}, [])])
def test_generation_eos_ids(tmp_path, generation, expected):
    from tritonchat.repository import generation_eos_ids  # noqa: PLC0415

    (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    assert generation_eos_ids(tmp_path) == expected
    assert generation_eos_ids(tmp_path / "missing") == []


def test_serve_takes_chat_parameters_and_names_a_typo(tmp_path, tiny_model):
    """`make serve CHAT_PARAMETERS=...` / `tools/serve.py --chat-parameter`: the parameters land in
    both chat models' config.pbtxt; an unknown key or a bad value stops it with a message naming
    the parameter."""
    from harness.serve import parser, prepare  # noqa: PLC0415

    def args(*chat):
        return parser().parse_args(["--model", str(tiny_model), "--repository", str(tmp_path / "r"),
                                    *[item for pair in chat for item in ("--chat-parameter", pair)]])

    repo, served, _model = prepare(args("tool_call_parser=hermes", "reasoning_parser=qwen3"))
    assert served == "tiny-chat"
    for name in ("openai_chat", "openai_completions"):
        config = (repo / name / "config.pbtxt").read_text()
        assert 'key: "tool_call_parser", value: { string_value: "hermes" }' in config
        assert 'key: "reasoning_parser", value: { string_value: "qwen3" }' in config
    for typo, named in (("tool_parser=hermes", "'tool_parser'; did you mean 'tool_call_parser'?"),
                        ("tool_call_parser=nosuch", "tool_call_parser"), ("stream_interval=0", "stream_interval"),
                        ("max_n=many", "max_n")):
        with pytest.raises(SystemExit) as stopped:
            prepare(args(typo))
        assert named in str(stopped.value) and str(stopped.value).startswith("--chat-parameter:")


def test_serve_inprocess_gives_openai_chat_its_own_engine(tmp_path, tiny_model):
    """`make serve INPROCESS=1` / `tools/serve.py --inprocess`: openai_chat gets vllm_model's
    engine arguments in its version directory and `engine: inprocess`; the other models keep
    calling vllm_model."""
    from harness.serve import parser, prepare  # noqa: PLC0415
    repo, _served, _model = prepare(parser().parse_args(
        ["--model", str(tiny_model), "--repository", str(tmp_path / "r"), "--inprocess"]))
    chat = repo / "openai_chat"
    assert (chat / "1" / "model.json").read_text() == (repo / "vllm_model" / "1" / "model.json").read_text()
    assert 'key: "engine", value: { string_value: "inprocess" }' in (chat / "config.pbtxt").read_text()
    for name in ("openai_completions", "anthropic_messages", "openai_responses"):
        assert not (repo / name / "1" / "model.json").exists()
        assert '"engine"' not in (repo / name / "config.pbtxt").read_text()
