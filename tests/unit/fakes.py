"""Stand-ins for unit tests: a response sink, and `triton_python_backend_utils` as the Python
backend stub provides it (the parts `tritonchat.triton` uses), with BLS streams that tests script."""

from __future__ import annotations

import json
import threading
import time
import types

import numpy as np

from tritonchat.errors import OpenAIError


class FakeSink:
    """A `Sink` that records what the sender sends and fails on anything after FINAL."""

    def __init__(self, send_delay: float = 0.0, cancel_after_sends: int | None = None):
        self.sent: list[tuple[str, bool]] = []
        self.errors: list[OpenAIError] = []
        self.send_delay = send_delay
        self.cancel_after_sends = cancel_after_sends
        self.done = threading.Event()

    def send(self, payload: str, final: bool) -> None:
        assert not self.done.is_set(), "nothing may be sent after FINAL"
        time.sleep(self.send_delay)
        self.sent.append((payload, final))
        if final:
            self.done.set()

    def send_error(self, error: OpenAIError) -> None:
        assert not self.done.is_set(), "nothing may be sent after FINAL"
        self.errors.append(error)
        self.done.set()

    def is_cancelled(self) -> bool:
        return self.cancel_after_sends is not None and len(self.sent) >= self.cancel_after_sends

    @property
    def payloads(self) -> list[dict]:
        return [json.loads(p) for p, _ in self.sent]


FINAL = 1


class TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 1):
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class Tensor:
    def __init__(self, name: str, array: np.ndarray):
        self._name, self._array = name, np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceResponse:
    def __init__(self, output_tensors=(), error: TritonError | None = None):
        self._tensors, self._error = list(output_tensors), error

    def output_tensors(self):
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class ResponseSender:
    """Records responses; a second FINAL, or anything after one, is what crashes Triton."""

    def __init__(self):
        self.responses: list[tuple[InferenceResponse, int]] = []
        self.final = threading.Event()

    def send(self, response=None, flags: int = 0) -> None:
        assert not self.final.is_set(), "sent after FINAL"
        self.responses.append((response, flags))
        if flags & FINAL:
            self.final.set()

    def payloads(self) -> list[dict]:
        return [json.loads(r.output_tensors()[0].as_numpy()[0]) for r, _ in self.responses if r.output_tensors()]

    def errors(self) -> list[TritonError]:
        return [r.error() for r, _ in self.responses if r is not None and r.has_error()]


class Request:
    """An `openai_chat` request as Triton hands it to `execute`."""

    def __init__(self, body, request_id: str = "", cancel_after: int | None = None, tensor_name: str = "request"):
        value = np.array([body.encode() if isinstance(body, str) else body], dtype=np.object_)
        self.tensors = {tensor_name: Tensor(tensor_name, value)}
        self._id = request_id
        self.sender = ResponseSender()
        self.cancel_after = cancel_after
        self.cancel_checks_after_final = 0

    def request_id(self) -> str:
        return self._id

    def get_response_sender(self) -> ResponseSender:
        return self.sender

    def is_cancelled(self) -> bool:
        if self.sender.final.is_set():
            self.cancel_checks_after_final += 1  # touches a freed response factory in Triton
        return self.cancel_after is not None and len(self.sender.responses) >= self.cancel_after


class ResponseIterator:
    """A BLS stream: yields scripted responses (with a delay each), then stops."""

    def __init__(self, responses: list[InferenceResponse], delay: float = 0.0):
        self._responses, self._delay = responses, delay
        self.cancelled = threading.Event()
        self.read = 0

    def __iter__(self):
        for response in self._responses:
            time.sleep(self._delay)
            self.read += 1
            yield response

    def cancel(self) -> None:
        self.cancelled.set()


class Metric:
    """Records its updates and the threads that made them (2.51 crashes on concurrent ones)."""

    update_threads: set[int] = set()

    def __init__(self, labels: dict, buckets: list | None):
        self.labels, self.buckets = labels, buckets
        self.value = 0.0
        self.observations: list[float] = []

    def increment(self, value: float) -> None:
        Metric.update_threads.add(threading.get_ident())
        self.value += value

    def set(self, value: float) -> None:
        Metric.update_threads.add(threading.get_ident())
        self.value = value

    def observe(self, value: float) -> None:
        assert self.buckets is not None, "observe() needs a histogram"
        Metric.update_threads.add(threading.get_ident())
        self.observations.append(value)


def metric_family_class():
    """`pb_utils.MetricFamily`, recording every metric in `MetricFamily.families` by name."""

    class MetricFamily:
        COUNTER, GAUGE, HISTOGRAM = range(3)
        families: dict[str, MetricFamily] = {}

        def __init__(self, name: str, description: str, kind: int):
            self.name, self.description, self.kind = name, description, kind
            self.metrics: list[Metric] = []
            MetricFamily.families[name] = self

        def Metric(self, labels=None, buckets=None):  # noqa: N802  (pb_utils' name)
            assert (buckets is not None) == (self.kind == self.HISTOGRAM)
            metric = Metric(dict(labels or {}), buckets)
            self.metrics.append(metric)
            return metric

        @classmethod
        def value(cls, name: str, **labels) -> float | list[float]:
            [metric] = [m for m in cls.families[name].metrics if all(m.labels.get(k) == v for k, v in labels.items())]
            return metric.observations if metric.buckets is not None else metric.value

    return MetricFamily


def make_pb_utils(bls_script):
    """A `triton_python_backend_utils` module; `bls_script(request)` gives each BLS call's
    ResponseIterator (and may record the request)."""
    module = types.ModuleType("triton_python_backend_utils")
    module.TritonError = TritonError
    module.Tensor = Tensor
    module.InferenceResponse = InferenceResponse
    module.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL
    module.TritonModelException = type("TritonModelException", (Exception,), {})
    module.MetricFamily = metric_family_class()

    def get_input_tensor_by_name(request, name):
        return request.tensors.get(name)

    def using_decoupled_model_transaction_policy(config):
        return bool(config.get("model_transaction_policy", {}).get("decoupled"))

    class InferenceRequest:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        async def async_exec(self, decoupled: bool = False):
            assert decoupled
            return bls_script(self)

    module.get_input_tensor_by_name = get_input_tensor_by_name
    module.using_decoupled_model_transaction_policy = using_decoupled_model_transaction_policy
    module.InferenceRequest = InferenceRequest
    return module
