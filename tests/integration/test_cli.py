"""The `tritonchat` command against the real tritonserver: one-shot runs as subprocesses, and the
interactive mode in a real terminal (tmux: keys sent, the screen read back)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import script

pytestmark = [pytest.mark.integration, pytest.mark.models("chat_scripted", "chat_tools")]

TRITONCHAT = str(Path(sys.executable).parent / "tritonchat")
TEXT = "Hello world"


def run(triton, *args: str, stdin: str | None = None, model: str = "chat_scripted") -> subprocess.CompletedProcess:
    command = [TRITONCHAT, "chat", "--url", triton.http_url, "--triton-model", model, *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)


def test_one_shot_prints_the_answer(triton):
    result = run(triton, "Hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == TEXT + "\n"


def test_stdin_system_and_sampling_flags_reach_the_request(triton):
    result = run(triton, "--system", "Be brief", "--temperature", "0.5", "--max-tokens", "7", "--seed", "3",
                 stdin=script(echo_request=True))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert "Be brief" in seen["inputs"]["text_input"][0]
    assert seen["sampling_parameters"]["temperature"] == 0.5 and seen["sampling_parameters"]["max_tokens"] == 7
    assert seen["sampling_parameters"]["seed"] == 3


def test_json_prints_raw_chunks(triton):
    result = run(triton, "Hi", "--json")
    chunks = [json.loads(line) for line in result.stdout.splitlines()]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == TEXT


def test_n_prints_each_choice(triton):
    result = run(triton, "Hi", "-n", "2")
    assert result.stdout == f"--- choice 0 ---\n{TEXT}\n--- choice 1 ---\n{TEXT}\n"


def test_reasoning_and_tool_calls_are_printed_apart(triton):
    chunks = ["<think>", "Let me", " see.", "</think>", "Calling.",
              '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>']
    tools = Path(f"/tmp/tools-{uuid.uuid4().hex}.json")
    tools.write_text(json.dumps([{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]))
    try:
        result = run(triton, script(chunks=chunks), "--tools", str(tools), model="chat_tools")
    finally:
        tools.unlink()
    assert result.returncode == 0, result.stderr
    assert result.stdout == '[reasoning] Let me see.\nCalling.\n[tool call] get_weather({"city": "Paris"})\n'


def test_errors_exit_1_with_the_message(triton):
    result = run(triton, "Hi", "--temperature", "9")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error (400): ") and "temperature" in result.stderr


class Terminal:
    """A tmux session running one command; `screen()` is what a user sees."""

    def __init__(self, command: list[str]):
        self.name = f"tritonchat-{uuid.uuid4().hex[:8]}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "200", "-y", "50",
                        " ".join(command)], check=True)
        subprocess.run(["tmux", "set-option", "-t", self.name, "remain-on-exit", "on"], check=True)

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def type(self, text: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, "-l", text], check=True)
        self.keys("Enter")

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-J", "-S", "-200", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def wait(self, predicate, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"the terminal never showed what was expected:\n{self.screen()}")

    def dead(self) -> bool:
        out = subprocess.run(["tmux", "display-message", "-p", "-t", self.name, "#{pane_dead}"],
                             capture_output=True, text=True).stdout.strip()
        return out == "1"

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def terminal(triton):
    assert shutil.which("tmux"), "tmux is needed (installed by .ci/run)"
    term = Terminal([TRITONCHAT, "chat", "--url", triton.http_url, "--triton-model", "chat_scripted"])
    yield term
    term.close()


def cancellations(triton) -> int:
    return triton.log_path.read_text(errors="replace").count("The request was cancelled by the client")


def test_interactive_keeps_the_conversation_and_ctrl_c_stops_an_answer(terminal, triton):
    terminal.wait(lambda s: "you> " in s)
    terminal.type("Hi")
    terminal.wait(lambda s: f"assistant> {TEXT}" in s and s.count("you> ") == 2)
    # The next turn's prompt holds the first exchange: the backend echoes what it received.
    terminal.type(script(echo_request=True))
    screen = terminal.wait(lambda s: s.count("you> ") == 3)
    echoed = screen.split("assistant> ")[2]
    assert "Hi" in echoed and TEXT in echoed
    # /reset forgets it (the scripted backend obeys the first script in the prompt).
    terminal.type("/reset")
    terminal.wait(lambda s: "(conversation reset)" in s)
    # Ctrl-C while an answer streams stops it and keeps the session.
    terminal.type(script(repeat={"text": "x", "count": 2000}, interval_ms=20))
    terminal.wait(lambda s: "xxxx" in s)
    before = cancellations(triton)
    terminal.keys("C-c")
    terminal.wait(lambda s: "[stopped]" in s and s.rstrip().endswith("you>"))
    terminal.wait(lambda s: cancellations(triton) > before)  # the request was cancelled on the server
    terminal.keys("C-d")
    terminal.wait(lambda s: terminal.dead())
