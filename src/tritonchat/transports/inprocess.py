"""`engine: inprocess`: the chat model runs its own vLLM engine (`AsyncLLM`) and reads it directly.

No second model and no loopback call: the engine's outputs are read on the chat model's own
event loop (AsyncLLM's output handler runs there) and handed to the sender as
`GenerationOutput`s, not tensors (`EngineStream.decoder` passes them through). The request side
is unchanged: each choice's call carries the vLLM backend's input tensors (the `vllm` request
format), read here as Triton's vLLM backend reads them, so both paths send the engine the same
prompt and sampling parameters.

Per choice one engine request, in vLLM's DELTA output kind when streamed (each output holds only
what is new, and vLLM merges outputs that pile up before they are read) and FINAL_ONLY for a
whole answer (one output at the end). Giving a stream up aborts its engine request. An engine
that dies fails every open stream and every new request with a 503, and is reported once
(`on_dead`: the Triton glue makes the model unavailable).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..engine.driver import (
    EngineConfig,
    build_sampling_params,
    create_engine,
    decode_image,
    is_engine_dead,
    is_refusal,
    render_prompt,
    shutdown_engine,
    vllm_api,
)
from ..engine.outputs import generation_output
from ..engine.process import freeze_gc
from ..errors import BadRequestError, CancelledError, ConfigError, InternalError, OpenAIError, UnavailableError
from ..formats import Decoder, GenerationOutput, TargetCall
from ..formats.base import element_text
from ..repository import first_value, read_lora_adapters
from ..settings import Settings
from .base import register_transport

log = logging.getLogger(__name__)

# How often the engine's health is looked at while nothing reads it (a property, no call).
WATCH_INTERVAL_S = 1.0
# The `vllm:num_requests_running` gauge is set at most this often (each set is a round trip to
# Triton's process; per request start and end it cost 8% of the stub's time at concurrency 64).
RUNNING_REPORT_S = 0.05


def engine_args(args: dict) -> dict:
    """The engine arguments the engine is made with: model.json's, with vLLM's own stat logging
    off unless model.json says otherwise (`disable_log_stats`): in a chat model's process nothing
    reads vLLM's Prometheus registry or wants its log lines, and recording them cost 5% of the
    stub's time at concurrency 64. The `vllm:num_requests_running` gauge is reported anyway."""
    return {"disable_log_stats": True, **args}


class Decoded(Decoder):
    """The decoder of a stream that yields `GenerationOutput`s already: hands them on."""

    def __init__(self) -> None:  # noqa: D107  (no format, no request)
        pass

    def decode(self, outputs: GenerationOutput) -> GenerationOutput:
        return outputs


DECODED = Decoded()
# Put into an abandoned stream's collector to end a read in progress.
_ABANDONED = CancelledError("The generation was given up.")


def inprocess_settings(parameters: dict[str, str], version_dir: str | Path) -> Settings:
    """The settings of a model with `engine: inprocess`: what the loopback path finds in the target
    model's model.json (tokenizer, served name, context length, LoRA adapters) comes from the one
    in this model's own version directory, and the transport is the engine itself."""
    version_dir = Path(version_dir)
    args = EngineConfig.read(version_dir).args
    found = {
        "tokenizer": args.get("tokenizer") or args.get("model"),
        "served_model_name": first_value(args.get("served_model_name")) or args.get("model"),
        "max_model_len": args.get("max_model_len"),
    }
    given = {key for key, value in parameters.items() if value.strip() and not value.strip().startswith("${")}
    defaults = {key: str(value) for key, value in found.items() if value and key not in given}
    settings = Settings.from_parameters({**parameters, **defaults}, None)  # None: no target to read
    if settings.request_format != "vllm":
        raise ConfigError(f"engine: inprocess runs a vLLM engine: request_format must be vllm, "
                          f"not {settings.request_format!r}")
    return replace(settings, transport="inprocess", engine_dir=str(version_dir),
                   lora_adapters=read_lora_adapters(args, version_dir))


def _first(inputs: dict, name: str):
    tensor = inputs.get(name)
    return None if tensor is None or not tensor.size else tensor.reshape(-1)[0]


@register_transport("inprocess")
class InProcessTransport:
    """The model instance's engine, made by `start` (on the instance's event loop) from the
    engine arguments in `settings.engine_dir`, shut down by `close`."""

    # Seconds `finalize` waits for `close` (the engine's processes are stopped with SIGTERM and
    # waited for: about 4 s here).
    close_timeout = 60.0

    def __init__(self, settings, config: EngineConfig | None = None):
        self.config = config or EngineConfig.read(Path(settings.engine_dir))
        self.engine = None
        self.dead = False
        # Set by the Triton glue: `on_running(requests)` after each change of the number of
        # requests in the engine, `on_dead()` once when the engine is found dead (on the loop).
        self.on_running: Callable[[int], None] | None = None
        self.on_dead: Callable[[], None] | None = None
        self._streams: set[EngineStream] = set()
        self._ids = itertools.count()
        self._prefix = f"{int(time.time() * 1000) % 100000000:x}"
        self._watch: asyncio.Task | None = None
        self._kinds = None
        self._report_due = False

    # ---- lifecycle (on the event loop) ------------------------------------------------------------
    async def start(self) -> None:
        self.engine = await create_engine(engine_args(self.config.args))
        tasks = await self.engine.get_supported_tasks()
        if "generate" not in tasks:
            raise ValueError(f"The engine of {self.config.args.get('model')!r} does not generate text (it serves "
                             f"{', '.join(tasks) or 'nothing'}).")
        kinds = vllm_api().RequestOutputKind
        self._kinds = (kinds.DELTA, kinds.FINAL_ONLY)
        self._watch = asyncio.get_running_loop().create_task(self._watch_engine())
        freeze_gc()  # as vLLM's own API server: keep the startup heap out of later GC passes

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        for stream in list(self._streams):
            stream.fail(UnavailableError("The model is shutting down; the generation was stopped."))
        if self.engine is not None:
            engine, self.engine = self.engine, None
            try:
                shutdown_engine(engine)
            finally:
                # The stub exits soon after: keep its teardown from walking vLLM's object graph.
                freeze_gc()

    async def _watch_engine(self) -> None:
        while not self.dead:
            await asyncio.sleep(WATCH_INTERVAL_S)
            if self.engine is not None and self.engine.errored:
                self._found_dead()

    def _found_dead(self) -> UnavailableError:
        error = UnavailableError("The generation model is unavailable: its vLLM engine stopped (see the server log).")
        if not self.dead:
            self.dead = True
            log.error("the in-process vLLM engine is dead; its %d open requests fail", len(self._streams))
            for stream in list(self._streams):
                stream.fail(error)
            if self.on_dead is not None:
                try:
                    self.on_dead()
                except Exception:  # noqa: BLE001
                    log.exception("reporting the dead engine failed")
        return error

    def running_changed(self) -> None:
        """Reports the engine's number of requests soon (on the loop): at most one report per
        `RUNNING_REPORT_S`, each a round trip to Triton's process, however many requests start and
        end meanwhile."""
        if self.on_running is None or self._report_due:
            return
        self._report_due = True
        asyncio.get_running_loop().call_later(RUNNING_REPORT_S, self._report_running)

    def _report_running(self) -> None:
        self._report_due = False
        if self.on_running is not None and self.engine is not None:
            try:
                self.on_running(self.engine.get_num_unfinished_requests())
            except Exception:  # noqa: BLE001  (metrics must never break a request)
                log.exception("could not report the engine's requests")

    # ---- requests ---------------------------------------------------------------------------------
    async def open(self, call: TargetCall) -> EngineStream:
        engine = self.engine
        if engine is None or self.dead or engine.errored:
            raise self._found_dead() if engine is not None else UnavailableError(
                "The generation model is unavailable: its engine is not running.")
        inputs = call.inputs
        prompt = element_text(_first(inputs, "text_input"))
        streamed = bool(_first(inputs, "stream"))
        sampling = element_text(_first(inputs, "sampling_parameters") or b"{}")
        try:
            params, lora_name = build_sampling_params(sampling, self._kinds[0] if streamed else self._kinds[1])
        except ValueError as exc:
            raise InternalError(f"The generation model failed: its sampling parameters were refused: {exc}") from exc
        if (refusal := self.config.lora_refusal(lora_name)) is not None:  # (the chat layer checks names first)
            raise InternalError(f"The generation model failed: {refusal}")
        images = inputs.get("image")
        request_id = f"{call.request_id or 'chat'}-{self._prefix}-{next(self._ids)}"
        try:
            decoded = [decode_image(element) for element in images.reshape(-1)] if images is not None else None
            rendered = await render_prompt(engine, prompt, decoded)
            collector = await engine.add_request(request_id, rendered, params,
                                                 lora_request=self.config.lora_request(lora_name))
        except Exception as exc:  # noqa: BLE001  (each failure is told as its kind)
            raise self.error(exc) from exc
        stream = EngineStream(self, collector, request_id)
        self._streams.add(stream)
        self.running_changed()
        return stream

    def error(self, exc: BaseException) -> OpenAIError:
        """An engine failure as our client's error: 503 for a dead engine, 400 for what vLLM
        refuses of the request itself, else 500 with the cause."""
        if isinstance(exc, OpenAIError):
            return exc
        if is_engine_dead(exc) or (self.engine is not None and self.engine.errored):
            return self._found_dead()
        cause = exc.__cause__ if type(exc).__name__ == "EngineGenerateError" and exc.__cause__ else exc
        message = str(cause) or type(cause).__name__
        if is_refusal(cause):
            return BadRequestError(f"The generation model refused the request: {message}")
        return InternalError(f"The generation model failed: {message}")

    async def abort(self, stream: EngineStream) -> None:
        try:
            if self.engine is not None and not self.dead:
                await self.engine.abort(stream.request_id)
        except Exception:  # noqa: BLE001  (a dead engine has nothing left to abort)
            log.debug("aborting %s failed", stream.request_id, exc_info=True)
        finally:
            self.ended(stream)

    def ended(self, stream: EngineStream) -> None:
        if stream in self._streams:
            self._streams.discard(stream)
            self.running_changed()


class EngineStream:
    """One choice's engine request, read from vLLM's output collector of the request."""

    decoder = DECODED

    def __init__(self, transport: InProcessTransport, collector, request_id: str):
        self._transport = transport
        self._collector = collector
        self.request_id = request_id
        self._loop = asyncio.get_running_loop()
        self._finished = False  # the engine's last output was read
        self._abandoned = False
        self._aborting: asyncio.Task | None = None

    def __aiter__(self):
        return self

    async def __anext__(self) -> GenerationOutput:
        if self._finished or self._abandoned:
            raise StopAsyncIteration
        collector = self._collector
        try:
            output = collector.get_nowait() or await collector.get()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            if self._abandoned:  # woken by `abandon`
                raise StopAsyncIteration from None
            self._end()
            raise self._transport.error(exc) from exc
        if output.finished:
            self._end()
        result = generation_output(output)
        reason = result.finish_reason
        if reason == "abort" or reason == "error":
            if self._abandoned:
                raise StopAsyncIteration
            raise (UnavailableError("The generation model aborted the generation.") if reason == "abort"
                   else InternalError("The generation model failed the generation (finish reason 'error')."))
        return result

    def _end(self) -> None:
        self._finished = True
        self._transport.ended(self)

    def fail(self, error: OpenAIError) -> None:
        """On the loop: end a read in progress with `error` (a dead engine, shutting down)."""
        if not self._finished:
            self._collector.put(error)

    def abandon(self) -> None:
        """On the loop: the outputs are no longer wanted; the engine request is aborted, and a
        read in progress ends."""
        if self._abandoned:
            return
        self._abandoned = True
        if not self._finished:
            self._finished = True
            self._collector.put(_ABANDONED)
            self._aborting = self._loop.create_task(self._transport.abort(self))

    async def released(self) -> None:
        if self._aborting is not None:
            await asyncio.shield(self._aborting)

    def cancel_hook(self) -> Callable[[], None]:
        loop = self._loop
        return lambda: loop.call_soon_threadsafe(self.abandon)
