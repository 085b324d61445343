# Two commands: `make serve` and `make test`. Each sets up whatever is missing first
# (virtual environment with pinned packages, the local Triton backend directory, the tiny
# chat model) and is quick the second time.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MODEL ?=
SERVED_MODEL_NAME ?=
# An embedding model for openai_embeddings under `make serve`, e.g. build/tiny-embed (default: none).
EMBEDDING_MODEL ?=
# INPROCESS=1: `make serve` gives openai_chat its own vLLM engine (engine: inprocess).
INPROCESS ?=
# openai_chat / openai_completions parameters for `make serve`, e.g. "tool_call_parser=hermes reasoning_parser=qwen3".
CHAT_PARAMETERS ?=
PYTEST_ARGS ?=
ENV_STAMP := $(VENV)/.ready-$(shell cat requirements-local.txt requirements-triton.txt pyproject.toml tools/setup_venv.sh | sha1sum | cut -c1-12)
TINY_MODEL := build/tiny-chat
# The same weights served as an embedding model (openai_embeddings' tests).
TINY_EMBED := build/tiny-embed
# The o200k vocabulary of gpt-oss's Harmony format, written offline (openai_harmony reads it
# from TIKTOKEN_ENCODINGS_BASE instead of downloading it).
O200K := build/o200k/o200k_base.tiktoken
export TIKTOKEN_ENCODINGS_BASE := $(CURDIR)/build/o200k

.PHONY: setup serve test unit bench bench-token-path bench-aiperf fuzz soak clean gateway

setup: $(ENV_STAMP) $(TINY_MODEL)/.complete $(TINY_EMBED)/.complete $(O200K)

$(ENV_STAMP): requirements-local.txt requirements-triton.txt pyproject.toml tools/setup_venv.sh
	tools/setup_venv.sh $(VENV) $(PYTHON)
	rm -f $(VENV)/.ready-* && touch $@

$(TINY_MODEL)/.complete: $(ENV_STAMP) harness/tiny_model.py harness/tiny_model_corpus.txt
	$(PY) harness/tiny_model.py --out $(TINY_MODEL)
	touch $@

$(TINY_EMBED)/.complete: $(TINY_MODEL)/.complete harness/tiny_embedding_model.py
	$(PY) harness/tiny_embedding_model.py --chat $(TINY_MODEL) --out $(TINY_EMBED)
	touch $@

$(O200K): $(ENV_STAMP) harness/o200k.py
	$(PY) harness/o200k.py --out $(@D)

serve: setup
	$(PY) tools/serve.py $(if $(MODEL),--model $(MODEL)) $(if $(SERVED_MODEL_NAME),--served-model-name $(SERVED_MODEL_NAME)) \
		$(if $(EMBEDDING_MODEL),--embedding-model $(EMBEDDING_MODEL)) $(if $(INPROCESS),--inprocess) \
		$(foreach p,$(CHAT_PARAMETERS),--chat-parameter $(p))

# The OpenAI-compatible gateway on port 9000, in front of the server `make serve` runs.
GATEWAY_ARGS ?=
gateway: setup
	$(PY) -m tritonchat.clients.gateway --port 9000 $(GATEWAY_ARGS)

# AIPerf's own environment (its packages would replace some vLLM needs), for its integration test.
AIPERF_STAMP := build/aiperf-venv/.ready-$(shell sha1sum requirements-aiperf.txt | cut -c1-12)
$(AIPERF_STAMP): requirements-aiperf.txt $(ENV_STAMP)
	$(PY) -m harness.aiperf

test: setup $(AIPERF_STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The whole comparison (docs/benchmarks.md): raw generation model, openai_chat over each
# transport and with stream_interval 4, vLLM's own OpenAI server; writes docs/bench/bench.md
# and docs/bench/bench.png.
BENCH_ARGS ?= --paths scripted,vllm --concurrency 1,16,64,256 --repeats 3 \
	--transports http,grpc,bls --bls-instances 2 --stream-intervals 4 --vllm-server \
	--profile "chat http@64" --report docs/bench/bench
bench: setup
	$(PY) tools/bench.py $(BENCH_ARGS)

# The chat layer's own CPU per token (receive, parse, build, send), without a server.
bench-token-path: setup
	$(PY) tools/bench_token_path.py $(TOKEN_PATH_ARGS)

# A short AIPerf profile of openai_chat (through generate_stream and through the gateway), with
# AIPerf's token counts checked against the server's; AIPerf gets its own environment.
bench-aiperf: setup
	$(PY) tools/bench_aiperf.py $(AIPERF_ARGS)

# The long reliability runs (docs/reliability.md): 10,000 fuzzed requests, a 20,000-request soak.
fuzz: setup
	$(PY) tools/fuzz.py $(FUZZ_ARGS)

soak: setup
	$(PY) tools/soak.py $(SOAK_ARGS)

clean:
	rm -rf build
