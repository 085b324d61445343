"""The transports to the generation model, registered by name (`transport` setting): `http` and
`grpc` here; `bls` registers itself from `triton/bls.py` (it needs Triton's Python backend)."""

from . import grpc, http  # noqa: F401  (importing them registers them)
from .base import TRANSPORTS, Outputs, TargetStream, Transport, error_for, make_transport, register_transport

__all__ = ["TRANSPORTS", "Outputs", "TargetStream", "Transport", "error_for", "make_transport", "register_transport"]
