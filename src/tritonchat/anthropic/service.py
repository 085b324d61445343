"""Anthropic's Messages API on the chat pipeline (`anthropic_messages`).

A Messages request is parsed and checked as Anthropic's (protocol/anthropic.py), translated
into the chat request that plans it (translate.py), and from there it is a chat request: this
server's policy, the model's chat template, the budget, tool_choice and the parsers, the target's
request format. Only the answer differs: `MessageBuilder` (events.py). Errors take Anthropic's
shape (`public_error`); a `count_tokens` request is answered once its prompt is rendered.
"""

from __future__ import annotations

import json
from dataclasses import replace

from ..errors import BadRequestError, OpenAIError
from ..formats import VllmFormat
from ..protocol.anthropic import anthropic_error, parse_messages_request
from ..service import ChatService, Reading, Staged
from ..template import Prompt
from .events import MessageBuilder
from .translate import MessagesChatRequest, chat_request


class AnthropicService(ChatService):
    """Anthropic Messages (`anthropic_messages`): `POST /v1/messages` and `count_tokens`."""

    id_prefix = "msg_"
    answers_tokenize = False  # vLLM's /tokenize belongs to the OpenAI models
    builder_class = MessageBuilder

    def parse(self, body: str | bytes) -> MessagesChatRequest:
        return chat_request(parse_messages_request(body))

    def stage(self, body: str | bytes, request_id: str = "") -> Staged:
        staged = super().stage(body, request_id)
        if staged.request.counting:
            return replace(staged, answer=json.dumps({"input_tokens": staged.prompt.num_tokens}))
        return staged

    def check_policy(self, request: MessagesChatRequest):
        """Anthropic's wording for what this server's configuration refuses, then the chat checks."""
        if request.thinking in ("enabled", "adaptive") and not self.settings.reasoning_parser and not request.counting:
            raise BadRequestError("thinking: this server does not separate the model's reasoning ('reasoning_parser' "
                                  "is not set); leave 'thinking' out or disable it.")
        if request.effective_tool_choice == "auto" and not self.settings.tool_call_parser:
            raise BadRequestError("tool_choice: this server does not parse tool calls ('tool_call_parser' is not set); "
                                  "use tool_choice 'any', 'tool' or 'none'.")
        return super().check_policy(request)

    def reading(self, request: MessagesChatRequest, prompt: Prompt) -> Reading:
        """The chat reading (tool_choice's constraint and parsers), and the stop sequences to find."""
        chat = super().reading(request, prompt)
        sampling = dict(chat.sampling or {})
        # Which stop sequence ended the answer: the vLLM backend does not say, so the engine keeps
        # it in the text and the builder finds it there (other formats cut stop strings themselves).
        stops = tuple(request.stop or ()) if isinstance(self.format, VllmFormat) else ()
        if stops:
            sampling["include_stop_str_in_output"] = True
        args = {"choice_text": chat.builder_args["choice_text"], "stop_sequences": stops}
        return Reading(args, chat.structured, sampling or None)

    def public_error(self, error: OpenAIError) -> OpenAIError:
        return anthropic_error(error)
