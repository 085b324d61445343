"""The `openai_chat`, `openai_completions`, `anthropic_messages` and `openai_responses` Triton
models: lifecycle and per-request glue.

    execute(requests) --> one task per request on this instance's event loop:
        body (sink.request_body) --service.prepare (worker thread)--> PreparedRequest
        --transport.open--> one stream per choice --pump--> Sender (builds, sends, cancels)

`execute` only schedules that work and returns, so one instance serves many streams at once.
It is a plain function and the event loop is this model's own, on its own thread (as in
NVIDIA's vLLM backend): an `async def execute` would put every call through the 2.51 stub's
bookkeeping of coroutines, which logs "Cannot remove future from background; KeyError" as an
error whenever the coroutine finishes before the stub has registered it, which for a coroutine
that only schedules work is most of the time.
"""

from __future__ import annotations

import asyncio
import json
import locale
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..anthropic import AnthropicService
from ..responses import ResponsesService
from ..errors import InternalError, OpenAIError, UnavailableError
from ..images import image_urls, load_image
from ..sender import RequestState, Sender, pump
from ..service import ChatService, CompletionService, Service
from ..settings import Settings, flatten_parameters
from ..target import fetch_interface
from ..transports import Transport, make_transport
from . import bls  # noqa: F401  (registers the BLS transport)
from .engine import EngineLifecycle, model_settings
from .metrics import TritonMetrics
from .sink import INPUT_NAME, OUTPUT_NAME, TEXT_OUTPUT_NAME, TritonSink, pb, request_body

log = logging.getLogger("tritonchat")
# How long to wait before asking the server for the target's configuration again.
TARGET_RETRY_S = 30.0


class ServiceSink(TritonSink):
    """A request's sink, whose errors go out as the service's clients expect them
    (`Service.public_error`: OpenAI's error objects, or Anthropic's)."""

    def __init__(self, request, public_error, **kwargs):
        super().__init__(request, **kwargs)
        self._public_error = public_error

    def send_error(self, error: OpenAIError) -> None:
        super().send_error(self._public_error(error))


class OpenAIModel:
    """What the chat and completions models share; `model.py` subclasses one as `TritonPythonModel`."""

    service_class: type[Service] = Service

    @staticmethod
    def auto_complete_config(config):
        """The interface, declared here so that `config.pbtxt` carries only what users change."""
        config.add_input({"name": INPUT_NAME, "data_type": "TYPE_STRING", "dims": [1]})
        config.add_output({"name": OUTPUT_NAME, "data_type": "TYPE_STRING", "dims": [1]})
        parameters = flatten_parameters(config.as_dict())
        if str(parameters.get("text_output", "")).lower() in ("true", "1", "yes"):
            config.add_output({"name": TEXT_OUTPUT_NAME, "data_type": "TYPE_STRING", "dims": [1]})
        config.set_max_batch_size(0)
        config.set_model_transaction_policy({"decoupled": True})
        return config

    def initialize(self, args: dict) -> None:
        # The stub's interpreter starts with an ASCII locale; tokenizer files are UTF-8.
        try:
            locale.setlocale(locale.LC_ALL, "C.UTF-8")
        except locale.Error:
            pass
        logging.basicConfig(level=os.environ.get("TRITONCHAT_LOG_LEVEL", "INFO"))
        utils = pb()
        self.model_name = args.get("model_name", "")
        model_config = json.loads(args["model_config"])
        if not utils.using_decoupled_model_transaction_policy(model_config):
            raise utils.TritonModelException(
                f"{self.model_name} must be decoupled: set model_transaction_policy {{ decoupled: true }}"
            )
        settings: Settings = model_settings(flatten_parameters(model_config), args)
        self.service = self.service_class(settings)
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="chat-prepare")
        # Image downloads wait on the network, not the CPU: their own threads, so slow image URLs
        # never hold the threads that prepare other requests (made when first needed).
        self.fetch_pool: ThreadPoolExecutor | None = None
        self.loop = asyncio.new_event_loop()
        self.metrics = TritonMetrics(self.model_name, self.loop, settings.first_token_stages) if settings.metrics else None
        self.sender = Sender(
            settings.cancel_check_interval_ms / 1000.0,
            settings.idle_timeout_s,
            lanes=settings.responder_threads,
            observer=self.metrics,
        )
        self.max_open = settings.max_open_requests
        self.text_output = settings.text_output
        self._open = 0  # requests between execute and their FINAL response
        self._open_lock = threading.Lock()
        self.transport: Transport = make_transport(settings)
        self._target_url = settings.http_url
        self._target_known = False
        self._target_asked = -TARGET_RETRY_S
        self._tasks: set[asyncio.Task] = set()
        self._loop_thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="chat-loop")
        self._loop_thread.start()
        # `engine: inprocess`: this model's own vLLM engine, made here (transports/inprocess.py).
        self.engine: EngineLifecycle | None = None
        if settings.engine == "inprocess":
            self._target_known = True  # nothing to ask the server about
            try:
                self.engine = EngineLifecycle(self.model_name, args, self.transport, settings.metrics)
                self.engine.start(self.loop)
            except BaseException:
                self.sender.stop()
                self.loop.call_soon_threadsafe(self.loop.stop)
                raise
        log.info(
            "%s ready: serves %r via %s (context %d tokens, tokenizer %s)",
            self.model_name,
            settings.served_model_name,
            f"its own vLLM engine ({settings.engine_dir}/model.json)" if self.engine is not None else
            f"{settings.request_format} model {settings.target_model!r} over " +
            {"http": f"HTTP at {settings.http_url}", "grpc": f"gRPC at {settings.grpc_url}"}.get(settings.transport, "BLS"),
            self.service.limits.context_length,
            settings.tokenizer,
        )

    def execute(self, requests):
        arrived = time.monotonic()
        for request in requests:
            sink = ServiceSink(request, self.service.public_error, on_close=self._closed,
                               text_output=self.text_output)
            with self._open_lock:
                full = bool(self.max_open) and self._open >= self.max_open
                self._open += 1
            if full:
                # Refused at once: an overloaded instance answers in milliseconds instead of
                # queueing without bound. (Sent from the event loop: an error sent from inside
                # `execute` reached 2.51's generate_stream clients as a broken chunked response.)
                error = UnavailableError(
                    f"This model is serving {self.max_open} requests, its limit (max_open_requests); try again.")
                self.loop.call_soon_threadsafe(self._fail, sink, error)
                continue
            self.loop.call_soon_threadsafe(self._spawn, self._handle(request, sink, arrived))
        return None

    def _closed(self) -> None:
        with self._open_lock:
            self._open -= 1

    def _spawn(self, coroutine) -> None:
        """On the loop: run `coroutine` as a task held until it ends."""
        task = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, request, sink: TritonSink, arrived: float) -> None:
        try:
            await self._start(request, sink, arrived)
        except OpenAIError as error:
            self._fail(sink, error)
        except Exception as exc:  # noqa: BLE001  (a request must never end without FINAL)
            log.exception("request failed")
            self._fail(sink, InternalError(f"Internal error: {exc}"))

    def _fail(self, sink: TritonSink, error: OpenAIError) -> None:
        """A request that ends before the sender took it (refused, or failed to start)."""
        if sink.closed:
            return
        if self.metrics is not None:
            self.metrics.request_refused(error)
        try:
            sink.send_error(error)
        except Exception:  # noqa: BLE001
            log.exception("could not send the error response")

    async def _learn_target(self, loop) -> None:
        """Read the target's interface from the server once (see target.py): at the first request, since the server's endpoints are not up while models
        load; retried every TARGET_RETRY_S while the server cannot answer."""
        if self._target_known or time.monotonic() - self._target_asked < TARGET_RETRY_S:
            return
        self._target_asked = time.monotonic()
        settings = self.service.settings
        try:
            interface = await loop.run_in_executor(
                self.pool, fetch_interface, self._target_url, settings.target_model, settings.target_model_version,
                settings.loopback_header_map, 5.0)
        except Exception as exc:  # noqa: BLE001  (the parameters apply meanwhile)
            log.warning("could not read %r's configuration from %s (%s); using the parameters",
                        settings.target_model, self._target_url, exc)
            return
        self.service.learn_target(interface)
        self._target_known = True
        options = self.service.format.options
        log.info("%s: target %r (server %s): seed input %r, min-tokens input %r, token counts %s, "
                 "structured-outputs key %r", self.model_name, settings.target_model,
                 interface.server_version or "?", options.seed_input, options.min_tokens_input,
                 options.token_count_outputs, options.structured_outputs_key)

    async def _start(self, request, sink: TritonSink, arrived: float) -> None:
        body = request_body(request)
        loop = asyncio.get_running_loop()
        await self._learn_target(loop)
        # One hop to the thread pool for the whole preparation (a request with images comes back
        # staged, for its images to be read first).
        staged, prepared = await loop.run_in_executor(self.pool, self._prepare, body, request.request_id())
        if staged.answer is not None:  # answered without generation (Anthropic's count_tokens)
            sink.send(staged.answer, final=True)
            return
        if prepared is None:
            images = await self._load_images(loop, staged) if staged.image_count else None
            prepared = await loop.run_in_executor(self.pool, self.service.complete, staged, images)
        prepared_at = time.monotonic()
        opened = await asyncio.gather(*(self.transport.open(call) for call in prepared.calls), return_exceptions=True)
        failed = [result for result in opened if isinstance(result, BaseException)]
        if failed:
            for stream in opened:
                if not isinstance(stream, BaseException):
                    stream.abandon()
                    self._spawn(stream.released())
            raise failed[0]
        state = RequestState(
            prepared.builder,
            sink,
            stream=prepared.stream,
            stream_interval=prepared.stream_interval,
            choices=len(prepared.calls),
            require_finish_reason=self.service.format.reports_finish_reason,
            arrived=arrived,
        )
        state.prepared_at = prepared_at
        if self.metrics is not None:
            self.metrics.request_started()
        for stream in opened:
            state.add_cancel_hook(stream.cancel_hook())
        self.sender.start(state)
        for index, (stream, decoder) in enumerate(zip(opened, prepared.decoders)):
            # (a stream that yields decoded outputs, the in-process engine's, has its own decoder)
            self._spawn(pump(self.sender, state, index, stream, getattr(stream, "decoder", None) or decoder))

    def _prepare(self, body, request_id: str):
        """On the thread pool: the request staged and, unless it has images to read first or was
        answered without generation, prepared."""
        staged = self.service.stage(body, request_id)
        if staged.answer is not None or staged.image_count:
            return staged, None
        return staged, self.service.complete(staged, None)

    async def _load_images(self, loop, staged) -> list:
        """The request's images, each read on a thread of the fetch pool, all at once."""
        if self.fetch_pool is None:
            self.fetch_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="chat-fetch")
        policy = self.service.image_policy
        return list(await asyncio.gather(*(
            loop.run_in_executor(self.fetch_pool, load_image, url, policy, where)
            for where, url in image_urls(staged.request, policy))))

    def finalize(self) -> None:
        self.sender.stop()
        if self.engine is not None:
            self.engine.release_metrics()
        if self.loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self.transport.close(), self.loop).result(
                    timeout=getattr(self.transport, "close_timeout", 5))
            except Exception:  # noqa: BLE001  (shutting down anyway)
                log.debug("closing the transport failed", exc_info=True)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._loop_thread.join(timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.fetch_pool is not None:
            self.fetch_pool.shutdown(wait=False, cancel_futures=True)
        log.info("%s finalized (%d requests still open)", self.model_name, self.sender.open_requests)


class OpenAIChatModel(OpenAIModel):
    """`openai_chat`: Chat Completions."""

    service_class = ChatService


class OpenAICompletionsModel(OpenAIModel):
    """`openai_completions`: (legacy) Completions."""

    service_class = CompletionService


class AnthropicMessagesModel(OpenAIModel):
    """`anthropic_messages`: Anthropic Messages (its errors in Anthropic's shape: `public_error`)."""

    service_class = AnthropicService


class OpenAIResponsesModel(OpenAIModel):
    """`openai_responses`: OpenAI Responses (`POST /v1/responses`)."""

    service_class = ResponsesService
