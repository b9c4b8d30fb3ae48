"""The reference harness as a black box: a subprocess talking HTTP to a real scripted server.

The agent runs with `python -I -S` from a copy outside the repo, so any import beyond the
standard library (clawgym included) would fail these tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clawgym.harnesses import reference_agent
from clawgym.harnesses.reference import AGENT_SCRIPT


@pytest.fixture
def agent(tmp_path: Path):
    script = tmp_path / "bin" / "reference_agent.py"
    script.parent.mkdir()
    shutil.copy(AGENT_SCRIPT, script)
    work = tmp_path / "work"
    work.mkdir()

    def run(server, instruction: str, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
        argv = [
            sys.executable,
            "-I",
            "-S",
            str(script),
            "--base-url",
            server.url + "/v1",
            "--model",
            "policy",
            "--workdir",
            str(work),
            *extra,
            instruction,
        ]
        env = {"PATH": os.environ["PATH"], "OPENAI_API_KEY": "tok-1"}
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)

    run.work = work
    return run


def user_turns(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def test_agent_runs_the_bash_block_creates_the_file_and_stops(chat_server, agent):
    """One fenced bash block runs in the workdir; its output goes back; a DONE reply ends the run."""
    chat_server.replies = ["I will write it.\n```bash\necho hi > a.txt && echo wrote\n```", "DONE"]
    done = agent(chat_server, "Create a.txt containing hi.")
    assert done.returncode == 0, f"the agent should exit 0 after DONE: {done.stderr}"
    assert (agent.work / "a.txt").read_text() == "hi\n", "the bash block should have run in the workdir"
    assert len(chat_server.requests) == 2, "one call to act, one call that ends the run"
    first, second = chat_server.requests
    assert first["messages"] == reference_agent.build_messages("Create a.txt containing hi."), (
        "the first request"
    )
    assert first["messages"][0] == {"role": "system", "content": reference_agent.SYSTEM_PROMPT}, (
        "system first"
    )
    assert first["messages"][1:-1] == reference_agent.EXAMPLE_TURNS, "then the worked example, as chat turns"
    assert user_turns(first)[-1] == "Create a.txt containing hi.", "then the task as the last user turn"
    assert "exit code 0" in user_turns(second)[-1] and "wrote" in user_turns(second)[-1], (
        "the command's output and exit code should be fed back as the next user turn"
    )
    assert second["messages"][-2]["role"] == "assistant", "the model's own reply stays in the history"
    assert second["messages"][:-2] == first["messages"], "the history is re-sent unchanged"
    assert chat_server.headers[0]["authorization"] == "Bearer tok-1", "the API key goes out as a Bearer token"
    assert first["model"] == "policy", "the configured model name is sent"


def test_reply_without_a_code_block_ends_the_run(chat_server, agent):
    """A reply with no fenced block is the model saying it is finished."""
    chat_server.replies = ["The task is already done."]
    done = agent(chat_server, "Do nothing.")
    assert done.returncode == 0, done.stderr
    assert len(chat_server.requests) == 1, "no block means no further calls"


def test_empty_reply_ends_the_run(chat_server, agent):
    chat_server.replies = [""]
    done = agent(chat_server, "Anything.")
    assert done.returncode == 0 and len(chat_server.requests) == 1, (
        "an empty reply must end the run, not loop"
    )


def test_max_turns_caps_a_model_that_never_stops(chat_server, agent):
    """A model that repeats a block forever is stopped after --max-turns calls."""
    chat_server.replies = ["```bash\necho x >> log.txt\n```"] * 10
    done = agent(chat_server, "Loop.", "--max-turns", "3")
    assert done.returncode == 0, done.stderr
    assert len(chat_server.requests) == 3, "exactly max-turns model calls"
    assert (agent.work / "log.txt").read_text() == "x\nx\nx\n", "each of the three turns ran its block once"


def test_command_timeout_kills_the_whole_command_tree(chat_server, agent):
    """A hanging command is killed with its background children, and the model is told it timed out."""
    chat_server.replies = ["```bash\nsleep 300 & echo $! > child.pid; wait\n```", "DONE"]
    done = agent(chat_server, "Hang.", "--command-timeout", "1")
    assert done.returncode == 0, done.stderr
    assert "timed out" in user_turns(chat_server.requests[1])[-1], (
        "the observation should say the command timed out"
    )
    pid = int((agent.work / "child.pid").read_text())
    # the background sleep must be gone (killed with its process group); a killed orphan may stay a
    # zombie for a moment until init reaps it, which counts as gone
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), f"the command's background child {pid} survived the timeout"


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def test_long_output_is_truncated_before_it_reaches_the_model(chat_server, agent):
    chat_server.replies = ["```bash\nhead -c 20000 /dev/zero | tr '\\0' a\n```", "DONE"]
    agent(chat_server, "Print a lot.", "--max-output-chars", "200")
    observation = user_turns(chat_server.requests[1])[-1]
    assert len(observation) < 400, f"observation should be cut near 200 chars, got {len(observation)}"
    assert "characters cut" in observation, "the model should be told the output was cut"


def test_tools_mode_runs_bash_tool_calls_and_answers_with_tool_messages(chat_server, agent):
    """With --mode tools, the request offers a bash function tool and tool calls are executed."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": "echo ok > t.txt"})},
    }
    chat_server.replies = [{"role": "assistant", "content": None, "tool_calls": [call]}, "Finished."]
    done = agent(chat_server, "Write t.txt.", "--mode", "tools")
    assert done.returncode == 0, done.stderr
    assert (agent.work / "t.txt").read_text() == "ok\n", "the tool call's command should have run"
    first, second = chat_server.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["bash"], "the bash tool is offered"
    tool_msg = second["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == "call_1", (
        "the result answers the call by id"
    )
    assert second["messages"][-2]["tool_calls"] == [call], "the assistant's tool call stays in the history"


def test_server_error_exits_with_code_3(chat_server, agent):
    """A 4xx/5xx from the server is reported on stderr with exit code 3 (not a crash)."""
    chat_server.url += "/nowhere"
    done = agent(chat_server, "Anything.")
    assert done.returncode == 3, f"expected exit 3 on HTTP error, got {done.returncode}: {done.stderr}"
    assert "HTTP 404" in done.stderr, "the error should name the HTTP status"


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("Sure:\n```bash\nls -l\n```\nDone.", "ls -l"),
        ("```sh\n$ mkdir d\n```", "mkdir d"),
        ("```python\nprint(1)\n```\nthen\n```bash\necho 2\n```", "echo 2"),
        ("```\necho plain\n```", "echo plain"),
        ("```bash\necho cut off", "echo cut off"),
        ("```python\nprint(1)\n```", None),
        ("no code at all", None),
        ("```bash\n\n```", None),
    ],
)
def test_extract_action_takes_the_first_shell_block(reply, command):
    assert reference_agent.extract_action(reply) == command, f"wrong action for {reply!r}"


def test_no_examples_sends_the_system_prompt_and_the_task_alone(chat_server, agent):
    """--no-examples (how the baseline bench measures what the worked examples are worth) leaves them out."""
    chat_server.replies = ["DONE"]
    done = agent(chat_server, "Create a.txt containing hi.", "--no-examples")
    assert done.returncode == 0, done.stderr
    (first,) = chat_server.requests
    assert first["messages"] == [
        {"role": "system", "content": reference_agent.SYSTEM_PROMPT},
        {"role": "user", "content": "Create a.txt containing hi."},
    ], "system prompt, then the task: no worked example"
