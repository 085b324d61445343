"""Settings from config.pbtxt parameters, filled in from the target vLLM model's model.json."""

from __future__ import annotations

import json

import pytest

from tritonchat.settings import ConfigError, Settings, flatten_parameters


def repository(tmp_path, model_json: dict | None, versions=("1",)):
    (tmp_path / "openai_chat" / "1").mkdir(parents=True)
    for version in versions:
        (tmp_path / "vllm_model" / version).mkdir(parents=True)
    if model_json is not None:
        (tmp_path / "vllm_model" / versions[-1] / "model.json").write_text(json.dumps(model_json))
    return tmp_path / "openai_chat"


def test_defaults_come_from_model_json(tmp_path):
    model_dir = repository(tmp_path, {"model": "/m/qwen", "served_model_name": ["qwen", "alias"], "max_model_len": 4096})
    settings = Settings.from_parameters({}, model_dir)
    assert settings.tokenizer == "/m/qwen"
    assert settings.served_model_name == "qwen"
    assert settings.max_model_len == 4096
    assert settings.target_model == "vllm_model" and settings.request_format == "vllm"


def test_latest_version_and_tokenizer_key(tmp_path):
    model_dir = repository(tmp_path, {"model": "/m/a", "tokenizer": "/m/tok"}, versions=("1", "3"))
    settings = Settings.from_parameters({}, model_dir)
    assert settings.tokenizer == "/m/tok" and settings.served_model_name == "/m/a"


def test_parameters_win(tmp_path):
    model_dir = repository(tmp_path, {"model": "/m/a"})
    params = {"tokenizer": "/t", "served_model_name": "x", "max_model_len": "100", "idle_timeout_s": "2.5",
              "default_max_tokens": "${default_max_tokens}"}
    settings = Settings.from_parameters(params, model_dir)
    assert (settings.tokenizer, settings.served_model_name, settings.max_model_len, settings.idle_timeout_s) == ("/t", "x", 100, 2.5)
    assert settings.default_max_tokens == 0


def test_no_tokenizer_is_a_load_error(tmp_path):
    with pytest.raises(ConfigError, match="tokenizer"):
        Settings.from_parameters({}, repository(tmp_path, None))


@pytest.mark.parametrize(("key", "value"), [("request_format", "grpc"), ("max_model_len", "many"),
                                            ("chat_template_content_format", "xml")])
def test_bad_parameters(tmp_path, key, value):
    with pytest.raises(ConfigError, match=key):
        Settings.from_parameters({"tokenizer": "/t", key: value}, repository(tmp_path, None))


def test_flatten():
    assert flatten_parameters({"parameters": {"a": {"string_value": "1"}}}) == {"a": "1"}
    assert flatten_parameters({}) == {}
