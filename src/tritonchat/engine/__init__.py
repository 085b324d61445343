"""The vLLM engine driver: one `AsyncLLM`, run the way both of its users here run it, the local
vLLM backend (harness/local_vllm_backend/model.py, the stand-in for Triton's vLLM backend) and
the chat models' in-process engine (`engine: inprocess`, transports/inprocess.py).

    process.py   what a Python-backend stub must do before vLLM is imported, GC freezing
    driver.py    engine arguments (model.json, multi_lora.json), devices, SamplingParams from the
                 vLLM backend's JSON, making, rendering for and shutting down an engine
    outputs.py   vLLM's RequestOutputs as what each adds: deltas of cumulative outputs (the local
                 backend's tensors), GenerationOutputs of delta outputs (the in-process engine)

Nothing here imports vLLM at import time: only `driver.vllm_api()` does, when an engine is made
(NVIDIA's TensorRT-LLM containers have no vLLM; the chat models import this package in every
container).
"""
