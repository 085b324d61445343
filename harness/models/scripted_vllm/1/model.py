"""A scripted generation model with the tensor interface of Triton's vLLM backend.

The prompt may contain `SCRIPT:` followed by a JSON object on the rest of the line;
the model then produces exactly what the script says. Keys (all optional):
  chunks           list of strings, one streamed response each (default ["Hello", " world"])
  repeat           {"text": str, "count": int}: `count` copies of `text` as chunks
  interval_ms      delay before each chunk (default 0); first_delay_ms: extra delay before the first;
                   pause_after_first_ms: extra delay before the second
  finish_reason    reason on the last response (default "stop")
  prompt_tokens    num_input_tokens to report (default: whitespace-separated words of the prompt)
  tokens_per_chunk num_output_tokens per chunk (default 1)
  error_after      send an error response after this many chunks (error_message, error_code)
  hang_after       after this many chunks send nothing until cancelled or hang_s (default 30) passed
  echo_request     true: the one chunk is a JSON object describing the request received
                   (with `images`: format, size and mode of each image, as decoded)
Behaviour follows the vLLM backend: delta text when streaming (exclude_input_in_output
must not be false then), one response with the whole text otherwise, FINAL on the last
response, `finish_reason` "None" until the end, errors as one final response with
text_output ["N/A"], cancellation answered with a CANCELLED error. `logit_bias` in the
sampling parameters fails the request with an empty reason, as on the real backend. The
sampling parameters are checked as the backend's release does (config parameter
`structured_outputs_key`): the other release's constrained-generation key fails the request
with the real backend's message; `embedding_request` is refused (only Triton's OpenAI frontend
sends it).
Images (`image` input, from Triton 25.01): each element is the base64 of an image file, decoded
and converted to RGB with Pillow as the backend does (a failure is its "Error generating stream"
error); the prompt must then hold one `<image>` placeholder per image (the test templates'),
else the request fails with vLLM's message for a mismatch.
"""

import base64
import io
import json
import queue
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
PLACEHOLDER = "<image>"


def _flag(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return bool(tensor.as_numpy()[0]) if tensor is not None else default


def _images(request, prompt: str) -> list[dict]:
    """The `image` input decoded as the vLLM backend does, checked against the prompt as vLLM does."""
    tensor = pb_utils.get_input_tensor_by_name(request, "image")
    if tensor is None:
        return []
    from PIL import Image  # noqa: PLC0415

    images = []
    for element in tensor.as_numpy().reshape(-1):
        opened = Image.open(io.BytesIO(base64.b64decode(element.decode("utf-8"))))
        kind = opened.format
        rgb = opened.convert("RGB")
        images.append({"format": kind, "width": rgb.width, "height": rgb.height, "mode": rgb.mode})
    found = prompt.count(PLACEHOLDER)
    if images and found != len(images):
        raise RuntimeError(
            f"Expected there to be {len(images)} prompt updates corresponding to {len(images)} image items, but "
            f"instead found {found} prompt updates! This is likely because you forgot to include input placeholder "
            "tokens (e.g., `<image>`, `<|image_pad|>`) in the prompt. If the model has a chat template, make sure "
            "you have applied it before calling `LLM.generate`.")
    return images


def _script(prompt: str) -> dict:
    marker = prompt.find("SCRIPT:")
    if marker < 0:
        return {}
    line = prompt[marker + len("SCRIPT:") :].split("\n", 1)[0]
    return json.JSONDecoder().raw_decode(line.strip())[0]


class _Queued:
    """A response sender whose `send` hands the response to the model's one sending thread."""

    def __init__(self, sender, outbox):
        self.sender, self.outbox = sender, outbox

    def send(self, response, flags=0):
        self.outbox.put((self.sender, response, flags))


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        # `single_sender: true`: every response goes out from one thread, as NVIDIA's vLLM
        # backend sends (its response thread); by default each stream sends from its own.
        self.outbox = None
        if parameters.get("single_sender", {}).get("string_value", "").lower() == "true":
            self.outbox = queue.SimpleQueue()
            threading.Thread(target=self._send_loop, daemon=True).start()
        self.structured_key = parameters.get("structured_outputs_key", {}).get("string_value", "structured_outputs")
        self.active = 0
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._serve, args=(request,), daemon=True).start()
        return None

    def _send_loop(self):
        while True:
            sender, response, flags = self.outbox.get()
            sender.send(response, flags=flags)

    def _serve(self, request):
        sender = request.get_response_sender()
        if self.outbox is not None:
            sender = _Queued(sender, self.outbox)
        with self.lock:
            self.active += 1
        try:
            self._generate(request, sender)
        except Exception as exc:  # noqa: BLE001
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("text_output", np.array([b"N/A"], dtype=np.object_))],
                    error=pb_utils.TritonError(f"Error generating stream: {exc}"),
                ),
                flags=FINAL,
            )
        finally:
            with self.lock:
                self.active -= 1

    def _generate(self, request, sender):
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0].decode("utf-8")
        images = _images(request, prompt)
        stream = _flag(request, "stream", False)
        exclude = pb_utils.get_input_tensor_by_name(request, "exclude_input_in_output")
        prepend_input = (not bool(exclude.as_numpy()[0])) if exclude is not None else not stream
        if prepend_input and stream:
            raise ValueError("When streaming, `exclude_input_in_output` = False is not allowed.")
        params_tensor = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        params = json.loads(params_tensor.as_numpy()[0]) if params_tensor is not None else {}
        unknown = {"structured_outputs", "guided_decoding"} - {self.structured_key}
        if unknown & set(params):
            # TritonSamplingParams(**params) raises on a key SamplingParams lacks; the backend
            # logs it, returns None, then fails on it (vllm_backend src/utils/vllm_backend_utils.py).
            raise AttributeError("'NoneType' object has no attribute 'lora_name'")
        if pb_utils.get_input_tensor_by_name(request, "embedding_request") is not None:
            raise ValueError("embedding requests are not served by this stand-in")
        if params.get("logit_bias"):
            # The real backend hands vLLM the JSON object as is (string token ids), and the
            # engine's failure carries no message (vLLM's EngineGenerateError).
            raise RuntimeError("")
        script = _script(prompt)
        if script.get("echo_request"):
            inputs = {
                name: (t.as_numpy().tolist() if t.as_numpy().dtype != np.object_ else
                       [v.decode() for v in t.as_numpy().reshape(-1)])
                for name, t in ((t.name(), t) for t in request.inputs()) if name != "image"
            }
            echo = {"inputs": inputs, "sampling_parameters": params,
                    "requested_outputs": sorted(request.requested_output_names())}
            if images:
                echo.update(images=images, prompt=prompt)
            chunks = [json.dumps(echo)]
        elif "repeat" in script:
            chunks = [script["repeat"]["text"]] * int(script["repeat"]["count"])
        else:
            chunks = list(script.get("chunks", ["Hello", " world"]))
        want = {name: _flag(request, f"return_{name}", False)
                for name in ("finish_reason", "num_input_tokens", "num_output_tokens")}
        prompt_tokens = int(script.get("prompt_tokens", len(prompt.split())))
        per_chunk = int(script.get("tokens_per_chunk", 1))
        interval = float(script.get("interval_ms", 0)) / 1000.0
        first_delay = float(script.get("first_delay_ms", 0)) / 1000.0
        pause_after_first = float(script.get("pause_after_first_ms", 0)) / 1000.0
        error_after = script.get("error_after")
        hang_after = script.get("hang_after")
        finish = script.get("finish_reason", "stop")

        def response(text, count, reason):
            tensors = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))]
            if want["finish_reason"]:
                tensors.append(pb_utils.Tensor("finish_reason", np.array([str(reason).encode()], dtype=np.object_)))
            if want["num_input_tokens"]:
                tensors.append(pb_utils.Tensor("num_input_tokens", np.asarray(prompt_tokens, dtype=np.uint32)))
            if want["num_output_tokens"]:
                tensors.append(pb_utils.Tensor("num_output_tokens", np.array([count], dtype=np.uint32)))
            return pb_utils.InferenceResponse(output_tensors=tensors)

        if first_delay:
            time.sleep(first_delay)
        if not stream:
            for i in range(len(chunks)):
                if interval:
                    time.sleep(interval)
                if error_after is not None and i >= error_after:
                    raise RuntimeError(script.get("error_message", "scripted failure"))
            text = ("" if not prepend_input else prompt) + "".join(chunks)
            sender.send(response(text, per_chunk * len(chunks), finish), flags=FINAL)
            return
        for i, chunk in enumerate(chunks):
            if error_after is not None and i >= error_after:
                raise RuntimeError(script.get("error_message", "scripted failure"))
            if hang_after is not None and i == hang_after:
                until = time.monotonic() + float(script.get("hang_s", 30))
                while time.monotonic() < until and not request.is_cancelled():
                    time.sleep(0.05)
            if request.is_cancelled():
                pb_utils.Logger.log_info(f"scripted_vllm: request {request.request_id()!r} cancelled after {i} chunks")
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError("Request was cancelled", pb_utils.TritonError.CANCELLED)),
                    flags=FINAL)
                return
            if interval:
                time.sleep(interval)
            if i == 1 and pause_after_first:
                time.sleep(pause_after_first)
            last = i == len(chunks) - 1
            sender.send(response(chunk, per_chunk, finish if last else None), flags=FINAL if last else 0)
        if not chunks:
            sender.send(response("", 0, finish), flags=FINAL)
