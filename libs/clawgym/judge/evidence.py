"""What the judge is shown: the output files the rubric's rules name, read from the sandbox after
the code checks and before it is destroyed, the agent's last answer (from the rollout's captured
calls) and the harness's final output.

All of it is the agent's text, untrusted: a file is read by its ends only (`JudgeConfig.max_file_bytes`,
whatever its size), and every part is cut to `max_file_chars`; `prompt` quotes it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from clawgym.errors import InvalidArgument, NotFound
from clawgym.judge.config import JudgeConfig
from clawgym.records import Call
from clawgym.sandbox.interface import FileEnds, Sandbox
from clawgym.tasks.model import Task

MISSING = None  # a named file the agent did not write


@dataclass(frozen=True)
class Evidence:
    files: dict[str, str | None] = field(default_factory=dict)  # rule file_path → text (cut) or MISSING
    final_output: str = ""  # the tail of the harness's stdout/stderr
    final_message: str = ""  # the text of the rollout's last model answer, "" if none


def _text(data: bytes) -> str:
    # NULs replaced: the store's text columns cannot hold them
    return data.decode("utf-8", "replace").replace("\x00", "\ufffd")


def cut(text: str, limit: int) -> str:
    """`text` kept to `limit` characters: its start and end, with what was left out said between
    (NULs replaced: the store's text columns cannot hold them)."""
    text = text.replace("\x00", "\ufffd")
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def file_text(ends: FileEnds, limit: int) -> str:
    """What the judge is shown of a file read by its ends: at most `limit` characters and the cut
    said (a tail read from mid-character starts with a replacement character)."""
    if not ends.left_out:
        return cut(_text(ends.head + ends.tail), limit)
    half = max(1, limit // 2)
    head, tail = _text(ends.head)[:half], _text(ends.tail)[-half:]
    return f"{head}\n[... the middle of this {ends.size}-byte file left out ...]\n{tail}"


async def collect(task: Task, sandbox: Sandbox, final_output: str, cfg: JudgeConfig) -> Evidence:
    """Reads each file a rule of `task.rubric` names (once, by its ends), relative to the task's workdir."""
    files: dict[str, str | None] = {}
    head = cfg.max_file_bytes // 2
    for rule in task.rubric.rules if task.rubric else ():
        if not rule.file_path or rule.file_path in files:
            continue
        path = posixpath.normpath(posixpath.join(task.workdir, rule.file_path))
        try:
            ends = await sandbox.read_ends(path, head, cfg.max_file_bytes - head)
        except (NotFound, InvalidArgument, OSError):  # absent, a directory, a link, outside the sandbox
            files[rule.file_path] = MISSING
            continue
        files[rule.file_path] = file_text(ends, cfg.max_file_chars)
    return Evidence(files, cut(final_output, cfg.max_file_chars))


def _texts(value: object, kinds: tuple[str, ...]) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return []
    return [
        b["text"]
        for b in value
        if isinstance(b, dict) and b.get("type") in kinds and isinstance(b.get("text"), str)
    ]


def final_message(calls: list[Call]) -> str:
    """The text of the last call's answer, whatever protocol carried it ("" if none)."""
    if not calls:
        return ""
    call = max(calls, key=lambda c: c.seq)
    r = call.response if isinstance(call.response, dict) else {}
    if call.protocol == "openai_chat":
        choices = r.get("choices") or [{}]
        message = choices[0].get("message", {}) if isinstance(choices[0], dict) else {}
        parts = _texts(message.get("content") if isinstance(message, dict) else None, ("text",))
    elif call.protocol == "anthropic_messages":
        parts = _texts(r.get("content"), ("text",))
    else:  # openai_responses
        parts = [
            text
            for item in r.get("output") or []
            if isinstance(item, dict) and item.get("type") == "message"
            for text in _texts(item.get("content"), ("output_text", "text"))
        ]
    return "\n".join(p for p in parts if p).strip()
