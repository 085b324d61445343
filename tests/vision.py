"""Vision-model test material: processor-style chat templates, a tokenizer directory that looks
like a vision model's, and small image files."""

from __future__ import annotations

import base64
import contextlib
import http.server
import io
import json
import threading
import time
from pathlib import Path

from harness.repositories import tokenizer_with_template
from harness.server import free_port

# Where test_images.py serves images over HTTP; the vision chat model's allow-list names it.
IMAGE_SERVER_PORT = free_port()
IMAGE_URL_PREFIX = f"http://127.0.0.1:{IMAGE_SERVER_PORT}/images/"

# LLaVA's shape: each content part in order, `<image>` for an image part (also `image_url`, which
# some processor templates accept), the roles in capitals.
LLAVA_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].upper() + ': ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' %}{{ '<image>\\n' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

# Qwen2-VL's shape: ChatML, each image as `<|vision_start|><|image_pad|><|vision_end|>`.
QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def vision_tokenizer(base: Path, out: Path, template: str = LLAVA_TEMPLATE) -> Path:
    """`base`'s tokenizer with `template`, and a config.json with a vision part (as LLaVA's has)."""
    tokenizer_with_template(base, out, template)
    config = json.loads((out / "config.json").read_text())
    config["vision_config"] = {"model_type": "clip_vision_model", "image_size": 336, "patch_size": 14}
    config["image_token_index"] = 32000
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def image_bytes(kind: str = "PNG", size: tuple[int, int] = (4, 3), color=(200, 30, 30)) -> bytes:
    from PIL import Image  # noqa: PLC0415

    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format=kind)
    return buffer.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_part(url: str, **fields) -> dict:
    return {"type": "image_url", "image_url": {"url": url, **fields}}


class _ImageHandler(http.server.BaseHTTPRequestHandler):
    """Serves test images: `....png` a small PNG, `....jpg` a 7x9 JPEG, anything else an HTML
    page; `/slow/` answers after 2 s, `/missing/` is a 404, `/redirect/` a 302 to the
    `X-Target` header's URL (or a host outside every allow-list)."""

    def do_GET(self):  # noqa: N802
        if "/slow/" in self.path:
            time.sleep(2)
        if "/redirect/" in self.path:
            self.send_response(302)
            self.send_header("Location", self.headers["X-Target"] or "http://elsewhere.invalid/a.png")
            self.end_headers()
            return
        if "/missing/" in self.path:
            self.send_error(404)
            return
        if self.path.endswith(".png"):
            body, kind = image_bytes("PNG"), "image/png"
        elif self.path.endswith(".jpg"):
            body, kind = image_bytes("JPEG", (7, 9)), "image/jpeg"
        else:
            body, kind = b"<html>not an image</html>", "image/png"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve_images(port: int = 0):
    """An image server on 127.0.0.1 (`port`, or a free one) for the life of the block; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _ImageHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
