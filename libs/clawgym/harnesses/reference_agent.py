#!/usr/bin/env python3
"""The reference harness: a small standalone shell agent that talks to a Chat Completions server.

It owns the agent loop only: ask the model, run the one fenced ```bash block it replies with in
the working directory, feed the (truncated) output back, repeat until the model stops. It imports
nothing from clawgym and speaks plain HTTP (urllib), so to clawgym it is a black box like any other
harness. Run it as `python reference_agent.py --base-url http://HOST:PORT/v1 "TASK"`.

Action formats:
- text (default): the reply holds one fenced shell block; a reply with no block, or whose last
  line is `DONE`, ends the run. This suits small models with no tool-call training.
- tools: a `bash` function tool; a reply with no tool call ends the run.

It is robust to model junk: empty replies end the run, `--max-turns` caps loops, every command has
a timeout and runs in its own process group that is killed whole on timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

# --- prompt and action format -------------------------------------------------------------------

SYSTEM_PROMPT = """You are a Linux shell assistant. You do the user's task by running bash commands in the current directory.
Reply with one bash code block. Use the exact file and folder names the task gives.
After the command has run, reply DONE if the task is finished."""

# Three worked examples, sent as real chat turns before the task: a small model copies the shape of
# a conversation (one fenced bash block, then DONE) far more reliably than it follows a description
# of one. They answer no task of the bundled suite: no program they use appears in any mini-suite
# solution (tests/tasks/test_mini_suite.py checks it), so whatever a policy scores there it did not
# copy from the prompt. Each uses its own names, none from the suite's vocabulary (a 135M model
# copies a lone example's file name into its answers).
EXAMPLE_TURNS = [
    {"role": "user", "content": "Which directory am I working in?"},
    {"role": "assistant", "content": "```bash\npwd\n```"},
    {"role": "user", "content": "Output (exit code 0):\n/home/user/project"},
    {"role": "assistant", "content": "DONE"},
    {"role": "user", "content": "Save the names of the files in the folder holiday_pics into index.html."},
    {"role": "assistant", "content": "```bash\nls holiday_pics > index.html\n```"},
    {"role": "user", "content": "Output (exit code 0):\n(no output)"},
    {"role": "assistant", "content": "DONE"},
    {"role": "user", "content": "Write the numbers from 1 to 5, one per line, into countdown.txt."},
    {"role": "assistant", "content": "```bash\nseq 1 5 > countdown.txt\n```"},
    {"role": "user", "content": "Output (exit code 0):\n(no output)"},
    {"role": "assistant", "content": "DONE"},
]

TOOLS_SYSTEM_PROMPT = """You are a helpful assistant that uses a Linux shell.
Call the bash tool to run commands in the current directory. When the task is done, answer without a tool call."""

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the task's working directory and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command to run"}},
            "required": ["command"],
        },
    },
}

# A fence line: ``` plus an optional language tag. Blocks are paired in order, so the closing fence of
# a ```python block is never read as the opening of a shell block.
_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*$")
SHELL_TAGS = ("", "bash", "sh", "shell", "console", "zsh")


def build_messages(instruction: str, mode: str = "text", examples: bool = True) -> list[dict]:
    """The first request's messages: the system prompt, (text mode) the worked examples, then the task."""
    if mode != "text":
        return [{"role": "system", "content": TOOLS_SYSTEM_PROMPT}, {"role": "user", "content": instruction}]
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        *(EXAMPLE_TURNS if examples else []),
        {"role": "user", "content": instruction},
    ]


def extract_action(reply: str) -> str | None:
    """The shell command of a text-mode reply: its first non-empty shell block, or None (run ends).

    Shell blocks are untagged or tagged bash/sh/shell/console/zsh; other languages are skipped. A
    `$ ` prompt prefix on a line is dropped (small models copy it from examples). A block cut off by
    max_tokens still counts. (A last line `DONE` after the block ends the run too: see run_agent.)
    """
    if not reply or not reply.strip():
        return None
    block: list[str] | None = None
    tag = ""
    for line in reply.splitlines():
        fence = _FENCE_LINE.match(line)
        if block is None:
            if fence:
                block, tag = [], fence.group(1).lower()
        elif fence:
            if tag in SHELL_TAGS and _command(block):
                return _command(block)
            block = None
        else:
            block.append(line)
    # An unclosed last block (the reply hit max_tokens) still counts.
    return _command(block) if block is not None and tag in SHELL_TAGS else None


def _command(lines: list[str]) -> str | None:
    lines = [line[2:] if line.startswith("$ ") else line for line in lines]
    return "\n".join(lines).strip() or None


def format_observation(exit_code: int | None, output: str, max_chars: int) -> str:
    """The user turn that reports a command's result back to the model (output truncated)."""
    if len(output) > max_chars:
        half = max_chars // 2
        output = f"{output[:half]}\n[... {len(output) - max_chars} characters cut ...]\n{output[-half:]}"
    status = "timed out" if exit_code is None else f"exit code {exit_code}"
    return f"Output ({status}):\n{output.strip() or '(no output)'}"


# --- running commands ---------------------------------------------------------------------------


def run_command(command: str, workdir: str, timeout: float) -> tuple[int | None, str]:
    """Runs one command with bash in `workdir`; returns (exit code or None on timeout, output).

    The command gets its own session so a timeout kills its whole process tree, grandchildren too.
    """
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out.decode("utf-8", "replace")


# --- talking to the model -----------------------------------------------------------------------


class ModelError(RuntimeError):
    """The server answered with an error or something that is not a chat completion."""


def chat(base_url: str, api_key: str, body: dict, timeout: float) -> dict:
    """POSTs one non-streaming Chat Completions request and returns the first choice's message."""
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise ModelError(f"HTTP {e.code}: {e.read()[:500].decode('utf-8', 'replace')}") from e
    except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as e:
        raise ModelError(str(e)) from e
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not choices or not isinstance(choices[0].get("message"), dict):
        raise ModelError(f"no choices in the reply: {str(payload)[:500]}")
    return choices[0]["message"]


# --- the agent loop -----------------------------------------------------------------------------


def run_agent(args: argparse.Namespace, log=print) -> int:
    """The loop: ask, act, observe, until the model stops, max turns or the total time runs out."""
    messages = build_messages(args.instruction, args.mode, examples=not args.no_examples)
    deadline = time.monotonic() + args.total_timeout
    for turn in range(1, args.max_turns + 1):
        body: dict = {"model": args.model, "messages": messages, "max_tokens": args.max_tokens}
        if args.temperature is not None:
            body["temperature"] = args.temperature
        if args.mode == "tools":
            body["tools"] = [BASH_TOOL]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            log(f"[agent] total time of {args.total_timeout}s used up")
            return 0
        message = chat(args.base_url, args.api_key, body, timeout=min(args.request_timeout, remaining))
        content = message.get("content") or ""
        log(f"[turn {turn}] assistant:\n{content}")
        if args.mode == "tools":
            calls = message.get("tool_calls") or []
            if not calls:
                return 0
            messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
            for call in calls:
                try:
                    command = json.loads(call["function"]["arguments"] or "{}").get("command", "")
                except (KeyError, TypeError, ValueError, AttributeError):
                    command = ""
                code, output = (
                    run_command(command, args.workdir, args.command_timeout) if command else (2, "no command")
                )
                observation = format_observation(code, output, args.max_output_chars)
                log(f"[turn {turn}] $ {command}\n{observation}")
                messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": observation})
            continue
        command = extract_action(content)
        if command is None:
            return 0
        code, output = run_command(command, args.workdir, args.command_timeout)
        observation = format_observation(code, output, args.max_output_chars)
        log(f"[turn {turn}] $ {command}\n{observation}")
        if content.strip().splitlines()[-1].strip() == "DONE":
            return 0
        messages.append({"role": "assistant", "content": content})
        messages.append({"role": "user", "content": observation})
    log(f"[agent] stopped after {args.max_turns} turns")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("instruction", help="the task, in words")
    p.add_argument(
        "--base-url",
        default=env.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
        help="Chat Completions base URL, with /v1",
    )
    p.add_argument("--api-key", default=env.get("OPENAI_API_KEY", ""), help="sent as a Bearer token")
    p.add_argument(
        "--model", default=env.get("OPENAI_MODEL", "policy"), help="model name sent in each request"
    )
    p.add_argument(
        "--mode", choices=("text", "tools"), default="text", help="fenced shell blocks, or a bash tool"
    )
    p.add_argument(
        "--workdir", default=os.getcwd(), help="where commands run (default: the current directory)"
    )
    p.add_argument(
        "--no-examples", action="store_true", help="text mode: leave the worked examples out of the prompt"
    )
    p.add_argument("--max-turns", type=int, default=8, help="model calls at most")
    p.add_argument("--max-tokens", type=int, default=256, help="max_tokens per reply")
    p.add_argument(
        "--temperature", type=float, default=None, help="sampling temperature (default: the server's)"
    )
    p.add_argument("--command-timeout", type=float, default=30.0, help="seconds per shell command")
    p.add_argument("--request-timeout", type=float, default=300.0, help="seconds per model call")
    p.add_argument("--total-timeout", type=float, default=900.0, help="seconds for the whole run")
    p.add_argument("--max-output-chars", type=int, default=2000, help="command output fed back, at most")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run_agent(args, log=lambda text: print(text, flush=True))
    except ModelError as e:
        print(f"[agent] model error: {e}", file=sys.stderr, flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(main())
