"""vLLM's `/tokenize` and `/detokenize`, answered by the chat and completions models from their
tokenizer (protocol/tokenize.py has the requests). A chat request is rendered with the model's
template exactly as a generation of it would be, so its tokens are what the engine would see."""

from __future__ import annotations

import json

from .errors import BadRequestError
from .protocol import parse_chat_request
from .protocol.tokenize import CHAT_FIELDS, TokenizeChat, parse_detokenize, parse_tokenize
from .template import private_names


def tokenize_answer(service, endpoint: str, data: dict) -> str:
    """The JSON answer (vLLM's `TokenizeResponse` / `DetokenizeResponse`) of one request."""
    tokenizer = service.renderer.tokenizer
    if endpoint == "detokenize":
        request = parse_detokenize(data)
        service.names.resolve(request.model)
        vocab = service.limits.vocab_size
        if vocab and any(token >= vocab for token in request.tokens):
            raise BadRequestError(f"'tokens' holds ids outside this model's vocabulary (0 to {vocab - 1}).",
                                  param="tokens")
        return json.dumps({"prompt": tokenizer.decode(request.tokens)}, ensure_ascii=False)
    request = parse_tokenize(data)
    service.names.resolve(request.model)
    if isinstance(request, TokenizeChat):
        chat = parse_chat_request(json.dumps({key: data[key] for key in CHAT_FIELDS if key in data}))
        if chat.chat_template is not None:
            if not service.settings.trust_request_chat_template:
                raise BadRequestError("A per-request 'chat_template' is not allowed by this server (see its "
                                      "'trust_request_chat_template').", param="chat_template")
            if reached := private_names(chat.chat_template):
                raise BadRequestError(f"The chat template reaches for {reached[0]!r}; templates may not use names "
                                      "starting with '_'.", param="chat_template")
        prompt = service.renderer.render(chat)
        ids = list(prompt.token_ids)
    else:
        ids = tokenizer(request.prompt, add_special_tokens=request.add_special_tokens).input_ids
    strs = tokenizer.convert_ids_to_tokens(ids) if request.return_token_strs else None
    return json.dumps({"count": len(ids), "max_model_len": service.limits.context_length, "tokens": ids,
                       "token_strs": strs}, ensure_ascii=False)
