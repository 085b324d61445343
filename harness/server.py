"""Run the Triton server shipped in the `nvidia-pytriton` wheel on this machine.

The wheel carries a complete `tritonserver` (2.51, NGC 24.10) with the Python backend.
This module assembles a backend directory from it (plus the local `vllm` Python-based
backend), sets the environment the Python backend stub needs, and starts and stops
servers. Used by `tools/serve.py`, the tests and the benchmark.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
LOCAL_VLLM_BACKEND = ROOT / "harness" / "local_vllm_backend" / "model.py"


def pytriton_dir() -> Path:
    """Where the `nvidia-pytriton` wheel put its files (without importing its Python package)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("nvidia-pytriton is not installed: run `make setup`")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def server_binary() -> Path:
    return pytriton_dir() / "tritonserver" / "bin" / "tritonserver"


def make_backend_dir(dst: Path = BUILD / "backends") -> Path:
    """Create `dst/python` (Triton's Python backend) and `dst/vllm` (the local vLLM backend).

    `dst/vllm/model.py` is a symlink, so the backend directory follows edits to the source.
    """
    src = pytriton_dir() / "tritonserver"
    stub = src / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}"
    python_dir = dst / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for f in (
        src / "backends" / "python" / "libtriton_python.so",
        src / "backends" / "python" / "triton_python_backend_utils.py",
        stub / "triton_python_backend_stub",
    ):
        target = python_dir / f.name
        if not target.exists() or target.stat().st_size != f.stat().st_size:
            shutil.copy2(f, target)
    vllm_dir = dst / "vllm"
    vllm_dir.mkdir(parents=True, exist_ok=True)
    link = vllm_dir / "model.py"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(LOCAL_VLLM_BACKEND)
    return dst


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for `tritonserver` so its Python stubs run this interpreter's packages.

    The stub links `libpython3.x.so`; the venv's own LIBDIR must come first, otherwise the
    system libpython is picked and stdlib extension modules fail to load. The stub finds
    packages through the `python3` first on PATH.
    """
    env = dict(os.environ)
    libdir = sysconfig.get_config_var("LIBDIR")
    pytriton_libs = pytriton_dir().parent / "nvidia_pytriton.libs"
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (libdir, str(pytriton_libs), env.get("LD_LIBRARY_PATH", "")) if p
    )
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # vLLM's CPU build pins its worker's threads ("auto": core 0 of a 2-core machine, the other
    # left to the rest): fastest here, unless something else sits on that core; then set
    # VLLM_CPU_OMP_THREADS_BIND (`nobind`, or free cores) in the environment, which passes through.
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    if extra:
        env.update(extra)
    return env


def tcp_connections(pid: int, port: int) -> int:
    """Established TCP connections of process `pid` to local port `port` (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class TritonServer:
    """A running `tritonserver` process."""

    model_repository: Path
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    log_path: Path | None = None
    exit_timeout_s: int = 10
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    # Explicit model control: the server starts with no model, and `load` loads what is asked for.
    explicit: bool = False
    loaded: set[str] = field(default_factory=set)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def version(self) -> tuple[int, ...]:
        """The running server's release, e.g. (2, 51, 0)."""
        import json  # noqa: PLC0415

        with urllib.request.urlopen(f"http://{self.http_url}/v2", timeout=5) as r:
            return tuple(int(part) for part in json.loads(r.read())["version"].split(".")[:3])

    def command(self) -> list[str]:
        return [
            str(server_binary()),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={make_backend_dir()}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--exit-timeout-secs={self.exit_timeout_s}",
            *(["--model-control-mode=explicit"] if self.explicit else []),
            *self.extra_args,
        ]

    def start(self) -> TritonServer:
        out = open(self.log_path, "wb") if self.log_path else None  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command(),
            env=server_env(self.env),
            stdout=out or None,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
        )
        return self

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://{self.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {self.process.returncode}{self._log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"tritonserver not ready after {timeout:.0f}s{self._log_tail()}")

    def load(self, *names: str, timeout: float = 600.0) -> None:
        """Loads `names` and the models they call (their `target_model`, read from the
        repository), callees first, each once; models of one round load at the same time."""
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

        from harness.repositories import model_targets  # noqa: PLC0415

        rounds: list[list[str]] = []
        wanted = [name for name in names if name not in self.loaded]
        seen: set[str] = set()
        while wanted:
            rounds.insert(0, [name for name in dict.fromkeys(wanted) if name not in seen])
            seen.update(wanted)
            wanted = [t for name in wanted for t in model_targets(self.model_repository, name)
                      if t not in self.loaded and t not in seen]
        for batch in rounds:
            batch = [name for name in batch if name not in self.loaded]
            if not batch:
                continue
            with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                failures = [error for error in pool.map(lambda name: self._load_one(name, timeout), batch) if error]
            if failures:
                raise RuntimeError("; ".join(failures) + self._log_tail())

    def _load_one(self, name: str, timeout: float) -> str | None:
        request = urllib.request.Request(f"http://{self.http_url}/v2/repository/models/{name}/load", data=b"{}",
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout):
                pass
        except urllib.error.HTTPError as error:
            return f"loading {name} failed: {error.read().decode(errors='replace')}"
        self.loaded.add(name)
        return None

    def unload(self, name: str, timeout: float = 120.0) -> None:
        """Unloads a model `load` loaded (waits until it is gone)."""
        request = urllib.request.Request(f"http://{self.http_url}/v2/repository/models/{name}/unload",
                                         data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=timeout):
            pass
        self.loaded.discard(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/repository/index", data=b"{}",
                                        timeout=10) as response:
                states = {entry["name"]: entry.get("state") for entry in json.loads(response.read())}
            if states.get(name) != "READY" and states.get(name) != "UNLOADING":
                return
            time.sleep(0.2)
        raise TimeoutError(f"{name} still loaded after {timeout:.0f} s")

    def stop_gracefully(self, timeout: float | None = None) -> int:
        """Ctrl-C to the server's process group, as in a terminal; its exit status (the group is
        SIGKILLed when it does not exit within `timeout`, by default its exit timeout + 20 s)."""
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout if timeout is not None else self.exit_timeout_s + 20)
        except subprocess.TimeoutExpired:
            self.stop(timeout=1)
            return self.process.returncode

    def group_members(self) -> list[str]:
        """Command lines of the processes still in the server's process group (stubs, engines)."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.process.pid:
                        found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ")[:100].decode(errors="replace"))
                except (ProcessLookupError, PermissionError, FileNotFoundError):
                    pass
        return found

    def _log_tail(self) -> str:
        if not self.log_path or not Path(self.log_path).exists():
            return ""
        lines = Path(self.log_path).read_text(errors="replace").splitlines()[-40:]
        return "\n--- server log (tail) ---\n" + "\n".join(lines)

    def stop(self, timeout: float = 60.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # Model stubs (and vLLM engine processes) that outlived the server are in its
        # process group: end them too, so nothing keeps running or holding shared memory.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def __enter__(self) -> TritonServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
