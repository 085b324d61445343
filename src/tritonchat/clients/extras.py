"""What the command and the gateway say when an optional extra is not installed: one line naming
the extra, and exit status 1 (instead of an ImportError traceback)."""

from __future__ import annotations

import importlib
import sys

# The modules each extra of pyproject.toml brings, as the clients import them.
EXTRAS: dict[str, tuple[str, ...]] = {
    "client": ("openai",),
    "gateway": ("openai", "fastapi", "uvicorn"),
    "grpc": ("tritonclient.grpc",),
}


def missing(extra: str) -> str | None:
    """The first module of `extra` that cannot be imported, or None when all can."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            return module
    return None


def require(extra: str, who: str) -> None:
    """Exit with status 1 and one line on stderr when `extra` is not installed."""
    module = missing(extra)
    if module is not None:
        print(f"{who}: needs the {extra} extra ({module} is not installed): pip install 'tritonchat[{extra}]'",
              file=sys.stderr)
        raise SystemExit(1)
