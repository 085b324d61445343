"""Reproducer: Python backend stub deadlock with concurrent decoupled BLS streams.

Starts tritonserver with ./models, sends REQUESTS requests to the decoupled model
`caller` over gRPC streams from CONCURRENCY client threads, and watches progress.
Each `caller` request starts a thread in the stub that reads a decoupled BLS stream
from `target` (COUNT responses, ~1 ms apart).

If no request completes for STALL seconds, prints DEADLOCK, dumps the `caller`
stub's Python stacks (SIGUSR1 -> faulthandler, into the server log) and native
stacks (gdb, if installed), stops the server and exits 1. Exits 0 when all
requests complete, 2 if --max-seconds ran out while requests were still progressing.

Usage (inside an NGC tritonserver container, `tritonserver` on PATH):
    pip install tritonclient[grpc]
    python reproduce.py --concurrency 16
Outside a container, pass --tritonserver /path/to/bin/tritonserver (and
--backend-directory if needed). In the repository this was written in,
tools/tritonlocal.py (pytriton's Triton 2.51) provides the server when present.
"""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

HERE = Path(__file__).resolve().parent
# Functions whose presence in a native stack marks a thread of the lock cycle.
KEY_FRAMES = re.compile(
    r"ResponseIterator::(Next|Clear|EnqueueResponse)|Stub::(GetResponseIterator|"
    r"ProcessBLSResponseDecoupled|EnqueueUtilsMessage|SendCleanupId|"
    r"ServiceStubToParentRequests|ParentToStubMQMonitor)|take_gil|PyEval_RestoreThread|"
    r"PyGILState_Ensure|__lll_lock_wait|pthread_mutex_lock|pthread_cond_wait"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """tritonserver in its own process group (so its stubs can be ended with it)."""

    def __init__(self, args, log_path: Path):
        self.http, self.grpc, self.metrics = free_port(), free_port(), free_port()
        self.log_path = log_path
        binary, backends, self.env = args.tritonserver, args.backend_directory, None
        if binary is None:
            try:  # the repository this was written in: pytriton's Triton 2.51
                sys.path.insert(0, str(HERE.parents[2]))
                from tools import tritonlocal  # noqa: PLC0415

                binary = str(tritonlocal.server_binary())
                backends = str(tritonlocal.make_backend_dir(log_path.parent / "backends"))
                self.env = tritonlocal.server_env()
            except ImportError:
                binary = "tritonserver"
        self.cmd = [binary, f"--model-repository={HERE / 'models'}",
                    f"--http-port={self.http}", f"--grpc-port={self.grpc}",
                    f"--metrics-port={self.metrics}"]
        if backends:
            self.cmd.append(f"--backend-directory={backends}")

    def start(self, timeout: float = 120) -> None:
        self.process = subprocess.Popen(self.cmd, stdout=open(self.log_path, "wb"),
                                        stderr=subprocess.STDOUT, env=self.env,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited, see {self.log_path}")
            try:
                url = f"http://127.0.0.1:{self.http}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"tritonserver not ready, see {self.log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                pass
        try:  # a hung stub ignores the shutdown: end the whole group
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def stub_pid(self, model: str) -> int | None:
        out = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True,
                             text=True).stdout.split()
        for pid in out:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if f"/models/{model}/".encode() in cmdline:
                return int(pid)
        return None


def client_worker(url, next_index, n_requests, count, timeout, done, errors):
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    inp = grpcclient.InferInput("COUNT", [1], "INT32")
    inp.set_data_from_numpy(np.array([count], dtype=np.int32))
    while True:
        i = next(next_index)
        if i >= n_requests:
            break
        client.async_stream_infer("caller", [inp], request_id=str(i))
        try:
            result, error = results.get(timeout=timeout)
        except queue.Empty:
            return  # stalled: the main thread reports it
        if error is not None:
            errors.append(str(error))
        elif int(result.as_numpy("TOTAL")[0]) != count:
            errors.append(f"request {i}: TOTAL={result.as_numpy('TOTAL')[0]}, expected {count}")
        done.append(i)
    client.stop_stream()


def dump_stacks(server: Server, out_dir: Path) -> None:
    pid = server.stub_pid("caller")
    if pid is None:
        print("could not find the caller stub process")
        return
    print(f"caller stub pid {pid}")
    # Python stacks: faulthandler (registered in caller's initialize) writes to the log.
    os.kill(pid, signal.SIGUSR1)
    time.sleep(1)
    if shutil.which("gdb") is None:
        print("gdb not installed: no native stacks (apt-get install gdb)")
        return
    stacks = out_dir / f"gdb_stacks_{pid}.txt"
    with open(stacks, "w") as f:
        subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "set pagination off",
                        "-ex", "thread apply all bt"], stdout=f, stderr=subprocess.STDOUT,
                       timeout=120)
    print(f"native stacks of all threads: {stacks}")
    print("threads with frames of the lock cycle (top frames only):")
    for block in re.split(r"\n(?=Thread \d+ )", stacks.read_text(errors="replace")):
        if not block.startswith("Thread ") or not KEY_FRAMES.search(block):
            continue
        lines = block.splitlines()
        frames = [l for l in lines[1:] if l.startswith("#")][:12]
        print("  " + lines[0])
        for fr in frames:
            fr = re.sub(r" \(.*?\) at ", " at ", fr)  # drop argument lists
            print("     " + fr[:160])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--count", type=int, default=20, help="responses per BLS stream")
    p.add_argument("--stall", type=float, default=20.0, help="seconds without progress = deadlock")
    p.add_argument("--max-seconds", type=float, default=100.0)
    p.add_argument("--tritonserver", help="tritonserver binary (default: on PATH)")
    p.add_argument("--backend-directory")
    p.add_argument("--out", type=Path, default=Path("/tmp/bls_deadlock"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "tritonserver.log"

    server = Server(args, log)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    print(f"tritonserver ready (pid {server.process.pid}, log {log}); sending {args.requests} "
          f"requests, concurrency {args.concurrency}, {args.count} BLS responses each")
    done: list[int] = []
    errors: list[str] = []
    next_index = itertools.count()  # shared by the client threads (next() is atomic)

    start = time.monotonic()
    code = 2
    try:
        for _ in range(args.concurrency):
            threading.Thread(target=client_worker, daemon=True,
                             args=(f"127.0.0.1:{server.grpc}", next_index, args.requests,
                                   args.count, args.stall + 30, done, errors)).start()
        last_n, last_t = 0, time.monotonic()
        while True:
            time.sleep(1)
            n, now = len(done), time.monotonic()
            if n != last_n:
                last_n, last_t = n, now
            if int(now - start) % 5 == 0:
                print(f"  t={now - start:5.1f}s completed={n}")
            if n >= args.requests:
                print(f"OK: {n} requests completed in {now - start:.1f}s, errors={len(errors)}")
                code = 0
                break
            if now - last_t >= args.stall:
                print(f"DEADLOCK: completed={n}/{args.requests}, no completion for "
                      f"{now - last_t:.0f}s (last progress at t={last_t - start:.1f}s)")
                dump_stacks(server, args.out)
                code = 1
                break
            if now - start >= args.max_seconds:
                print(f"no stall within {args.max_seconds:.0f}s: completed={n}")
                break
        for e in errors[:5]:
            print("error:", e)
    finally:
        server.stop()
    print(f"server stopped; log: {log}")
    sys.stdout.flush()
    os._exit(code)  # client threads may still be blocked on dead streams


if __name__ == "__main__":
    main()
