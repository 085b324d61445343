"""An OpenAI-compatible HTTP gateway in front of `openai_chat` / `openai_completions`, which
also serves Anthropic's Messages API in front of `anthropic_messages`, OpenAI's Responses API
in front of `openai_responses` and OpenAI's embeddings in front of `openai_embeddings`.

    python -m tritonchat.clients.gateway --port 9000 --http-url localhost:8000 [--api-key KEY]

For clients that speak only OpenAI's HTTP API (the `openai` SDK, LangChain, curl):

    POST /v1/chat/completions, POST /v1/completions      (group `inference`)
    POST /tokenize, /detokenize                          (group `inference`; vLLM's, answered by the chat model)
    POST /v1/messages, /v1/messages/count_tokens         (group `inference`; Anthropic's, see clients/anthropic.py)
    POST /v1/responses                                    (group `inference`; OpenAI Responses, see clients/responses.py)
    POST /v1/embeddings                                   (group `inference`; OpenAI embeddings, never streamed)
    GET  /v1/models, GET /v1/models/{id}                  (group `models`)
    GET  /health (= /health/ready), /health/live          (group `health`)

Stateless: each body goes to the Triton model unchanged and each response payload comes back
unchanged, as OpenAI's server-sent events (`data: {...}` and `data: [DONE]`) when streaming.
Errors keep their OpenAI body and get their HTTP status (from the error itself, so also on
Triton releases whose generate endpoints answer 400 for everything). A client that
disconnects closes the Triton request, which cancels it. `/health/ready` answers 200 when
Triton says the chat model is ready, `/health/live` when the gateway process is up.

`--api-key KEY` (or $TRITONCHAT_API_KEY) requires `Authorization: Bearer KEY` (or `x-api-key: KEY`,
as the `anthropic` SDK sends it) on every `/v1/` route; `--api-key-for GROUP=KEY` (repeatable, or
$TRITONCHAT_API_KEY_INFERENCE, _MODELS, _HEALTH) gives a group a key of its own. `health` is
open unless it has its own key (see `tritonchat.clients.access`). A body over `--max-body-bytes`
(default: the chat model's `max_request_bytes` default) is refused with 413 before anything
reaches Triton.

The gateway reaches Triton over HTTP `generate_stream` by default; `--protocol grpc` uses a
gRPC stream instead (note that cancelling gRPC streams can crash Triton 2.51 under load; see
docs/design.md, "Disconnects"). Needs the `gateway` extra (FastAPI, uvicorn, openai); without
it the command says so in one line and exits with status 1.
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations, which
# name classes imported inside `create_app` (so that the module loads without the extra).

import argparse
import json
import logging
import os
import sys
import time
from contextlib import asynccontextmanager

from . import CHAT_MODEL, COMPLETIONS_MODEL
from .anthropic import MESSAGES_MODEL
from .responses import RESPONSES_MODEL
from .access import GROUPS, BodyCap, Keys, error_object, resolve_keys
from .extras import require

log = logging.getLogger("tritonchat.gateway")

# The default of the chat model's `max_request_bytes` (tritonchat.settings, which the clients may
# not import; a unit test checks that the two agree).
MAX_BODY_BYTES = 16 * 1024 * 1024
EMBEDDINGS_MODEL = "openai_embeddings"
PROTOCOLS = ("grpc", "http")  # the keys of tritonchat.clients.wires.ASYNC_WIRES
KEY_ENV = "TRITONCHAT_API_KEY"  # the single key; a group's own: TRITONCHAT_API_KEY_<GROUP>


def marked(text: str, endpoint: str) -> str:
    """A JSON object body marked with `"endpoint": endpoint` (anything else goes as it is: the model
    answers the 400)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return json.dumps({**value, "endpoint": endpoint}, ensure_ascii=False) if isinstance(value, dict) else text


def _wants_stream(body: bytes) -> bool:
    try:
        value = json.loads(body)
    except ValueError:
        return False  # the model answers the 400
    return isinstance(value, dict) and value.get("stream") is True


def create_app(http_url: str = "localhost:8000", *, protocol: str = "http", grpc_url: str = "localhost:8001",
               chat_model: str = CHAT_MODEL, completions_model: str = COMPLETIONS_MODEL,
               messages_model: str = MESSAGES_MODEL, responses_model: str = RESPONSES_MODEL,
               embeddings_model: str = EMBEDDINGS_MODEL, api_key: str | None = None, api_keys: dict[str, str] | None = None,
               max_body_bytes: int = MAX_BODY_BYTES, timeout: float = 600.0,
               served_model_names: list[str] | None = None, wire=None, transport=None):
    """The gateway app. `/v1/models` lists `served_model_names`, else the `served_model_name`
    parameter of the chat models' configs (set by `python -m tritonchat.repository
    --served-model-name`; a model whose name comes from its `model.json` is not listed).
    `api_key`: the single key of the `/v1/` groups; `api_keys`: group -> a key of its own.
    `wire` (an `AsyncWire`) and `transport` (for Triton's HTTP endpoint) replace the network,
    for tests."""
    import openai  # noqa: PLC0415  (the `gateway` extra)
    from fastapi import FastAPI, Request  # noqa: PLC0415
    from fastapi.responses import JSONResponse, Response, StreamingResponse  # noqa: PLC0415

    from . import anthropic, responses  # noqa: PLC0415
    from .wires import http_base, httpx  # noqa: PLC0415
    from .wires import wire as make_wire  # noqa: PLC0415

    keys = resolve_keys(api_key, api_keys)
    own_wire = wire is None
    if own_wire:
        wire = make_wire(protocol, http_url if protocol == "http" else grpc_url, None, timeout, asynchronous=True)
    triton = httpx.AsyncClient(base_url=http_base(http_url), timeout=10.0, transport=transport)

    @asynccontextmanager
    async def lifespan(_app):
        yield
        if own_wire:
            await wire.close()
        await triton.aclose()

    app = FastAPI(title="tritonchat gateway", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.add_middleware(BodyCap, limit=max_body_bytes)
    app.add_middleware(Keys, keys=keys)  # the outer one: a caller without the key is not read
    created = int(time.time())

    def error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
              param: str | None = None) -> JSONResponse:
        return JSONResponse(error_object(message, kind, code, param), status_code=status)

    def failure(exc: Exception) -> tuple[int, dict]:
        """The status and OpenAI error object of a failed request to Triton."""
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code, {"error": exc.body}
        return 503, error_object(f"Triton cannot be reached: {exc or type(exc).__name__}", "server_error",
                                 "service_unavailable")

    failures = (openai.APIStatusError, httpx.TransportError)

    async def forward(model: str, request: Request, endpoint: str | None = None, whole: bool = False) -> Response:
        body = await request.body()
        text = body.decode("utf-8", errors="replace")
        if endpoint is not None:  # answered by the model without generating (protocol/tokenize.py)
            text = marked(text, endpoint)
        if endpoint is not None or whole or not _wants_stream(body):
            payloads = wire.payloads(model, text, False)
            try:
                payload = await payloads.__anext__()
            except failures as exc:
                status, content = failure(exc)
                return JSONResponse(content, status_code=status)
            finally:
                await payloads.aclose()
            return Response(payload, media_type="application/json")

        payloads = wire.payloads(model, text, True)
        try:
            first = await payloads.__anext__()
        except failures as exc:  # refused before any chunk: a plain error response
            await payloads.aclose()
            status, content = failure(exc)
            return JSONResponse(content, status_code=status)
        except StopAsyncIteration:
            first = None

        async def events():
            try:
                if first is not None:
                    yield f"data: {first}\n\n"
                    async for payload in payloads:
                        yield f"data: {payload}\n\n"
            except failures as exc:
                yield f"data: {json.dumps(failure(exc)[1], ensure_ascii=False)}\n\n"
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

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        return await forward(chat_model, request, "tokenize")

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        return await forward(chat_model, request, "detokenize")

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body = await request.body()
        return await anthropic.forward(wire, messages_model, body.decode("utf-8", errors="replace"),
                                       _wants_stream(body))

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        return await anthropic.forward(wire, messages_model, anthropic.counting_body(await request.body()), False)

    @app.post("/v1/responses")
    async def create_response(request: Request) -> Response:
        body = await request.body()
        return await responses.forward(wire, responses_model, body.decode("utf-8", errors="replace"),
                                       _wants_stream(body))

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        return await forward(embeddings_model, request, whole=True)

    async def served() -> list[str]:
        """The served model names (raises httpx.HTTPError when Triton cannot be reached)."""
        names: list[str] = []
        for model in dict.fromkeys((chat_model, completions_model, messages_model, responses_model,
                                    embeddings_model)):
            response = await triton.get(f"/v2/models/{model}/config")
            if response.status_code != 200:
                continue
            parameters = response.json().get("parameters", {})
            name = parameters.get("served_model_name", {}).get("string_value")
            for served_name in served_model_names or ([name] if name else []):
                if served_name not in names:
                    names.append(served_name)
        return names

    def model_object(name: str) -> dict:
        return {"id": name, "object": "model", "created": created, "owned_by": "tritonchat"}

    def unreachable(exc: Exception) -> JSONResponse:
        return error(503, f"Triton cannot be reached: {exc}", "server_error", "service_unavailable")

    @app.get("/v1/models")
    async def models() -> Response:
        try:
            names = await served()
        except httpx.HTTPError as exc:
            return unreachable(exc)
        return JSONResponse({"object": "list", "data": [model_object(name) for name in names]})

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> Response:
        try:
            names = await served()
        except httpx.HTTPError as exc:
            return unreachable(exc)
        if model_id not in names:
            return error(404, f"The model '{model_id}' does not exist.", code="model_not_found", param="model")
        return JSONResponse(model_object(model_id))

    async def ready() -> Response:
        try:
            response = await triton.get(f"/v2/models/{chat_model}/ready")
        except httpx.HTTPError:
            return Response(status_code=503)
        return Response(status_code=200 if response.status_code == 200 else 503)

    app.add_api_route("/health", ready, methods=["GET"])
    app.add_api_route("/health/ready", ready, methods=["GET"])

    @app.get("/health/live")
    async def live() -> Response:
        return Response(status_code=200)

    return app


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tritonchat.clients.gateway",
                                     description="OpenAI-compatible HTTP gateway to Triton's openai_chat")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--http-url", default="localhost:8000", help="Triton's HTTP endpoint")
    parser.add_argument("--grpc-url", default="localhost:8001", help="Triton's gRPC endpoint (--protocol grpc)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="http")
    parser.add_argument("--chat-model", default=CHAT_MODEL)
    parser.add_argument("--completions-model", default=COMPLETIONS_MODEL)
    parser.add_argument("--messages-model", default=MESSAGES_MODEL, help="the Anthropic Messages model")
    parser.add_argument("--responses-model", default=RESPONSES_MODEL, help="the OpenAI Responses model")
    parser.add_argument("--embeddings-model", default=EMBEDDINGS_MODEL, help="the OpenAI embeddings model")
    parser.add_argument("--served-model-name", action="append", dest="served_model_names",
                        help="a name for /v1/models (repeatable; default: the chat models' served_model_name)")
    parser.add_argument("--api-key", default=os.environ.get(KEY_ENV),
                        help=f"require `Authorization: Bearer KEY` on the /v1/ routes (default: ${KEY_ENV}; "
                             "none: open)")
    parser.add_argument("--api-key-for", action="append", default=[], metavar="GROUP=KEY",
                        help=f"a key of its own for one group ({', '.join(GROUPS)}; repeatable; default: "
                             f"${KEY_ENV}_<GROUP>); the environment keeps keys out of process lists")
    parser.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES,
                        help="the largest request body; a larger one gets 413 (default: %(default)s, the chat "
                             "model's max_request_bytes default)")
    return parser


def group_keys(entries: list[str], environ=os.environ) -> dict[str, str]:
    """The groups' own keys: $TRITONCHAT_API_KEY_<GROUP>, then `GROUP=KEY` entries over them.
    Raises ValueError with a message that never holds a key."""
    keys = {group: environ[f"{KEY_ENV}_{group.upper()}"] for group in GROUPS
            if environ.get(f"{KEY_ENV}_{group.upper()}")}
    for entry in entries:
        group, equals, key = entry.partition("=")
        if not equals:
            raise ValueError("--api-key-for takes GROUP=KEY")
        if group not in GROUPS:
            raise ValueError(f"--api-key-for: unknown group {group!r} (groups: {', '.join(GROUPS)})")
        if key:
            keys[group] = key
    return keys


def main(argv: list[str] | None = None) -> None:
    options = parser()
    args = options.parse_args(argv)
    try:
        own_keys = group_keys(args.api_key_for)
    except ValueError as exc:
        options.error(str(exc))
    if args.max_body_bytes <= 0:
        options.error("--max-body-bytes must be positive")
    require("gateway", "tritonchat gateway")
    if args.protocol == "grpc":
        require("grpc", "tritonchat gateway --protocol grpc")
    import uvicorn  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    app = create_app(args.http_url, protocol=args.protocol, grpc_url=args.grpc_url, chat_model=args.chat_model,
                     completions_model=args.completions_model, messages_model=args.messages_model,
                     responses_model=args.responses_model, embeddings_model=args.embeddings_model,
                     api_key=args.api_key, api_keys=own_keys,
                     max_body_bytes=args.max_body_bytes, served_model_names=args.served_model_names)
    guarded = resolve_keys(args.api_key, own_keys)
    log.info("API keys required for: %s", ", ".join(guarded) or "no group (open)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    sys.exit(main())
