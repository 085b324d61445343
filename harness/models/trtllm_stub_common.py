"""What the TensorRT-LLM stand-ins share: the script language, request descriptions for
`echo_request`, and how the engine decides where generation ends.

Each stand-in's version directory holds a link to this file; the Python backend puts that
directory on `sys.path` (as NVIDIA's `tensorrt_llm_bls` relies on for its `lib/`)."""

import json
import random
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

DEFAULT_TEXT = " Hello wörld 你好 🎉"
TRITON_DTYPES = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.object_): "BYTES",
}


class ScriptedError(Exception):
    pass


def scripted_tokens(script: dict, tokenizer) -> tuple[list[int], list[int]]:
    """The scripted output ids, and the index where each scripted chunk starts.

    Besides `text` / `ids`, the scripts of the vLLM-interface test model are understood:
    `chunks` (or `repeat`: {"text", "count"}) are tokenized one by one and concatenated, and
    then interval_ms, error_after and hang_after count chunks instead of tokens;
    `finish_reason: "length"` means finish "length". prompt_tokens / tokens_per_chunk have
    no effect (this engine reports real counts)."""
    if "chunks" in script or "repeat" in script:
        repeat = script.get("repeat") or {}
        chunks = script.get("chunks") or [repeat.get("text", "")] * int(repeat.get("count", 0))
        ids, starts = [], []
        for chunk in chunks:
            starts.append(len(ids))
            ids += tokenizer.encode(chunk, add_special_tokens=False)
        return ids, starts
    if "ids" in script:
        ids = [int(i) for i in script["ids"]]
    else:
        ids = tokenizer.encode(script.get("text", DEFAULT_TEXT), add_special_tokens=False)
    return ids, list(range(len(ids)))


def scripted_finish(script: dict) -> str:
    return script.get("finish") or ("length" if script.get("finish_reason") == "length" else "stop")


def token_index(count, starts: list[int], total: int):
    """Token index of the `count`-th chunk boundary (None stays None)."""
    if count is None:
        return None
    count = int(count)
    return starts[count] if count < len(starts) else max(total, count)


class ScriptTiming:
    """A script's pacing and faults, counted in tokens (`starts`: where each chunk begins):
    first_delay_ms before the first token, interval_ms before each chunk, pause_after_first_ms
    before the second chunk, hang_after (for
    hang_s, default 30, or until `stopped()`), error_after (error_message)."""

    def __init__(self, script: dict, starts: list[int], total: int):
        self.script = script
        self.interval = float(script.get("interval_ms", 0)) / 1000.0
        self.chunk_starts = set(starts)
        self.second_start = sorted(starts)[1] if len(starts) > 1 else None
        self.pause_after_first = float(script.get("pause_after_first_ms", 0)) / 1000.0
        self.error_after = token_index(script.get("error_after"), starts, total)
        self.hang_after = token_index(script.get("hang_after"), starts, total)
        first_delay = float(script.get("first_delay_ms", 0)) / 1000.0
        if first_delay:
            time.sleep(first_delay)

    def wait(self, i: int, stopped) -> None:
        """Before token i: hang or pause as scripted (a hang ends early once `stopped()`)."""
        if self.hang_after is not None and i == int(self.hang_after):
            until = time.monotonic() + float(self.script.get("hang_s", 30))
            while time.monotonic() < until and not stopped():
                time.sleep(0.02)
        if self.interval and i in self.chunk_starts:
            time.sleep(self.interval)
        if self.pause_after_first and i == self.second_start:
            time.sleep(self.pause_after_first)

    def fails_at(self, i: int) -> bool:
        return self.error_after is not None and i >= int(self.error_after)

    def error(self) -> ScriptedError:
        return ScriptedError(self.script.get("error_message", "scripted failure"))


def parse_script(prompt: str) -> dict:
    marker = prompt.find("SCRIPT:")
    if marker < 0:
        return {}
    line = prompt[marker + len("SCRIPT:") :].split("\n", 1)[0]
    return json.JSONDecoder().raw_decode(line.strip())[0]


def describe_inputs(request) -> dict:
    """name -> dtype (Triton name), shape and value (strings decoded) of every input tensor."""
    described = {}
    for tensor in request.inputs():
        array = tensor.as_numpy()
        if array.dtype == np.object_:
            value = np.vectorize(lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b),
                                 otypes=[object])(array).tolist() if array.size else []
        elif array.dtype == np.float16:
            value = array.astype(np.float32).tolist()
        else:
            value = array.tolist()
        described[tensor.name()] = {
            "dtype": TRITON_DTYPES.get(array.dtype, str(array.dtype)),
            "shape": list(array.shape),
            "value": value,
        }
    return described


def first_value(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    array = tensor.as_numpy()
    return array.reshape(-1)[0].item() if array.size else default


def dispatch(requests, stop, serve) -> None:
    """Each request served on its own thread (`serve`), except `stop` requests (the `stop`
    input true), which `stop` handles at once."""
    for request in requests:
        if first_value(request, "stop", False):
            stop(request)
        else:
            threading.Thread(target=serve, args=(request,), daemon=True).start()


def plan_generation(ids, max_tokens, end_id, stop_sequences, finish):
    """The tokens the engine returns and why it stopped: length, end_id or stop_words."""
    out = []
    for token in ids:
        if len(out) >= max_tokens:
            return out, "length"
        if end_id is not None and token == end_id:
            return out, "end_id"
        out.append(token)
        if any(len(seq) <= len(out) and out[-len(seq) :] == seq for seq in stop_sequences):
            return out, "stop_words"
    if len(out) >= max_tokens:
        return out, "length"
    return out, ("end_id" if finish == "stop" else "length")


def sampled_script(script: dict, request, top_k_name: str, top_p_name: str) -> dict:
    """A script's `samples` (alternative texts) resolved as TensorRT-LLM samples, so that its
    defaults show: with neither top-k nor top-p sent (both default to 0, and a top-p of 0 or
    less counts as unset), or with top-k 1 or temperature 0, the sampler is greedy and takes
    the first sample (cpp/tensorrt_llm/kernels/samplingTopKKernels.h: "topK == 0 && topP ==
    0.0f ... equivalent to greedy search"); otherwise the seed picks one, and without a seed
    input it is 0, as in releases before per-request random seeds (TensorRT-LLM issues #1000,
    #2860), so identical requests give identical text."""
    samples = script.get("samples")
    if not samples:
        return script
    temperature = float(first_value(request, "temperature", 1.0))
    top_k = int(first_value(request, top_k_name, 0) or 0)
    top_p = max(0.0, float(first_value(request, top_p_name, 0.0) or 0.0))
    greedy = temperature == 0.0 or top_k == 1 or (top_k == 0 and top_p == 0.0)
    seed = int(first_value(request, "seed", first_value(request, "random_seed", 0)))
    text = samples[0] if greedy else samples[random.Random(seed).randrange(len(samples))]
    return {**script, "text": text}


def log_prob(index: int) -> float:
    return -0.1 * (index + 1)
