"""Reproducer: Python backend stub deadlock with concurrent decoupled BLS streams.

Starts tritonserver with ./models and sends REQUESTS requests to the decoupled model
`caller` over gRPC streams from CONCURRENCY client threads. Each `caller` request
starts a thread in the stub that reads a decoupled BLS stream from `target` (COUNT
responses ~1 ms apart), doing sum(range(SPIN)) of pure-Python work per response
(standing in for e.g. detokenization), then replies with the count.

Outcome (exit code):
  0  all requests completed
  1  DEADLOCK: no completion for STALL seconds while the stubs are alive; prints the
     caller stub's thread summary (gdb, if installed: native stacks, owners of the
     mutexes waited for, GIL holder) and its Python stacks (faulthandler, server log)
  3  CRASH: a stub process died (with --tensors on 24.10 this happens often, see README)
  2  --max-seconds ran out while requests were still completing
The server (and its stubs) are stopped in every case.

Usage (NGC tritonserver container, `tritonserver` on PATH; gdb optional):
    pip install tritonclient[grpc]
    python reproduce.py                 # 16 concurrent requests
    python reproduce.py --concurrency 1 # one BLS stream at a time: completes
Outside a container pass --tritonserver /path/to/tritonserver [--backend-directory DIR].
In the repository this was written in, harness/server.py (pytriton's Triton 2.51)
provides the server when present.
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
EXEC_LAMBDA = "lambda(std::shared_ptr<triton::backend::python::InferRequest>&, bool)"


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


def client_worker(url, next_index, n_requests, count, params, timeout, done, errors):
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    inp = grpcclient.InferInput("COUNT", [1], "INT32")
    inp.set_data_from_numpy(np.array([count], dtype=np.int32))
    try:
        while (i := next(next_index)) < n_requests:
            client.async_stream_infer("caller", [inp], request_id=str(i), parameters=params)
            result, error = results.get(timeout=timeout)
            if error is not None:
                errors.append(f"request {i}: {error}")
            elif int(result.as_numpy("TOTAL")[0]) != count:
                errors.append(f"request {i}: TOTAL={result.as_numpy('TOTAL')[0]}, expected {count}")
            else:
                done.append(i)
        client.stop_stream()
    except Exception:  # stalled (queue.Empty) or server stopped: the main thread reports
        pass


def gdb(pid: int, *commands: str) -> str:
    cmd = ["gdb", "-p", str(pid), "-batch", "-ex", "set pagination off"]
    for c in commands:
        cmd += ["-ex", c]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout


def summarize(text: str, python_lines: dict[int, str]) -> list[tuple[str, str]]:
    """One line per thread: what it waits for, and the Triton frames above the wait."""
    rows = []
    for block in re.split(r"\n(?=Thread \d+ )", text):
        head = re.match(r"Thread (\d+) \(Thread (0x[0-9a-f]+) \(LWP (\d+)\)", block)
        if not head:
            continue
        mutex = re.search(r"__lll_lock_wait \(futex=futex@entry=(0x[0-9a-f]+)", block)
        if mutex:
            wait = f"waits for mutex {mutex.group(1)}"
        elif "take_gil" in block:
            wait = "waits for the GIL"
        elif "pthread_cond_wait" in block or "pthread_cond_timedwait" in block:
            wait = "idle (condition wait)"
        else:
            wait = "other"
        calls = []
        for m in re.finditer(r"in (?:triton::backend::python::)?((?:\w+::)?\w+)\(", block):
            if "pybind11" not in m.group(1) and m.group(1) not in calls:
                calls.append(m.group(1))
        if EXEC_LAMBDA in block:
            calls.append("exec() binding")
        py = python_lines.get(int(head.group(2), 16))
        where = " <- ".join(calls[:4]) + (f" <- {py}" if py else "")
        rows.append((f"Thread {head.group(1)} (LWP {head.group(3)})",
                     wait + (f": {where}" if where else "")))
    return rows


def process_state(pid: int) -> str:
    try:  # field 3 of /proc/PID/stat; Z = exited, not yet reaped by tritonserver
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def gdb_watch(pid: int, path: Path) -> subprocess.Popen:
    """Keep gdb attached; it prints every thread's stack when the stub receives a
    fatal signal (crash) or when gdb itself gets SIGINT (used on a stall)."""
    return subprocess.Popen(
        ["gdb", "-p", str(pid), "-batch", "-ex", "set pagination off",
         "-ex", "handle SIGUSR1 SIGPIPE nostop noprint pass", "-ex", "continue",
         "-ex", "thread apply all bt"],
        stdout=open(path, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def print_crash(path: Path) -> None:
    """The thread that got the fatal signal, from the gdb_watch output."""
    text = path.read_text(errors="replace")
    sig = re.search(r"\nThread (\d+) \"[^\"]*\" received signal (\w+)", text)
    if not sig:
        print(f"  no signal in {path}")
        return
    print(f"  gdb: thread {sig.group(1)} received {sig.group(2)}; its stack:")
    block = re.search(rf"\nThread {sig.group(1)} \(Thread .*?(?=\nThread \d+ \(|\Z)", text, re.S)
    for fr in [l for l in (block.group(0) if block else "").splitlines() if l.startswith("#")][:16]:
        print("     " + re.sub(r" \(.*?\) at ", " at ", fr)[:170])


def dump_stacks(server: Server, stubs: dict[str, int | None], out_dir: Path,
                watcher: subprocess.Popen | None = None) -> None:
    pid = stubs["caller"]
    print(f"caller stub pid {pid}, state {process_state(pid)}")
    # Python stacks: faulthandler (registered in caller's initialize) writes to the log.
    os.kill(pid, signal.SIGUSR1)
    time.sleep(1)
    python_lines = {}  # thread id -> innermost model.py line
    for m in re.finditer(r"Thread (0x[0-9a-f]+) \(most recent call first\):\n\s+File \"[^\"]*?"
                         r"(models/\w+/1/model\.py)\", line (\d+) in (\w+)",
                         server.log_path.read_text(errors="replace")):
        python_lines[int(m.group(1), 16)] = f"{m.group(2)}:{m.group(3)} {m.group(4)}()"
    if shutil.which("gdb") is None:
        print("gdb not installed: no native stacks (apt-get install gdb)")
        return
    stacks = out_dir / f"gdb_stacks_{pid}.txt"
    if watcher is not None:  # interrupt the attached gdb: it prints the stacks, detaches
        os.kill(watcher.pid, signal.SIGINT)
        watcher.wait(120)
        text = (out_dir / "gdb_watch.txt").read_text(errors="replace")
    else:
        text = gdb(pid, "thread apply all bt")
    stacks.write_text(text)
    print(f"native stacks of all threads: {stacks}")
    # Who owns the mutexes that threads wait for (glibc: __data.__owner at offset 8),
    # and which thread last took the GIL (CPython 3.8-3.11 layout; best effort).
    mutexes = sorted(set(re.findall(r"__lll_lock_wait \(futex=futex@entry=(0x[0-9a-f]+)", text)))
    owners = gdb(pid, *[f"printf \"mutex {m} owner LWP %d\\n\", *(int*)({m}+8)" for m in mutexes],
                 "printf \"GIL locked=%d, last holder: thread 0x%lx\\n\", "
                 "_PyRuntime.ceval.gil.locked._value, "
                 "((PyThreadState*)_PyRuntime.ceval.gil.last_holder._value)->thread_id")
    owner_lines = [l for l in owners.splitlines() if l.startswith(("mutex", "GIL"))]
    (out_dir / f"gdb_owners_{pid}.txt").write_text("\n".join(owner_lines) + "\n")
    print("thread summary (waits, Triton frames innermost first, Python line):")
    for name, what in summarize(text, python_lines):
        print(f"  {name}: {what}")
    for line in owner_lines:
        print("  " + line)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--count", type=int, default=20, help="responses per BLS stream")
    p.add_argument("--tensors", action="store_true",
                   help="target responses carry an OUT tensor (default: no tensors)")
    p.add_argument("--spin", type=int, default=20000,
                   help="caller runs sum(range(SPIN)) in Python after each BLS response")
    p.add_argument("--stall", type=float, default=20.0, help="seconds without progress = deadlock")
    p.add_argument("--max-seconds", type=float, default=100.0)
    p.add_argument("--tritonserver", help="tritonserver binary (default: on PATH)")
    p.add_argument("--backend-directory")
    p.add_argument("--gdb-watch", action="store_true",
                   help="keep gdb attached to the caller stub, to get native stacks of a crash")
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
    stubs = {m: server.stub_pid(m) for m in ("caller", "target")}
    watcher = gdb_watch(stubs["caller"], args.out / "gdb_watch.txt") if args.gdb_watch else None
    time.sleep(2 if watcher else 0)  # let gdb attach
    print(f"tritonserver ready (pid {server.process.pid}, log {log}); sending {args.requests} "
          f"requests, concurrency {args.concurrency}, {args.count} BLS responses each"
          + (" with tensors" if args.tensors else " without tensors") + f", spin {args.spin}")
    done: list[int] = []
    errors: list[str] = []
    next_index = itertools.count()  # shared by the client threads (next() is atomic)

    start = time.monotonic()
    code = 2
    try:
        for _ in range(args.concurrency):
            threading.Thread(target=client_worker, daemon=True,
                             args=(f"127.0.0.1:{server.grpc}", next_index, args.requests,
                                   args.count, {"empty": not args.tensors, "spin": args.spin},
                                   args.stall + 30, done, errors)).start()
        last_n, last_t = 0, time.monotonic()
        while True:
            time.sleep(1)
            n, now = len(done), time.monotonic()
            if n != last_n:
                last_n, last_t = n, now
            if int(now - start) % 5 == 0:
                print(f"  t={now - start:5.1f}s completed={n} errors={len(errors)}")
            if n >= args.requests:
                print(f"OK: {n} requests completed in {now - start:.1f}s")
                code = 0
                break
            dead = {m: state for m, pid in stubs.items()
                    if pid and (state := process_state(pid)) in ("Z", "gone")}
            if watcher is not None and watcher.poll() is not None:
                dead["caller"] = f"fatal signal caught by gdb: {args.out / 'gdb_watch.txt'}"
            if dead:
                print(f"CRASH at t~{now - start:.0f}s: stub process(es) exited {dead}; "
                      f"completed={n}. From the server log:")
                time.sleep(1)
                for line in log.read_text(errors="replace").splitlines():
                    if re.search(r"malloc|free\(\)|corrupt|Fatal Python|Segmentation|"
                                 r"Signal|not healthy|terminate", line):
                        print("   ", line[:200])
                if watcher is not None and watcher.poll() is not None:
                    print_crash(args.out / "gdb_watch.txt")
                code = 3
                break
            if now - last_t >= args.stall:
                print(f"DEADLOCK: completed={n}/{args.requests}, no completion for "
                      f"{now - last_t:.0f}s (last at t={last_t - start:.1f}s); stubs alive")
                dump_stacks(server, stubs, args.out, watcher)
                code = 1
                break
            if now - start >= args.max_seconds:
                print(f"no stall within {args.max_seconds:.0f}s: completed={n}")
                break
        for e in errors[:5]:
            print("error:", e)
    finally:
        if watcher is not None and watcher.poll() is None:
            watcher.kill()  # gdb exits; the stub is detached
        server.stop()
    print(f"server stopped; log: {log}")
    sys.stdout.flush()
    os._exit(code)  # client threads may still be blocked on dead streams


if __name__ == "__main__":
    main()
