"""What a process must do before it runs a vLLM engine inside a Python-backend stub.

The stub embeds an interpreter that differs from `python` in a few ways vLLM trips over; these
run before vLLM or torch is imported (`prepare_process`), and `freeze_gc` keeps the large
torch/vLLM object graph out of the garbage collector's passes. Nothing here imports vLLM.
"""

from __future__ import annotations

import gc
import locale
import multiprocessing
import os
import shutil
import sys


def use_utf8_locale() -> None:
    """Switch the process locale to UTF-8.

    The stub's interpreter starts with the ASCII "C" locale and ignores PYTHONUTF8, so `open()`
    defaults to ASCII and torch/vLLM/transformers fail on UTF-8 files (`UnicodeDecodeError:
    'ascii' codec`). Setting the C locale makes the preferred encoding UTF-8. This must run
    before vLLM or torch is imported.
    """
    for name in ("C.UTF-8", "C.utf8", "en_US.UTF-8"):
        try:
            locale.setlocale(locale.LC_ALL, name)
            return
        except locale.Error:
            continue


def python_executable() -> str | None:
    """A real Python interpreter for `multiprocessing` to spawn.

    In the stub `sys.executable` is resolved from the `python3` first on PATH (the venv's); if an
    embedding ever reports the stub binary or nothing instead, spawning would run the wrong
    program, so fall back to the interpreter of this prefix.
    """
    candidates = [
        sys.executable,
        os.path.join(sys.exec_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}"),
        os.path.join(sys.exec_prefix, "bin", "python3"),
        shutil.which("python3"),
    ]
    for path in candidates:
        if path and os.path.basename(path).startswith("python") and os.access(path, os.X_OK):
            return path
    return None


def prepare_engine_subprocesses() -> None:
    """Make vLLM's engine-core and worker subprocesses start correctly from a stub.

    - Start method: vLLM's default is `fork` (its CPU platform switches to `spawn` on its own).
      Forking the stub would copy a multi-threaded process that holds shared-memory IPC with
      tritonserver, so always use `spawn`.
    - Executable: `spawn` runs `sys.executable`; make sure it is a Python interpreter.
    - Main module: the stub's `__main__` is a built-in module without `__file__`, so a spawned
      child has no main script to re-import; no `if __name__ == "__main__"` guard is needed
      (unlike a script that starts the engine at import time).
    - argv: the stub sets `sys.argv == ['']`; spawn copies it to the children. Keep it a list.
    - Children are ordinary interpreters, so PYTHONUTF8 works for them.
    """
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    os.environ.setdefault("PYTHONUTF8", "1")
    executable = python_executable()
    if executable:
        if executable != sys.executable:
            sys.executable = executable
        multiprocessing.set_executable(executable)
    if not isinstance(getattr(sys, "argv", None), list) or not sys.argv:
        sys.argv = [""]


def prepare_process() -> None:
    """Both of the above: call before vLLM (or torch) is imported in a stub."""
    use_utf8_locale()
    prepare_engine_subprocesses()


def freeze_gc() -> None:
    """Collect, then move every surviving object out of the garbage collector's view.

    After an engine has started (as vLLM's own API server does), so later GC passes do not walk
    the startup heap; and right before a stub exits, so the interpreter's teardown does not run
    full passes over the torch/vLLM object graph (about 3 s of every unload here). Side effect:
    nanobind may print "leaked instances" notes for objects that are then never collected.
    """
    gc.collect()
    gc.freeze()
