"""The servers of a run: a tritonserver on free ports with a fresh repository of the models the
paths need, vLLM's own OpenAI server on the tiny model, and how they are stopped for good.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from harness.bench import BenchError, log
from harness.bench.paths import DEFAULT_TOKENIZER, chat_model_name, inprocess_model_name, variant_model_name


def set_instance_count(config_path: Path, count: int) -> None:
    """Set the `count:` of the (first) instance_group in a config.pbtxt."""
    text = config_path.read_text()
    head, sep, tail = text.partition("instance_group")
    tail, replaced = re.subn(r"count:\s*\d+", f"count: {count}", tail, count=1)
    if not sep or not replaced:
        raise BenchError(f"{config_path}: no instance_group with a count")
    config_path.write_text(head + sep + tail)


def build_repository(repo: Path, args, grpc_port: int, http_port: int) -> None:
    """The models the selected pairs need, as tests/conftest.py builds them: per pair the raw
    model and one chat model per transport (on the vLLM pair, also the chat model with its own
    engine, on the raw model's engine arguments)."""
    from harness.repositories import (  # noqa: PLC0415
        add_chat_model,
        add_inprocess_chat_model,
        add_test_model,
        add_vllm_model,
    )

    # (every chat model reports its first tokens by stage, for the report's breakdown)
    loopback = {"grpc_url": f"127.0.0.1:{grpc_port}", "http_url": f"127.0.0.1:{http_port}",
                "first_token_stages": "true", **{key: str(value) for key, value in args.chat_parameter}}
    for pair in args.paths:
        if pair == "vllm":
            add_vllm_model(repo, args.raw_model, args.tokenizer, **dict(args.engine_arg))
            extra = {"target_model": args.raw_model}
            if args.inprocess:
                chat_dir = add_inprocess_chat_model(repo, inprocess_model_name(args), args.tokenizer,
                                                    engine_args=dict(args.engine_arg), **loopback)
                set_instance_count(chat_dir / "config.pbtxt", args.instances)
        else:
            add_test_model(repo, args.raw_scripted_model, "scripted_vllm")
            extra = {"target_model": args.raw_scripted_model, "tokenizer": str(args.tokenizer),
                     "served_model_name": "scripted"}
        for transport in args.transports:
            chat_dir = add_chat_model(repo, chat_model_name(args, pair, transport), transport=transport,
                                      **extra, **loopback)
            count = args.bls_instances if transport == "bls" and args.bls_instances else args.instances
            set_instance_count(chat_dir / "config.pbtxt", count)
        for label, parameters in args.variant:
            transport = args.transports[0]
            chat_dir = add_chat_model(repo, variant_model_name(args, pair, label), transport=transport,
                                      **extra, **{**loopback, **parameters})
            set_instance_count(chat_dir / "config.pbtxt", args.instances)


def start_server(args, out: Path):
    """A tritonserver on free ports serving a fresh repository; returns it and the repository directory."""
    from harness.server import TritonServer, free_port  # noqa: PLC0415

    repo_dir = Path(tempfile.mkdtemp(prefix="bench-repo-"))
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    build_repository(repo_dir, args, grpc_port, http_port)
    server_log = out.with_name(out.stem + "-tritonserver.log")
    server = TritonServer(repo_dir, http_port, grpc_port, metrics_port, log_path=server_log)
    log(f"starting tritonserver (log: {server_log})")
    server.start()
    return server, repo_dir


def scripted_server(model: str, prefix: str):
    """A tritonserver (not started yet) on free ports with the scripted fake engine and `model`,
    `openai_chat` in front of it; its repository and log are in a new temporary directory."""
    from harness.repositories import add_chat_model, add_test_model  # noqa: PLC0415
    from harness.server import TritonServer, free_port  # noqa: PLC0415

    repo = Path(tempfile.mkdtemp(prefix=prefix))
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    add_test_model(repo, "scripted_vllm")
    add_chat_model(repo, model, target_model="scripted_vllm", tokenizer=str(DEFAULT_TOKENIZER),
                   served_model_name="scripted", http_url=f"127.0.0.1:{http_port}")
    return TritonServer(repo, http_port, grpc_port, metrics_port, log_path=repo / "tritonserver.log")


def process_group_members(pgid: int) -> dict[int, str]:
    """pid -> command line of the processes in a process group."""
    members = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[2]) == pgid:
            members[int(entry)] = cmdline.strip()
    return members


def stop_server(server, repo_dir: Path) -> None:
    server.stop()
    # A stub that hangs can outlive tritonserver; it is still in the server's process group.
    left = process_group_members(server.process.pid)
    if left:
        for pid, cmdline in left.items():
            log(f"left behind by tritonserver, killing: {pid} {cmdline[:160]}")
        try:
            os.killpg(server.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(repo_dir, ignore_errors=True)


def wait_healthy(url: str, process: subprocess.Popen, timeout: float, interval: float) -> bool:
    """Whether `url`/health answers 200 before the process exits and within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(interval)
    return False


def vllm_server_command(args, port: int) -> list[str]:
    """vLLM's own OpenAI server with the engine settings of `vllm_model` (harness/repositories.py)."""
    from harness.repositories import TINY_ENGINE_ARGS  # noqa: PLC0415

    engine = {**TINY_ENGINE_ARGS, **dict(args.engine_arg)}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(args.tokenizer),
               "--host", "127.0.0.1", "--port", str(port), "--no-enable-log-requests"]
    for key, value in engine.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is not False:
            command += [flag, str(value)]
    return command


def start_vllm_server(args, out: Path):
    """vLLM's OpenAI server on a free port; returns the process and its URL."""
    from harness.server import free_port, server_env  # noqa: PLC0415

    port = free_port()
    log_path = out.with_name(out.stem + "-vllm-serve.log")
    with open(log_path, "wb") as server_log:
        process = subprocess.Popen(vllm_server_command(args, port), stdout=server_log, stderr=subprocess.STDOUT,
                                   env=server_env(), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    log(f"starting vLLM's OpenAI server (log: {log_path})")
    if wait_healthy(url, process, timeout=600, interval=1):
        log(f"vLLM's server ready at {url}")
        return process, url
    if process.poll() is not None:
        raise BenchError(f"vLLM's server exited (log: {log_path})")
    stop_process_group(process)
    raise BenchError(f"vLLM's server did not start (log: {log_path})")


def stop_process_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
