"""The oracle teacher: answers a harness's calls with its task's reference solution, in the harness's
own action format, so the real harness runs it and the real verifier scores it.

Owns the per-harness action formats (looked up by harness name) and when to act or finish. Not the
re-tokenizing and recording (`clawgym.proxy.teacher.TeacherEngine`), nor running the solution
without a model (`clawgym.harnesses.pseudo.Oracle`, which validates suites).

A rollout gets two answers: the solution as one shell action, then, once a request shows that
action in its history, the harness's way of finishing. The action is the solution script's own
text (a demonstration a policy can learn from) when the solution is that one file; a solution of
several files writes them into a fresh folder first (base64) and runs its script there. Formats:

- a request with a shell tool (a tool taking `command` or `cmd`): a call of it; finishing is
  mini-swe-agent's submit command as a call, for others a reply without a call;
- mini-swe-agent in text mode: one ```mswea_bash_command block (its `mini_textbased.yaml`), the
  submit command `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` in its own block to finish;
- any other text harness (the reference harness): one ```bash block, then `DONE`;
- a side call of a tool-calling CLI (a request without tools: opencode's title, a summary): a short
  title, the first words of the request's last user message.
"""

import asyncio
import base64
import json
import shlex
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from clawgym.errors import FailedPrecondition, NotFound
from clawgym.protocols.conversation import (
    Conversation,
    FinishReason,
    GenerationOptions,
    Message,
    Tool,
    ToolCall,
)
from clawgym.records import Rollout
from clawgym.tasks.model import Task

MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
SHELL_ARGUMENTS = ("command", "cmd")  # a tool taking one of these runs shell commands
# CLIs that act through tools: their requests without tools are side calls (titles, summaries)
TOOL_HARNESSES = frozenset({"claude-code", "codex", "opencode", "openclaw", "qwen-code"})
TITLE_WORDS = 8


def solution_command(task: Task) -> str:
    """The task's reference solution as one shell command (module doc)."""
    if not task.has_solution:
        raise FailedPrecondition(f"task {task.id} has no reference solution for the oracle teacher")
    files: dict[str, bytes] = {}
    for item in task.solution:
        source = Path(item.source)
        paths = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
        for path in paths:
            rel = "" if path == source else "/" + path.relative_to(source).as_posix()
            files[item.target + rel] = path.read_bytes()
    script = files.get(task.solution_script)
    if script is not None and len(files) == 1:
        try:
            lines = script.decode().splitlines()
        except UnicodeDecodeError:
            lines = []
        if lines:
            body = lines[1:] if lines[0].startswith("#!") else lines
            return "\n".join(body).strip()
    root = PurePosixPath(task.solution_script).parent
    out = ['d="$(mktemp -d)"']
    for target, data in sorted(files.items()):
        rel = (
            PurePosixPath(target).relative_to(root)
            if PurePosixPath(target).is_relative_to(root)
            else PurePosixPath(target).name
        )
        dest = shlex.quote(str(rel))
        out.append(
            f'mkdir -p "$d/$(dirname {dest})" && echo {base64.b64encode(data).decode()} | base64 -d > "$d/"{dest}'
        )
    script_rel = shlex.quote(str(PurePosixPath(task.solution_script).relative_to(root)))
    out.append(f'bash "$d/"{script_rel}')
    return "\n".join(out)


def shell_tool(tools: Sequence[Tool]) -> tuple[str, str] | None:
    """(name, argument) of the request's shell tool, if it has one."""
    for tool in tools:
        properties = (tool.parameters or {}).get("properties") or {}
        for argument in SHELL_ARGUMENTS:
            if argument in properties:
                return tool.name, argument
    return None


def acted(conv: Conversation, command: str) -> bool:
    """Whether an assistant turn of the request already carries `command` (the harness ran it)."""
    for m in conv.messages:
        if m.role != "assistant":
            continue
        if command in m.content or any(command in v for c in m.tool_calls for v in argument_texts(c)):
            return True
    return False


def argument_texts(call: ToolCall) -> list[str]:
    """A tool call's argument values as text (its raw arguments when they are not an object): a
    multi-line command is found in its value, never in the escaped JSON or a dict's repr."""
    value = call.arguments_value()
    return [str(v) for v in value.values()] if isinstance(value, dict) else [str(value)]


def oracle_turn(harness: str, conv: Conversation, command: str) -> Message:
    """The oracle's answer to one request of `harness` (module doc)."""
    finish = acted(conv, command)
    tool = shell_tool(conv.tools)
    if tool is not None:
        name, argument = tool
        if finish and harness != "mini-swe-agent":
            return Message(role="assistant", content="The task is done.")
        run = MINI_SUBMIT if finish else command
        return Message(
            role="assistant", tool_calls=(ToolCall(name=name, arguments=json.dumps({argument: run})),)
        )
    if harness in TOOL_HARNESSES:
        return Message(role="assistant", content=side_call_title(conv))
    if harness == "mini-swe-agent":
        thought, run = ("The task is done.", MINI_SUBMIT) if finish else ("Run the solution.", command)
        return Message(role="assistant", content=f"THOUGHT: {thought}\n\n```mswea_bash_command\n{run}\n```")
    return Message(role="assistant", content="DONE" if finish else f"```bash\n{command}\n```")


def side_call_title(conv: Conversation) -> str:
    """The first words of the request's last user message, unquoted: a title a harness can show."""
    text = next((m.content for m in reversed(conv.messages) if m.role == "user"), "")
    return " ".join(text.strip().strip('"').split()[:TITLE_WORDS]) or "Task"


class OracleTeacher:
    """Answers each rollout's calls with its task's reference solution (module doc); tasks are read
    from `suites` on the first call."""

    name = "oracle"

    def __init__(self, suites: Sequence[str]) -> None:
        self.suites = list(suites)
        self._tasks: dict[str, Task] | None = None
        self._lock = asyncio.Lock()

    async def task(self, task_id: str) -> Task:
        async with self._lock:
            if self._tasks is None:
                self._tasks = await asyncio.to_thread(load_suites, self.suites)
        task = self._tasks.get(task_id)
        if task is None:
            raise NotFound(
                f"oracle teacher: no task {task_id!r} in suites {', '.join(self.suites) or '(none)'}"
            )
        return task

    async def answer(
        self, conv: Conversation, options: GenerationOptions, rollout: Rollout
    ) -> tuple[Message, FinishReason]:
        task = await self.task(rollout.task_id)
        return oracle_turn(rollout.harness, conv, solution_command(task)), "stop"

    async def aclose(self) -> None:
        return None


def load_suites(suites: Sequence[str]) -> dict[str, Task]:
    """Every task of `suites` by id (the first suite naming an id wins)."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    tasks: dict[str, Task] = {}
    for suite in suites:
        for task in load_tasks(resolve_suite(suite)):
            tasks.setdefault(task.id, task)
    return tasks
