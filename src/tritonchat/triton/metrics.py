"""Custom metrics on Triton's metrics endpoint (`:8002/metrics`), through `pb_utils.MetricFamily`.

Every update is a message to the Triton server, so they are per request, never per token:
requests by outcome and finish reason or error, prompt and completion tokens, requests in
flight, time to first token and its stages, and time per output token after the first
(histograms).

All updates run on one thread, the instance's event loop: metric updates from several threads
at once crashed Triton 2.51 (`boost::interprocess::lock_exception` in the Python backend, then
SIGABRT) within seconds at 16 concurrent streams.
"""

from __future__ import annotations

from ..errors import OpenAIError
from ..sender import FIRST_TOKEN_STAGES, RequestState
from .sink import pb

LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
TOKEN_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]


class TritonMetrics:
    """The metrics of one model (label `model`); also the sender's `Observer`."""

    def __init__(self, model: str, loop, first_token_stages: bool = False):
        self.loop = loop  # every update runs there
        family = pb().MetricFamily
        self.labels = {"model": model}
        self._requests = family("tritonchat_requests_total",
                                "Requests by outcome (completed, error, cancelled) and finish reason or error code",
                                family.COUNTER)
        self._prompt = family("tritonchat_prompt_tokens_total", "Prompt tokens of completed requests", family.COUNTER)
        self._completion = family("tritonchat_completion_tokens_total", "Generated tokens", family.COUNTER)
        self._in_flight = family("tritonchat_requests_in_flight", "Requests being served", family.GAUGE)
        self._ttft = family("tritonchat_time_to_first_token_seconds", "From arrival to the first generated output",
                            family.HISTOGRAM)
        self._tpot = family("tritonchat_time_per_output_token_seconds",
                            "Per request: time between first and last output over the tokens after the first",
                            family.HISTOGRAM)
        self._stages = self.first_token_stages = None
        if first_token_stages:
            self._stages = family("tritonchat_first_token_stage_seconds",
                                  "A streamed request's first token by stage: prepare (arrival to the calls built), "
                                  "wait (to the generation model's first event), handoff (to the sender), send "
                                  "(its chunks built and sent)", family.HISTOGRAM)
            self.first_token_stages = {
                stage: self._stages.Metric(labels={**self.labels, "stage": stage}, buckets=LATENCY_BUCKETS)
                for stage in FIRST_TOKEN_STAGES}
        self.prompt_tokens = self._prompt.Metric(labels=self.labels)
        self.completion_tokens = self._completion.Metric(labels=self.labels)
        self.in_flight = self._in_flight.Metric(labels=self.labels)
        self.ttft = self._ttft.Metric(labels=self.labels, buckets=LATENCY_BUCKETS)
        self.tpot = self._tpot.Metric(labels=self.labels, buckets=TOKEN_BUCKETS)
        self._by_outcome: dict[tuple[str, str], object] = {}

    def _count(self, outcome: str, reason: str) -> None:
        metric = self._by_outcome.get((outcome, reason))
        if metric is None:
            metric = self._requests.Metric(labels={**self.labels, "outcome": outcome, "reason": reason})
            self._by_outcome[(outcome, reason)] = metric
        metric.increment(1)

    def request_started(self) -> None:
        """On the event loop."""
        self.in_flight.increment(1)

    def request_refused(self, error: OpenAIError) -> None:
        """On the event loop: a request that ended before it was started (invalid, unknown
        model, overload)."""
        self._count("cancelled" if error.status == 499 else "error", error.code or error.error_type)

    def request_finished(self, state: RequestState, outcome: str, error: OpenAIError | None) -> None:
        """The sender's `Observer` (a sender thread): recorded on the event loop."""
        self.loop.call_soon_threadsafe(self._record_finished, state, outcome, error)

    def _record_finished(self, state: RequestState, outcome: str, error: OpenAIError | None) -> None:
        self.in_flight.increment(-1)
        usage = state.builder.usage()
        self.completion_tokens.increment(usage.completion_tokens)
        if outcome == "completed":
            self._count(outcome, state.builder.finish_reason(0))
            self.prompt_tokens.increment(usage.prompt_tokens)
        else:
            self._count(outcome, (error.code or error.error_type) if error is not None else outcome)
        if state.first_output_at is not None:
            self.ttft.observe(state.first_output_at - state.arrived)
            tokens = usage.completion_tokens
            if tokens > 1 and state.last_output_at is not None:
                self.tpot.observe((state.last_output_at - state.first_output_at) / (tokens - 1))
        stages = state.first_token_stages() if self.first_token_stages is not None else None
        if stages is not None:
            for stage, seconds in stages.items():
                self.first_token_stages[stage].observe(seconds)
