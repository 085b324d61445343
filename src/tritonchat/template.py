"""Render OpenAI messages into the served model's own prompt with its Hugging Face chat template."""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.nodes

from .errors import BadRequestError
from .protocol import ChatCompletionRequest, ImagePart, TextPart

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prompt:
    text: str  # exactly what the generation model receives
    num_tokens: int  # what the generation model will count for it
    token_ids: tuple[int, ...] | None = None  # those tokens (for formats that send ids)


def load_tokenizer(path: str):
    """The tokenizer `AutoTokenizer` makes of the directory. Which class that is, is remembered
    per directory (its files' sizes and times, the transformers release) in a small file beside
    other processes' (`TRITONCHAT_CACHE_DIR`, default the temporary directory): importing
    `AutoTokenizer` costs about 3 s of CPU (it pulls in torch), and every instance of every chat
    model loads a tokenizer, mostly the same one."""
    import transformers  # noqa: PLC0415  (heavy import, only at model load)

    key = _tokenizer_key(path, transformers.__version__)
    known = _tokenizer_classes().get(key) if key else None
    tokenizer_class = getattr(transformers, known, None) if known else None
    if tokenizer_class is not None:
        return tokenizer_class.from_pretrained(path, trust_remote_code=False)
    from transformers import AutoTokenizer  # noqa: PLC0415

    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    name = type(tokenizer).__name__
    if key and getattr(transformers, name, None) is type(tokenizer):  # only classes of transformers itself
        _remember_tokenizer_class(key, name)
    return tokenizer


def _tokenizer_cache() -> Path:
    return Path(os.environ.get("TRITONCHAT_CACHE_DIR") or tempfile.gettempdir()) / "tritonchat-tokenizer-classes.json"


def _tokenizer_key(path: str, version: str) -> str | None:
    """What decides the class: the directory and the state of the files AutoTokenizer reads."""
    directory = Path(path)
    if not directory.is_dir():
        return None
    stamps = []
    for name in ("tokenizer_config.json", "config.json", "tokenizer.json"):
        try:
            stat = (directory / name).stat()
        except OSError:
            continue
        stamps.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return f"{directory.resolve()}|{version}|{','.join(stamps)}"


def _tokenizer_classes() -> dict:
    try:
        value = json.loads(_tokenizer_cache().read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _remember_tokenizer_class(key: str, name: str) -> None:
    """Adds one entry (written whole and renamed into place: processes may do it at once)."""
    cache = _tokenizer_cache()
    classes = {**_tokenizer_classes(), key: name}
    try:
        with tempfile.NamedTemporaryFile("w", dir=cache.parent, prefix=cache.name, delete=False) as out:
            json.dump(classes, out)
        os.replace(out.name, cache)
    except OSError:
        log.debug("could not write %s", cache, exc_info=True)


@functools.lru_cache(maxsize=64)
def template_iterates_content(template: str) -> bool:
    """True when the chat template loops over `message.content` (OpenAI-style content parts).

    Such templates need `content` as a list of parts; the others need a plain string.
    """
    try:
        ast = jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError:
        return False
    def reads_content(node) -> bool:
        for n in (node, *node.find_all((jinja2.nodes.Getattr, jinja2.nodes.Getitem))):
            if isinstance(n, jinja2.nodes.Getattr) and n.attr == "content":
                return True
            if isinstance(n, jinja2.nodes.Getitem) and getattr(n.arg, "value", None) == "content":
                return True
        return False

    # `{% set content = message['content'] %}` makes `content` an alias worth following.
    aliases = {
        assign.target.name
        for assign in ast.find_all(jinja2.nodes.Assign)
        if isinstance(assign.target, jinja2.nodes.Name) and reads_content(assign.node)
    }
    for loop in ast.find_all(jinja2.nodes.For):
        if reads_content(loop.iter):
            return True
        if any(name.name in aliases for name in (loop.iter, *loop.iter.find_all(jinja2.nodes.Name)) if isinstance(name, jinja2.nodes.Name)):
            return True
    return False


def private_names(template: str) -> list[str]:
    """Attributes and keys starting with "_" that a template reaches for (`__class__`,
    `__globals__`, ...): the way out of a sandbox. Jinja's sandbox renders them as nothing; a
    request's own template that tries is refused instead."""
    try:
        ast = jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError:
        return []  # rendering reports it
    names = [node.attr for node in ast.find_all(jinja2.nodes.Getattr) if node.attr.startswith("_")]
    names += [node.arg.value for node in ast.find_all(jinja2.nodes.Getitem)
              if isinstance(node.arg, jinja2.nodes.Const) and str(node.arg.value).startswith("_")]
    return names


def _text(content: str | list[TextPart | ImagePart] | None) -> str:
    """Content for templates that take a string. No content (an assistant turn that only calls
    tools) is "", as vLLM renders it: such templates concatenate it."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if any(isinstance(part, ImagePart) for part in content):
        # vLLM would splice its own placeholder into the text; the placeholder belongs to the
        # model's processor, and a template that takes strings shows none, so refuse instead.
        raise BadRequestError(
            "This model's chat template takes message content as a string, so it has no place for images "
            "(a vision model's template iterates the content parts and writes its image placeholder for each "
            "image part); send text only, or use a vision model whose template does.",
            param="messages",
        )
    return "\n".join(part.text for part in content)


def _parts(content: str | list[TextPart | ImagePart] | None) -> list[dict]:
    """Content for templates that loop over OpenAI parts; no content is no parts. Images become
    `{"type": "image"}` in place, as vLLM hands them to processor templates (which write their
    image placeholder for such parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [{"type": "image"} if isinstance(part, ImagePart) else {"type": "text", "text": part.text}
            for part in content]


def _arguments(arguments: str) -> Any:
    """Tool-call arguments as an object, as chat templates expect (they `tojson` them)."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return arguments
    return value if isinstance(value, dict) else arguments


class PromptRenderer:
    """Turns a validated request into the prompt text the generation model gets."""

    def __init__(self, tokenizer, content_format: str = "auto"):
        self.tokenizer = tokenizer
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            raise ValueError("the tokenizer has no chat template")
        self.configured_content_format = content_format
        self.content_format = self._content_format(template)
        # When the template writes the BOS token and the generation model's tokenizer adds
        # it again while encoding the text, the engine would see two; drop the written one.
        bos = getattr(tokenizer, "bos_token", None)
        adds_bos = bool(bos) and tokenizer("").input_ids[:1] == [tokenizer.bos_token_id]
        self._strip_prefix = bos if adds_bos else None

    def _content_format(self, template: str) -> str:
        if self.configured_content_format != "auto":
            return self.configured_content_format
        return "openai" if template_iterates_content(template) else "string"

    def messages(self, request: ChatCompletionRequest) -> list[dict]:
        template = request.chat_template
        content_format = self._content_format(template) if template is not None else self.content_format
        content = _parts if content_format == "openai" else _text
        out = []
        for message in request.messages:
            item: dict[str, Any] = {"role": message.role, "content": content(message.content)}
            if getattr(message, "name", None):
                item["name"] = message.name
            if message.role == "assistant":
                if message.tool_calls:
                    item["tool_calls"] = [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.function.name, "arguments": _arguments(call.function.arguments)},
                        }
                        for call in message.tool_calls
                    ]
                reasoning = message.reasoning_content or message.reasoning
                if reasoning is not None:
                    # Qwen3's and DeepSeek's templates read reasoning_content, gpt-oss's thinking.
                    item["reasoning_content"] = item["thinking"] = reasoning
            elif message.role == "tool":
                item["tool_call_id"] = message.tool_call_id
            out.append(item)
        return out

    def render(self, request: ChatCompletionRequest) -> Prompt:
        continue_final = bool(request.continue_final_message)
        add_generation_prompt = request.add_generation_prompt
        if add_generation_prompt is None:
            add_generation_prompt = not continue_final
        kwargs = {}
        # As vLLM does: templates that read them (reasoning models, RAG templates) use them.
        if request.reasoning_effort is not None:
            kwargs["reasoning_effort"] = request.reasoning_effort
        if request.documents is not None:
            kwargs["documents"] = request.documents
        kwargs.update(request.chat_template_kwargs or {})
        tools = [tool.model_dump(exclude_none=True, by_alias=True) for tool in request.tools] if request.tools else None
        if request.chat_template is not None:
            kwargs["chat_template"] = request.chat_template
        messages = self.messages(request)
        try:
            text = self.tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final,
                tokenize=False,
                **kwargs,
            )
        except Exception as exc:  # noqa: BLE001  (whatever the template does with this request)
            # The template refused the conversation (`raise_exception`), cannot render what the
            # request holds (a role, tool calls or parts it does not handle), or a request's own
            # template is broken: the request's doing, so a 400 saying what failed.
            param = "chat_template" if request.chat_template is not None else "messages"
            reason = str(exc) if isinstance(exc, jinja2.TemplateError) else f"{type(exc).__name__}: {exc}"
            raise BadRequestError(
                f"The chat template failed: {reason}. This model's template may not support this conversation "
                f"(for example its roles, tool calls or content parts).",
                param=param,
            ) from None
        if self._strip_prefix and text.startswith(self._strip_prefix):
            text = text[len(self._strip_prefix) :]
        return self.plain(text)

    def plain(self, text: str) -> Prompt:
        """A prompt sent as it is (completions); counted as the engine tokenizes it."""
        ids = tuple(self.tokenizer(text).input_ids)
        return Prompt(text=text, num_tokens=len(ids), token_ids=ids)
