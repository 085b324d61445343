"""The `openai_chat` and `openai_completions` Triton models: the only module that talks to
`triton_python_backend_utils`.

Flow per request, all on the stub's event loop except where noted:
JSON body -> validated request -> prompt (rendered in a worker thread) -> streaming call
to the generation model (BLS `async_exec(decoupled=True)` read by one thread per stream,
or a gRPC call read by a coroutine) -> `Responder` thread (chunks, sends, cancellation)
-> OpenAI JSON responses. `execute` only schedules that work and returns, so one
instance serves many streams at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import locale
import logging
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from . import __version__
from .formats import FORMATS, Decoder, FormatOptions, GenerationRequest, RequestFormat
from .settings import Settings, flatten_parameters
from .errors import (
    BadRequestError,
    CancelledError,
    InternalError,
    NotFoundError,
    OpenAIError,
    UnavailableError,
)
from .plan import Limits, ModelNames, check_chat_request, check_completion_request, plan_generations
from .transports.grpc import GrpcTransport
from .protocol import parse_chat_request, parse_completion_request
from .responder import RequestState, Responder
from .response import ChatResponseBuilder, CompletionResponseBuilder
from .template import Prompt, PromptRenderer, load_tokenizer
from .tokens import TokenBytes
from .tool_choice import plan_tools, prompt_opens_reasoning

log = logging.getLogger("tritonchat")

INPUT_NAME = "request"
OUTPUT_NAME = "response"


def _pb():
    import triton_python_backend_utils as pb_utils  # noqa: PLC0415  (exists only inside Triton)

    return pb_utils


def triton_error(error: OpenAIError):
    pb = _pb()
    codes = {
        400: pb.TritonError.INVALID_ARG,
        404: pb.TritonError.NOT_FOUND,
        499: getattr(pb.TritonError, "CANCELLED", pb.TritonError.INVALID_ARG),
        503: pb.TritonError.UNAVAILABLE,
    }
    return pb.TritonError(error.to_json(), codes.get(error.status, pb.TritonError.INTERNAL))


def error_from_backend(error) -> OpenAIError:
    """A BLS error response from the generation model as the error our client sees."""
    pb = _pb()
    message = error.message()
    code = error.code() if hasattr(error, "code") else None
    text = f"The generation model failed: {message}"
    if code == pb.TritonError.UNAVAILABLE or "is not ready" in message or "unknown model" in message.lower():
        return UnavailableError(f"The generation model is unavailable: {message}")
    if code == getattr(pb.TritonError, "CANCELLED", None):
        return CancelledError(f"The generation was cancelled: {message}")
    if code == pb.TritonError.NOT_FOUND:
        return NotFoundError(text, param=None, code=None)
    if code == pb.TritonError.INVALID_ARG:
        return BadRequestError(text)
    return InternalError(text)


class TritonSink:
    """Sends one request's payloads through its Triton response sender; FINAL exactly once."""

    def __init__(self, request):
        self._pb = _pb()
        self._request = request
        self._sender = request.get_response_sender()
        self.closed = False

    def send(self, payload: str, final: bool) -> None:
        pb = self._pb
        tensor = pb.Tensor(OUTPUT_NAME, np.array([payload.encode("utf-8")], dtype=np.object_))
        self._sender.send(
            pb.InferenceResponse(output_tensors=[tensor]),
            flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0,
        )
        if final:
            self.closed = True

    def send_error(self, error: OpenAIError) -> None:
        if self.closed:
            return
        pb = self._pb
        self.closed = True
        self._sender.send(
            pb.InferenceResponse(output_tensors=[], error=triton_error(error)),
            flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()


def read_bls(responder: Responder, state: RequestState, index: int, iterator, decoder: Decoder) -> None:
    """Thread body: one BLS response stream, handed to the responder response by response.

    The stream is always read up to its final response, also when the request ended early
    (stop string, client gone, error, idle timeout), and the iterator is then kept a little
    longer (`_retired`): see `_RetiredIterators`.
    """
    read_to_end = False
    try:
        for response in iterator:
            if state.done:
                break
            if response.has_error():
                raise error_from_backend(response.error())
            tensors = response.output_tensors()
            if tensors:  # (a flag-only FINAL from the generation model has none)
                responder.output(state, index, decoder.decode({t.name(): t.as_numpy() for t in tensors}))
            if decoder.finished:
                cancel = getattr(iterator, "cancel", None)
                if cancel is not None:
                    cancel()
                break
        else:
            read_to_end = True
        if not state.done:
            _end(responder, state, index, decoder)
    except OpenAIError as error:
        responder.fail(state, error)
    except Exception as exc:  # noqa: BLE001  (every failure must end the request)
        log.exception("%s: BLS stream %d failed", state.name, index)
        responder.fail(state, InternalError(f"The generation stream failed: {exc}"))
    if not read_to_end:
        try:
            for _response in iterator:  # the rest, unread, up to the final response
                pass
        except Exception:  # noqa: BLE001  (nothing waits for this stream any more)
            log.debug("%s: the rest of BLS stream %d could not be read", state.name, index, exc_info=True)
    _retired.add(iterator)


class _RetiredIterators:
    """Keeps finished BLS response iterators alive for a few seconds.

    The Python backend stub forgets a BLS stream in two places: its own map, emptied by a C++
    thread after the iterator has seen the final response, and the Python object. Whichever lets
    go last destroys the stream's responses. When that is the C++ thread, the responses' NumPy
    arrays are released without the GIL, which corrupted the interpreter's memory and crashed the
    stub (SIGSEGV) under concurrent streams (Triton 2.51). Holding the Python object until the
    C++ side has surely let go makes the last release a Python one, with the GIL. The same reason
    makes `read_bls` read every stream to its end: an iterator dropped before its final response
    stays in the stub's map for good.
    """

    HOLD_S = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[float, object]] = []

    def add(self, iterator) -> None:
        now = time.monotonic()
        with self._lock:
            self._held.append((now, iterator))
            keep = next((i for i, (t, _) in enumerate(self._held) if now - t < self.HOLD_S), len(self._held))
            released, self._held = self._held[:keep], self._held[keep:]
        del released  # dropped here, in a Python thread holding the GIL

    def clear(self) -> None:
        """Releases every held iterator (at finalize, while the stub's shared memory is there)."""
        with self._lock:
            released, self._held = self._held, []
        del released


_retired = _RetiredIterators()


async def read_grpc(responder: Responder, state: RequestState, index: int, transport: GrpcTransport, call,
                    decoder: Decoder) -> None:
    """Coroutine: one gRPC response stream, handed to the responder response by response."""
    ended = False  # whether the call itself ended (else it is abandoned, then read to its end)
    try:
        async for outputs, _final in transport.responses(call):
            if state.done:
                break
            if outputs:
                responder.output(state, index, decoder.decode(outputs))
            if decoder.finished:
                break
        else:
            ended = True
        if not state.done:
            _end(responder, state, index, decoder)
    except OpenAIError as error:
        responder.fail(state, error)
    except Exception as exc:  # noqa: BLE001
        log.exception("%s: gRPC stream %d failed", state.name, index)
        responder.fail(state, InternalError(f"The generation stream failed: {exc}"))
    if not ended:
        # Cancelled where that is safe, else read to its end (see grpc_transport).
        transport.abandon(call)
        await transport.drain(call)


def _end(responder: Responder, state: RequestState, index: int, decoder: Decoder) -> None:
    rest = decoder.end()
    if rest is not None:
        responder.output(state, index, rest)
    responder.end(state, index)


class _OpenAIModel:
    """What the chat and completions models share: settings, transports, the responder."""

    kind = ""  # "chat" or "completions"

    def initialize(self, args: dict) -> None:
        pb = _pb()
        # The stub's interpreter starts with an ASCII locale; tokenizer files are UTF-8.
        try:
            locale.setlocale(locale.LC_ALL, "C.UTF-8")
        except locale.Error:
            pass
        logging.basicConfig(level=os.environ.get("TRITONCHAT_LOG_LEVEL", "INFO"))
        self.model_name = args.get("model_name", self.kind)
        self.model_config = json.loads(args["model_config"])
        if not pb.using_decoupled_model_transaction_policy(self.model_config):
            raise pb.TritonModelException(f"{self.model_name} must be decoupled: set model_transaction_policy {{ decoupled: true }}")
        self.settings = Settings.from_parameters(flatten_parameters(self.model_config), args.get("model_repository"))
        tokenizer = load_tokenizer(self.settings.tokenizer)
        self.renderer = PromptRenderer(tokenizer, self.settings.chat_template_content_format)
        self.token_bytes = TokenBytes(tokenizer)
        self.limits = Limits(
            context_length=self.settings.max_model_len or _context_length(self.settings.tokenizer, tokenizer),
            default_max_tokens=self.settings.default_max_tokens,
        )
        self.names = ModelNames(self.settings.served_model_name, self.settings.lora_separator, self.settings.lora_adapters)
        self.request_format: RequestFormat = FORMATS[self.settings.request_format](
            FormatOptions(
                structured_outputs_key=self.settings.structured_outputs_key,
                tokenizer=tokenizer,
                seed_input=self.settings.trtllm_seed_input,
                min_tokens_input=self.settings.trtllm_min_tokens_input,
                token_count_outputs=self.settings.trtllm_token_counts.lower() in ("1", "true", "yes"),
                end_id=self.settings.end_id if self.settings.end_id >= 0 else None,
                pad_id=self.settings.pad_id if self.settings.pad_id >= 0 else None,
                lora_task_ids=self.settings.lora_task_id_map,
            )
        )
        fingerprint_source = f"{__version__}|{self.settings.served_model_name}|{self.settings.target_model}"
        self.system_fingerprint = "fp_" + hashlib.sha256(fingerprint_source.encode()).hexdigest()[:10]
        self._render_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="chat-render")
        self._tasks: set[asyncio.Task] = set()
        self.responder = Responder(
            self.settings.cancel_check_interval_ms / 1000.0,
            self.settings.idle_timeout_s,
            lanes=self.settings.responder_threads,
        )
        self.grpc = (
            GrpcTransport(self.settings.grpc_url, self.settings.grpc_cancel, self.settings.idle_timeout_s)
            if self.settings.transport == "grpc"
            else None
        )
        self._loop_ready = False
        log.info(
            "%s ready: serves %r via %s model %r over %s (context %d tokens, tokenizer %s)",
            self.model_name,
            self.settings.served_model_name,
            self.settings.request_format,
            self.settings.target_model,
            "BLS" if self.grpc is None else f"gRPC at {self.settings.grpc_url}",
            self.limits.context_length,
            self.settings.tokenizer,
        )

    async def execute(self, requests):
        loop = asyncio.get_running_loop()
        if not self._loop_ready:
            # `async_exec` runs each BLS call in the loop's default executor and holds a
            # worker until the first response: size it for the streams we serve at once.
            loop.set_default_executor(ThreadPoolExecutor(max_workers=256, thread_name_prefix="chat-bls"))
            self._loop_ready = True
        for request in requests:
            self._spawn(loop, self._handle(request))
        return None

    def _spawn(self, loop, coroutine) -> None:
        task = loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, request) -> None:
        sink = TritonSink(request)
        try:
            await self._start(request, sink)
        except OpenAIError as error:
            self._fail(sink, error)
        except Exception as exc:  # noqa: BLE001  (a request must never end without FINAL)
            log.exception("request failed")
            self._fail(sink, InternalError(f"Internal error: {exc}"))

    def _fail(self, sink: TritonSink, error: OpenAIError) -> None:
        try:
            sink.send_error(error)
        except Exception:  # noqa: BLE001
            log.exception("could not send the error response")

    @staticmethod
    def _body(request) -> bytes:
        tensor = _pb().get_input_tensor_by_name(request, INPUT_NAME)
        if tensor is None:
            raise BadRequestError(f"The input tensor {INPUT_NAME!r} is missing.")
        raw = tensor.as_numpy().reshape(-1)
        if raw.size != 1:
            raise BadRequestError(f"The input tensor {INPUT_NAME!r} must hold exactly one request body.")
        return raw[0]

    # What the chat and completions models do differently.
    def _parse(self, body: bytes):
        raise NotImplementedError

    def _check(self, openai_request) -> None:
        raise NotImplementedError

    def _prompt(self, openai_request) -> Prompt:
        """Runs in a worker thread (rendering a long conversation takes a while)."""
        raise NotImplementedError

    def _builder(self, openai_request, prompt: Prompt) -> tuple[type, dict, str, dict | None, dict | None]:
        """(response builder class, its extra arguments, id prefix, structured-output constraint,
        extra sampling parameters)."""
        raise NotImplementedError

    async def _start(self, request, sink: TritonSink) -> None:
        request_id = request.request_id()
        openai_request = self._parse(self._body(request))
        lora_name = self.names.resolve(openai_request.model)
        self._check(openai_request)
        loop = asyncio.get_running_loop()
        prompt = await loop.run_in_executor(self._render_pool, self._prompt, openai_request)
        builder_class, builder_args, id_prefix, structured, sampling = self._builder(openai_request, prompt)
        generations = plan_generations(openai_request, prompt, self.limits, lora_name, structured, sampling)
        for generation in generations:
            self.request_format.check(generation)
        builder = builder_class(
            completion_id=id_prefix + (request_id or uuid.uuid4().hex),
            created=int(time.time()),
            model=openai_request.model or self.settings.served_model_name,
            system_fingerprint=self.system_fingerprint,
            choices=len(generations),
            prompt_tokens=prompt.num_tokens,
            include_usage=openai_request.include_usage,
            continuous_usage=openai_request.continuous_usage,
            top_logprobs=openai_request.top_logprobs_count,
            token_bytes=self.token_bytes,
            **builder_args,
        )
        state = RequestState(
            builder,
            sink,
            stream=openai_request.is_stream,
            choices=len(generations),
            require_finish_reason=self.request_format.reports_finish_reason,
        )
        await self._generate(state, generations, request_id)

    async def _generate(self, state: RequestState, generations: list[GenerationRequest], request_id: str) -> None:
        loop = asyncio.get_running_loop()
        fmt = self.request_format
        if self.grpc is not None:
            await self.grpc.prepare()
            calls = []
            for index, generation in enumerate(generations):
                inner_id = request_id if len(generations) == 1 else f"{request_id}.{index}"
                request = self.grpc.request(
                    self.settings.target_model,
                    self.settings.target_model_version,
                    fmt.inputs(generation),
                    fmt.requested_outputs(generation),
                    inner_id,
                )
                call = self.grpc.open(request)
                state.add_cancel_hook(lambda call=call: loop.call_soon_threadsafe(self.grpc.abandon, call))
                calls.append(call)
            self.responder.start(state)
            for index, (call, generation) in enumerate(zip(calls, generations)):
                self._spawn(loop, read_grpc(self.responder, state, index, self.grpc, call, fmt.decoder(generation)))
            return
        iterators = await asyncio.gather(
            *(self._bls(generation, request_id).async_exec(decoupled=True) for generation in generations)
        )
        for iterator in iterators:
            cancel = getattr(iterator, "cancel", None)  # Triton 25.04 and later
            if cancel is not None:
                state.add_cancel_hook(cancel)
        self.responder.start(state)
        for index, (iterator, generation) in enumerate(zip(iterators, generations)):
            threading.Thread(
                target=read_bls,
                args=(self.responder, state, index, iterator, fmt.decoder(generation)),
                daemon=True,
                name="chat-bls-read",
            ).start()

    def _bls(self, generation: GenerationRequest, request_id: str):
        pb = _pb()
        fmt = self.request_format
        return pb.InferenceRequest(
            request_id=request_id,
            model_name=self.settings.target_model,
            model_version=self.settings.target_model_version,
            inputs=[pb.Tensor(name, value) for name, value in fmt.inputs(generation).items()],
            requested_output_names=fmt.requested_outputs(generation),
        )

    def finalize(self) -> None:
        self.responder.stop()
        _retired.clear()
        self._render_pool.shutdown(wait=False, cancel_futures=True)
        log.info("%s finalized (%d requests still open)", self.model_name, self.responder.open_requests)


class OpenAIChatModel(_OpenAIModel):
    """`openai_chat`: Chat Completions. `model.py` subclasses it as `TritonPythonModel`."""

    kind = "chat"

    def _parse(self, body: bytes):
        return parse_chat_request(body)

    def _check(self, chat) -> None:
        check_chat_request(chat, trust_request_chat_template=self.settings.trusts_request_chat_template)

    def _prompt(self, chat) -> Prompt:
        return self.renderer.render(chat)

    def _builder(self, chat, prompt: Prompt):
        plan = plan_tools(
            chat,
            tool_call_parser=self.settings.tool_call_parser,
            reasoning_parser=self.settings.reasoning_parser,
            starts_in_reasoning=prompt_opens_reasoning(prompt.text),
        )
        builder_args = {
            "choice_text": plan.choice_text,
            "calls_finish_reason": plan.calls_finish_reason,
            "reasoning_field": self.settings.reasoning_field,
        }
        return ChatResponseBuilder, builder_args, "chatcmpl-", plan.structured, plan.sampling


class OpenAICompletionsModel(_OpenAIModel):
    """`openai_completions`: (legacy) Completions, with the same settings and transports."""

    kind = "completions"

    def _parse(self, body: bytes):
        return parse_completion_request(body)

    def _check(self, completion) -> None:
        check_completion_request(completion)

    def _prompt(self, completion) -> Prompt:
        return self.renderer.plain(completion.prompt)

    def _builder(self, completion, prompt: Prompt):
        return CompletionResponseBuilder, {"echo_text": completion.prompt if completion.echo else ""}, "cmpl-", None, None


def _context_length(tokenizer_path: str, tokenizer) -> int:
    """The model's context length from its config.json, else the tokenizer's limit, else 0."""
    config = Path(tokenizer_path) / "config.json"
    if config.is_file():
        try:
            value = json.loads(config.read_text()).get("max_position_embeddings")
            if value:
                return int(value)
        except (json.JSONDecodeError, ValueError):
            pass
    limit = getattr(tokenizer, "model_max_length", 0) or 0
    return int(limit) if 0 < limit < 10**8 else 0
