"""An OpenAI-compatible HTTP gateway in front of `openai_chat` / `openai_completions`.

    python -m tritonchat.gateway --port 9000 --http-url localhost:8000 [--api-key KEY]

For clients that speak only OpenAI's HTTP API (the `openai` SDK, LangChain, curl):
`POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`, `GET /health`.
Stateless: each body goes to the Triton model unchanged and each response payload comes back
unchanged, as OpenAI's server-sent events (`data: {...}` and `data: [DONE]`) when streaming.
Errors keep their OpenAI body and get their HTTP status (from the error itself, so also on
Triton releases whose generate endpoints answer 400 for everything). A client that
disconnects closes the Triton request, which cancels it.

The gateway reaches Triton over HTTP `generate_stream` by default; `--protocol grpc` uses a
gRPC stream instead (note that cancelling gRPC streams can crash Triton 2.51 under load; see
docs/design.md, "Disconnects"). Needs the `gateway` extra (FastAPI, uvicorn).
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import time
from contextlib import asynccontextmanager

import openai
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .client import _ASYNC_WIRES, CHAT_MODEL, COMPLETIONS_MODEL, _http_base, httpx

log = logging.getLogger("tritonchat.gateway")


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}}, status_code=status)


def _wants_stream(body: bytes) -> bool:
    try:
        value = json.loads(body)
    except ValueError:
        return False  # the model answers the 400
    return isinstance(value, dict) and value.get("stream") is True


def create_app(http_url: str = "localhost:8000", *, protocol: str = "http", grpc_url: str = "localhost:8001",
               chat_model: str = CHAT_MODEL, completions_model: str = COMPLETIONS_MODEL,
               api_key: str | None = None, timeout: float = 600.0,
               served_model_names: list[str] | None = None) -> FastAPI:
    """The gateway app. `/v1/models` lists `served_model_names`, else the `served_model_name`
    parameter of the chat models' configs (set by `python -m tritonchat.repository
    --served-model-name`; a model whose name comes from its `model.json` is not listed)."""
    wire = _ASYNC_WIRES[protocol](http_url if protocol == "http" else grpc_url, None, timeout)
    triton = httpx.AsyncClient(base_url=_http_base(http_url), timeout=10.0)

    @asynccontextmanager
    async def lifespan(_app):
        yield
        await wire.close()
        await triton.aclose()

    app = FastAPI(title="tritonchat gateway", docs_url=None, redoc_url=None, lifespan=lifespan)
    created = int(time.time())

    @app.middleware("http")
    async def authorize(request: Request, call_next):
        if api_key and request.url.path.startswith("/v1/"):
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        return await call_next(request)

    async def forward(model: str, request: Request) -> Response:
        body = await request.body()
        text = body.decode("utf-8", errors="replace")
        if not _wants_stream(body):
            payloads = wire.payloads(model, text, False)
            try:
                payload = await payloads.__anext__()
            except openai.APIStatusError as error:
                return JSONResponse({"error": error.body}, status_code=error.status_code)
            finally:
                await payloads.aclose()
            return Response(payload, media_type="application/json")

        payloads = wire.payloads(model, text, True)
        try:
            first = await payloads.__anext__()
        except openai.APIStatusError as error:  # refused before any chunk: a plain error response
            await payloads.aclose()
            return JSONResponse({"error": error.body}, status_code=error.status_code)
        except StopAsyncIteration:
            first = None

        async def events():
            try:
                if first is not None:
                    yield f"data: {first}\n\n"
                    async for payload in payloads:
                        yield f"data: {payload}\n\n"
            except openai.APIStatusError as error:
                yield f"data: {json.dumps({'error': error.body}, ensure_ascii=False)}\n\n"
            finally:
                await payloads.aclose()  # on a disconnect too: closing the Triton request cancels it
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await forward(chat_model, request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await forward(completions_model, request)

    @app.get("/v1/models")
    async def models() -> Response:
        names: list[str] = []
        for model in dict.fromkeys((chat_model, completions_model)):
            try:
                response = await triton.get(f"/v2/models/{model}/config")
            except httpx.HTTPError as exc:
                return _error(503, f"Triton cannot be reached: {exc}", "server_error", "service_unavailable")
            if response.status_code != 200:
                continue
            parameters = response.json().get("parameters", {})
            name = parameters.get("served_model_name", {}).get("string_value")
            for served in served_model_names or ([name] if name else []):
                if served not in names:
                    names.append(served)
        data = [{"id": name, "object": "model", "created": created, "owned_by": "tritonchat"} for name in names]
        return JSONResponse({"object": "list", "data": data})

    @app.get("/health")
    async def health() -> Response:
        try:
            response = await triton.get(f"/v2/models/{chat_model}/ready")
        except httpx.HTTPError:
            return Response(status_code=503)
        return Response(status_code=200 if response.status_code == 200 else 503)

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn  # noqa: PLC0415

    parser = argparse.ArgumentParser(description="OpenAI-compatible HTTP gateway to Triton's openai_chat")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--http-url", default="localhost:8000", help="Triton's HTTP endpoint")
    parser.add_argument("--grpc-url", default="localhost:8001", help="Triton's gRPC endpoint (--protocol grpc)")
    parser.add_argument("--protocol", choices=sorted(_ASYNC_WIRES), default="http")
    parser.add_argument("--chat-model", default=CHAT_MODEL)
    parser.add_argument("--completions-model", default=COMPLETIONS_MODEL)
    parser.add_argument("--served-model-name", action="append", dest="served_model_names",
                        help="a name for /v1/models (repeatable; default: the chat models' served_model_name)")
    parser.add_argument("--api-key", default=os.environ.get("TRITONCHAT_API_KEY"),
                        help="require `Authorization: Bearer KEY` (default: $TRITONCHAT_API_KEY; none: open)")
    args = parser.parse_args(argv)
    app = create_app(args.http_url, protocol=args.protocol, grpc_url=args.grpc_url, chat_model=args.chat_model,
                     completions_model=args.completions_model, api_key=args.api_key,
                     served_model_names=args.served_model_names)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
