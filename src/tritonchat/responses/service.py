"""OpenAI's Responses API on the chat pipeline (`openai_responses`).

A Responses request is parsed and checked as OpenAI's (protocol/responses.py), translated into
the chat request that plans it (translate.py), and from there it is a chat request: this
server's policy, the model's chat template, the budget, tool_choice and the parsers, the
target's request format. Only the answer differs: `ResponsesBuilder` (events.py). Errors keep
OpenAI's shape, with the chat pipeline's field names turned into the Responses request's
(`public_error`: `max_completion_tokens` is `max_output_tokens`, `messages` is `input`, ...).
"""

from __future__ import annotations

import copy
import re

from ..errors import OpenAIError
from ..protocol.responses import parse_responses_request
from ..service import ChatService, Reading
from ..template import Prompt
from .events import ResponsesBuilder
from .translate import ResponsesChatRequest, chat_request

# The chat request's names of the Responses request's fields.
RENAMED = {"max_completion_tokens": "max_output_tokens", "max_tokens": "max_output_tokens",
           "response_format": "text.format", "reasoning_effort": "reasoning.effort", "messages": "input"}
_QUOTED = re.compile(r"'(" + "|".join(RENAMED) + r")((?:\[\d+\]|\.[A-Za-z_]+)*)'")


def responses_error(error: OpenAIError) -> OpenAIError:
    """`error` with the Responses request's field names where the chat pipeline named its own
    (a path inside `messages` becomes `input`: messages and input items do not match one to one)."""
    def renamed(name: str, rest: str) -> str:
        return RENAMED[name] + ("" if name == "messages" else rest)

    param = error.param
    match = re.fullmatch(r"([A-Za-z_]+)((?:\[\d+\]|\.[A-Za-z_]+)*)", param or "")
    if match and match.group(1) in RENAMED:
        param = renamed(match.group(1), match.group(2))
    message = _QUOTED.sub(lambda m: f"'{renamed(m.group(1), m.group(2))}'", error.message)
    if (param, message) == (error.param, error.message):
        return error
    shaped = copy.copy(error)
    shaped.param, shaped.message, shaped.args = param, message, (message,)
    return shaped


class ResponsesService(ChatService):
    """OpenAI Responses (`openai_responses`): `POST /v1/responses`."""

    answers_tokenize = False  # vLLM's /tokenize belongs to the chat and completions models

    id_prefix = "resp_"
    builder_class = ResponsesBuilder

    def parse(self, body: str | bytes) -> ResponsesChatRequest:
        return chat_request(*parse_responses_request(body))

    def reading(self, request: ResponsesChatRequest, prompt: Prompt) -> Reading:
        """The chat reading (tool_choice's constraint and parsers), and what the response echoes."""
        chat = super().reading(request, prompt)
        args = {"choice_text": chat.builder_args["choice_text"], "fields": request.response_fields,
                "include_reasoning": request.include_reasoning is not False, "count_tokens": self.count_tokens}
        return Reading(args, chat.structured, chat.sampling)

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` as the model's tokenizer makes them (for `reasoning_tokens`)."""
        return len(self.renderer.tokenizer(text, add_special_tokens=False).input_ids)

    def public_error(self, error: OpenAIError) -> OpenAIError:
        return responses_error(error)
