"""Images in chat requests: `image_url` content parts of user messages, read into image files.

A part's URL is either a `data:` URL (`data:image/png;base64,...`; PNG, JPEG, GIF or WebP),
decoded here, or an `http(s)` URL under one of the configured prefixes (`image_url_allowlist`),
fetched here within `image_fetch_timeout_s` and `max_image_bytes`. Every image is checked to be
one with Pillow (`Image.verify()`), so that a bad one is a 400 naming `messages` rather than a
failure inside the generation model. The files go to the generation model as they are (Triton's
vLLM backend takes the base64 of each file in its `image` input and decodes it with Pillow).

Pillow is imported only when a request carries an image: the vLLM containers have it (vLLM needs
it), and the TensorRT-LLM formats refuse images before any are read.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .errors import BadRequestError
from .protocol import ChatCompletionRequest, ImagePart

# MIME types a data URL may declare, and the Pillow formats an image file may have.
DATA_URL_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/jpg": "JPEG", "image/gif": "GIF",
                  "image/webp": "WEBP"}
FORMATS = frozenset(DATA_URL_TYPES.values())
# config.json keys of vision-language models (LLaVA, Qwen2-VL, Gemma 3, Mistral 3, Llama 4, ...).
VISION_KEYS = ("vision_config", "vision_tower", "mm_vision_tower", "visual", "image_token_index", "image_token_id",
               "vision_encoder")
_DATA_URL = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(;[^;,]*)*),(?P<data>.*)", re.DOTALL)
_WHITESPACE = re.compile(rb"\s+")


@dataclass(frozen=True)
class ImageFile:
    """One image as the generation model gets it: the file's bytes, and what Pillow read."""

    data: bytes
    format: str  # Pillow's format name: PNG, JPEG, GIF, WEBP
    width: int
    height: int

    def base64(self) -> bytes:
        return base64.b64encode(self.data)


@dataclass(frozen=True)
class ImagePolicy:
    """The server's limits on images (settings `max_images`, `max_image_bytes`, `image_url_allowlist`,
    `image_fetch_timeout_s`)."""

    max_images: int = 8
    max_bytes: int = 20 * 1024 * 1024
    allowlist: tuple[str, ...] = ()
    fetch_timeout_s: float = 10.0

    def allows(self, url: str) -> bool:
        """Whether `url` lies under an allowed prefix (a prefix ending inside a host name or a path
        segment matches only at its end: `https://a.example` does not allow `https://a.example.org/`)."""
        lowered = url.lower()
        for prefix in self.allowlist:
            if not lowered.startswith(prefix.lower()):
                continue
            rest = url[len(prefix):]
            if prefix.endswith(("/", "?", "=", "&")) or not rest or rest[0] in "/?#":
                return True
        return False


def image_parts(request: ChatCompletionRequest) -> list[tuple[str, ImagePart]]:
    """The request's image parts in prompt order, each with where it is (`messages[i].content[j]`)."""
    found = []
    for i, message in enumerate(request.messages):
        if isinstance(message.content, list):
            found += [(f"messages[{i}].content[{j}]", part) for j, part in enumerate(message.content)
                      if isinstance(part, ImagePart)]
    return found


def count_images(request) -> int:
    return len(image_parts(request)) if isinstance(request, ChatCompletionRequest) else 0


def model_has_vision(model_dir: str | Path) -> bool | None:
    """Whether the model's config.json describes a vision part; None without a readable config.json."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    return any(config.get(key) is not None for key in VISION_KEYS)


def load_images(request: ChatCompletionRequest, policy: ImagePolicy) -> list[ImageFile]:
    """Every image of the request, decoded or fetched and checked, in prompt order; a 400 naming
    `messages` for the first that is refused."""
    return [load_image(url, policy, where) for where, url in image_urls(request, policy)]


def image_urls(request: ChatCompletionRequest, policy: ImagePolicy) -> list[tuple[str, str]]:
    """(where, url) of every image of the request, in prompt order, or a 400 naming `messages`
    when there are more than the policy allows."""
    parts = image_parts(request)
    if policy.max_images and len(parts) > policy.max_images:
        raise BadRequestError(
            f"'messages' holds {len(parts)} images; this server allows at most {policy.max_images} (max_images).",
            param="messages")
    return [(where, part.image_url.url) for where, part in parts]


def load_image(url: str, policy: ImagePolicy, where: str = "messages") -> ImageFile:
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        data = _decode_data_url(url, policy, where)
    elif scheme in ("http", "https"):
        data = _fetch(url, policy, where)
    else:
        raise _bad(where, "an image URL must be a data: URL (data:image/png;base64,...) or an http(s) URL, "
                          f"got {_short(url)}")
    return _check_image(data, where)


def _bad(where: str, reason: str) -> BadRequestError:
    return BadRequestError(f"Invalid image in {where}: {reason}.", param="messages")


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _too_large(size: int, policy: ImagePolicy, where: str, at_least: bool = False) -> BadRequestError:
    return _bad(where, f"the image has {'more than ' if at_least else ''}{size} bytes; this server takes at most "
                       f"{policy.max_bytes} (max_image_bytes)")


def _decode_data_url(url: str, policy: ImagePolicy, where: str) -> bytes:
    match = _DATA_URL.fullmatch(url)
    if match is None:
        raise _bad(where, "a data: URL must look like data:image/png;base64,<data>")
    mime = match["type"].strip().lower()
    if mime not in DATA_URL_TYPES:
        raise _bad(where, f"images must be PNG, JPEG, GIF or WebP (image/png, image/jpeg, image/gif, image/webp); "
                          f"the data: URL says {mime or 'nothing'!r}")
    if "base64" not in [p.strip().lower() for p in match["params"].split(";")]:
        raise _bad(where, "the data: URL must be base64-encoded (data:image/png;base64,<data>)")
    payload = _WHITESPACE.sub(b"", match["data"].encode("ascii", errors="replace"))
    if policy.max_bytes and len(payload) // 4 * 3 > policy.max_bytes + 2:
        raise _too_large(len(payload) // 4 * 3, policy, where, at_least=True)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(where, "the data: URL's data is not valid base64") from None
    if policy.max_bytes and len(data) > policy.max_bytes:
        raise _too_large(len(data), policy, where)
    if not data:
        raise _bad(where, "the data: URL holds no data")
    return data


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to another allowed URL."""

    def __init__(self, policy: ImagePolicy, where: str):
        self.policy, self.where = policy, where

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not self.policy.allows(newurl):
            raise _bad(self.where, f"the image URL redirects to {_short(newurl)}, which this server may not fetch "
                                   "(image_url_allowlist)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _fetch(url: str, policy: ImagePolicy, where: str) -> bytes:
    if not policy.allowlist:
        raise _bad(where, "this server does not fetch image URLs (its image_url_allowlist is empty); send the "
                          "image in a data: URL (data:image/png;base64,...)")
    if not policy.allows(url):
        raise _bad(where, f"this server may not fetch {_short(url)}: it is not under an allowed prefix "
                          "(image_url_allowlist)")
    timeout = policy.fetch_timeout_s or None
    deadline = time.monotonic() + timeout if timeout else None
    opener = urllib.request.build_opener(_CheckedRedirects(policy, where))
    request = urllib.request.Request(url, headers={"User-Agent": "tritonchat", "Accept": "image/*"})
    try:
        with opener.open(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            if policy.max_bytes and length and length.isdigit() and int(length) > policy.max_bytes:
                raise _too_large(int(length), policy, where)
            chunks, size = [], 0
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError
                chunk = response.read(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if policy.max_bytes and size > policy.max_bytes:
                    raise _too_large(size, policy, where, at_least=True)
    except BadRequestError:
        raise
    except urllib.error.HTTPError as exc:
        raise _bad(where, f"fetching the image failed: HTTP {exc.code} {exc.reason}") from None
    except TimeoutError:
        raise _bad(where, f"fetching the image took longer than {policy.fetch_timeout_s:g} s "
                          "(image_fetch_timeout_s)") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise _bad(where, f"fetching the image took longer than {policy.fetch_timeout_s:g} s "
                              "(image_fetch_timeout_s)") from None
        raise _bad(where, f"fetching the image failed: {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise _bad(where, f"fetching the image failed: {type(exc).__name__}: {exc}") from None
    data = b"".join(chunks)
    if not data:
        raise _bad(where, "the image URL returned no data")
    return data


def _check_image(data: bytes, where: str) -> ImageFile:
    """Pillow must recognize the file as a PNG, JPEG, GIF or WebP image and find it intact."""
    try:
        from PIL import Image  # noqa: PLC0415  (only for requests with images)
    except ImportError:
        raise BadRequestError("This server cannot read images: Pillow is not installed (pip install "
                              "'tritonchat[images]').", param="messages") from None
    try:
        with Image.open(io.BytesIO(data)) as image:
            kind, (width, height) = image.format, image.size
            image.verify()
    except Exception as exc:  # noqa: BLE001  (Pillow raises many kinds for broken files)
        reason = str(exc) or type(exc).__name__
        raise _bad(where, f"the data is not a readable image ({reason})") from None
    if kind not in FORMATS:
        raise _bad(where, f"images must be PNG, JPEG, GIF or WebP; this one is {kind}")
    return ImageFile(data=data, format=kind, width=width, height=height)
