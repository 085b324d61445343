"""The Triton side of `engine: inprocess` (transports/inprocess.py): a model instance's settings
from its own version directory, its engine started on the instance's event loop where Triton's
instance kind says, the `vllm:num_requests_running` gauge, and a dead engine made a model that
is no longer ready.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from ..engine.driver import device_environment, engine_exit_codes, vllm_api
from ..engine.process import prepare_process
from ..settings import Settings
from ..transports.inprocess import InProcessTransport, inprocess_settings
from .sink import pb

log = logging.getLogger("tritonchat")


def model_settings(parameters: dict[str, str], args: dict) -> Settings:
    """The instance's settings: from its parameters, and the target model's model.json or, with
    `engine: inprocess`, its own (`<model directory>/<version>/model.json`)."""
    if parameters.get("engine", "").strip() != "inprocess":
        return Settings.from_parameters(parameters, args.get("model_repository"))
    version_dir = Path(args.get("model_repository") or ".") / str(args.get("model_version") or "1")
    return inprocess_settings(parameters, version_dir)


class EngineLifecycle:
    """Starts the in-process engine of one model instance and watches it. Metric updates run on
    the instance's event loop only (several threads updating metrics at once crash Triton 2.51)."""

    def __init__(self, model_name: str, args: dict, transport: InProcessTransport, metrics: bool):
        self.model_name = model_name
        self.transport = transport
        prepare_process()  # spawn for the engine's processes, a real Python to spawn (engine/process.py)
        device_environment(args.get("model_instance_kind"), args.get("model_instance_device_id"), transport.config)
        self.gauge = self._family = None
        if metrics:
            try:
                family = pb().MetricFamily
                self._family = family("vllm:num_requests_running", "Number of requests currently running on GPU.",
                                      family.GAUGE)
                self.gauge = self._family.Metric(labels={"model": model_name,
                                                         "version": str(args.get("model_version") or "1")})
            except Exception:  # noqa: BLE001  (e.g. a second instance of the model: same labels)
                log.warning("%s: no vllm:num_requests_running gauge for this instance", model_name, exc_info=True)
        transport.on_running = self._running
        transport.on_dead = self._dead

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Makes the engine on the loop (blocks until it is up; raises what stopped it)."""
        vllm_api()  # imported here, in the stub's main thread, rather than on the loop
        asyncio.run_coroutine_threadsafe(self.transport.start(), loop).result()
        self._running(0)

    def release_metrics(self) -> None:
        """Drops the gauge before the engine is shut down. (Shutting down freezes what is left for
        the garbage collector, and a metric family still alive when the stub tears down its shared
        memory crashes the stub.)"""
        self.gauge = self._family = None

    def _running(self, count: int) -> None:
        if self.gauge is not None:
            self.gauge.set(count)

    def _dead(self) -> None:
        """The engine died (on the loop): requests already fail with 503; what else happens depends
        on how it ended (`_after_death`)."""
        asyncio.get_running_loop().create_task(self._after_death(self.transport.engine))

    async def _after_death(self, engine) -> None:
        """An engine that was asked to stop (its core exited with 0: Ctrl-C reaches every process of
        the terminal's group, the server is stopping too) is left at that: asking Triton to unload a
        model while the server shuts down crashes Triton 2.51's Python backend. An engine that
        crashed or was killed: as Triton's vLLM backend does for an unhealthy engine, the model asks
        to be unloaded, so that it stops being ready (in explicit model control; in other modes it
        stays loaded and answers every request with a 503)."""
        codes = engine_exit_codes(engine) if engine is not None else []
        for _ in range(30):  # the core's exit code, once it has exited (a few seconds at most)
            if None not in codes:  # (none: this vLLM does not tell)
                break
            await asyncio.sleep(0.1)
            codes = engine_exit_codes(engine)
        if codes and all(code == 0 for code in codes):
            log.warning("%s: its vLLM engine was stopped (a signal to its process, e.g. Ctrl-C); requests get 503 "
                        "until the model is reloaded", self.model_name)
            return
        try:
            pb().unload_model(self.model_name)  # returns at once; Triton unloads when requests end
            log.error("%s: its vLLM engine died (exit codes %s); the model is being unloaded", self.model_name,
                      codes or "unknown")
        except Exception as exc:  # noqa: BLE001
            log.error("%s: its vLLM engine died; the model stays loaded and answers 503 (unloading it failed: %s)",
                      self.model_name, exc)
