"""Every real harness CLI, headless in a sandbox, writes a file with its own tool through the real proxy.

For each of Claude Code, Codex, opencode, Qwen Code, mini-swe-agent and OpenClaw: the adapter
installs the pinned CLI from its registry into the cache outside the repo (`~/.cache/clawgym/
harnesses`, reused once there), the orchestrator runs it in a bubblewrap sandbox with its own HOME
on the bundled mini task "Create a file named F containing the text W.", and the scripted engine
plays the policy through the real tiny-qwen3 tokenizer: first a call of the harness's own
file-writing (or shell) tool, then a final message. The test checks that the file is there with
the word (the task's verifier, run in the sandbox, gives 1.0), that the calls are in the store
with prompt/output token ids and logprobs, and that the harness's next call after the tool call
extends that call's prompt + output token for token (the proxy spliced the generated ids back).

What each harness does on the wire (observed with these pinned versions; asserted below):

| harness        | protocol           | path                 | tool         | session headers          |
|----------------|--------------------|----------------------|--------------|--------------------------|
| claude-code    | anthropic_messages | /v1/messages         | Write        | x-claude-code-session-id |
| codex          | openai_responses   | /v1/responses        | exec_command | session-id, thread-id    |
| opencode       | openai_chat        | /v1/chat/completions | write        | x-session-id             |
| qwen-code      | openai_chat        | /v1/chat/completions | write_file   | none (the token only)    |
| mini-swe-agent | openai_chat        | /v1/chat/completions | bash         | none (the token only)    |
| openclaw       | openai_chat        | /v1/chat/completions | write        | none; one traceparent trace-id per run |

Side calls the script and the pairing allow for: opencode first asks for a title (no tools); Qwen
Code may ask a memory-extraction sub-agent afterwards (its own system prompt and tools). So the
acting call is the one the script answered with the tool call, and the call checked against it is
the harness's next call with the same tool list (the same agent). OpenClaw appends an internal-
context user message to every request and re-sends it after the new turns, so its next prompt
extends the acting prompt with that trailing message taken out (asserted exactly, see
`expected_prefix`). OpenClaw's V8 isolates need more than the default 2 GiB RLIMIT_DATA of a
local sandbox (measured: 4 GiB fails, 5 GiB runs): its adapter declares a minimum the orchestrator
applies, so its case runs with the default sandbox settings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from clawgym.harnesses.registry import get_harness
from clawgym.orchestrator.interface import Batch, RolloutRequest, RolloutStatus
from clawgym.records import Call

pytestmark = [pytest.mark.harness, pytest.mark.slow]

FINAL = "Done: the file is written."
TITLE = "Create a file"  # opencode's title call (a request without tools)
# Request headers that name a harness's session (all of them the proxy records by default).
SESSION_HEADERS = ("x-claude-code-session-id", "session-id", "session_id", "thread-id", "x-session-id")


def tool_call(name: str, arguments: dict) -> str:
    """A Qwen-style tool call, as the policy's chat template writes one."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@dataclass(frozen=True)
class Case:
    """One harness: its wire facts and how the scripted policy makes it write the file."""

    harness: str
    protocol: str  # the proxy's protocol name for the harness's calls
    path: str  # the one path it POSTs to
    tool: str  # the harness's own tool the policy calls
    arguments: Callable[[str, str, str], dict]  # (absolute path, word, shell command) → arguments
    session_headers: tuple[str, ...] = ()  # of SESSION_HEADERS: present, the same on every call
    final: str = FINAL
    constant_trace: bool = False  # the W3C traceparent's trace-id is the same on every call
    resent_context: str = ""  # marker of a trailing user turn re-sent after the new turns
    orchestrator: dict = field(default_factory=dict)  # orchestrator config the harness needs


CASES = [
    Case(
        "claude-code",
        "anthropic_messages",
        "/v1/messages",
        "Write",
        lambda path, word, _: {"file_path": path, "content": word + "\n"},
        session_headers=("x-claude-code-session-id",),
    ),
    Case(
        "codex",
        "openai_responses",
        "/v1/responses",
        "exec_command",
        lambda _, __, command: {"cmd": command},
        session_headers=("session-id", "thread-id"),
    ),
    Case(
        "opencode",
        "openai_chat",
        "/v1/chat/completions",
        "write",
        lambda path, word, _: {"filePath": path, "content": word + "\n"},
        session_headers=("x-session-id",),
    ),
    Case(
        "qwen-code",
        "openai_chat",
        "/v1/chat/completions",
        "write_file",
        lambda path, word, _: {"file_path": path, "content": word + "\n"},
    ),
    Case(
        "mini-swe-agent",
        "openai_chat",
        "/v1/chat/completions",
        "bash",
        lambda _, __, command: {"command": command},
        # every reply must hold a bash call; this one submits and ends the run
        final=tool_call("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}),
    ),
    Case(
        "openclaw",
        "openai_chat",
        "/v1/chat/completions",
        "write",
        lambda path, word, _: {"path": path, "content": word + "\n"},
        constant_trace=True,
        resent_context="<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>",
    ),
]


def reply_ids(tokenizer, text: str) -> list[int]:
    """`text` as the policy emits it: its tokens, then the end of turn."""
    return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.convert_tokens_to_ids("<|im_end|>")]


def policy(tokenizer, instruction: str, acting: str, final: str) -> Callable[[list[int], int], list[int]]:
    """The scripted policy. It decides from the prompt alone, so side calls cannot shift it: a
    request without tools (a title) gets a title, the task's opening turn (the instruction, tools,
    no assistant turn yet) gets the tool call, everything else the final message."""
    replies = {k: reply_ids(tokenizer, t) for k, t in (("title", TITLE), ("act", acting), ("final", final))}

    def script(prompt_ids: list[int], index: int) -> list[int]:
        text = tokenizer.decode(prompt_ids)
        if "<tools>" not in text:
            return list(replies["title"])
        opening = text.count("<|im_start|>assistant") <= 1 and instruction in text
        return list(replies["act" if opening else "final"])

    return script


def tool_names(call: Call) -> list[str]:
    """The names of the tools a recorded request offered, in any of the three protocols."""
    tools = call.request.get("tools") or []
    return [t.get("name") or t.get("function", {}).get("name") or t.get("type", "") for t in tools]


def expected_prefix(tokenizer, acting: Call, resent_context: str) -> np.ndarray:
    """What the next prompt must start with: the acting prompt + its output ids. With a re-sent
    trailing context turn, that turn (the last before the generation prompt) is taken out first:
    the harness moves it after the turns it adds, so the spliced output follows what preceded it."""
    prompt = acting.prompt_ids
    if resent_context:
        starts = np.flatnonzero(prompt == tokenizer.convert_tokens_to_ids("<|im_start|>"))
        context, generation = starts[-2], starts[-1]
        assert resent_context in tokenizer.decode(prompt[context:generation]), (
            "the acting prompt's last turn is the harness's re-sent context message"
        )
        prompt = np.concatenate([prompt[:context], prompt[generation:]])
    return np.concatenate([prompt, acting.output_ids])


async def run_one(stack, task_id: str, harness: str) -> list[RolloutStatus]:
    run = stack.store.create_run(f"e2e-{harness}")
    batch = Batch(run.id, [RolloutRequest(task_id, harness)])
    return [s async for s in stack.orchestrator.run_rollouts(batch)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.harness)
def test_the_harness_writes_the_file_with_its_own_tool_and_its_calls_extend_token_exactly(
    case: Case, stack, write_word, tokenizer, record_property
):
    adapter = get_harness(case.harness)
    adapter.install()  # from the registry into the cache, once
    assert adapter.is_installed(), f"{case.harness} is installed with its pinned version (and Node)"
    assert adapter.protocol == case.protocol, f"the adapter says {adapter.protocol}"
    path = f"{write_word.task.workdir}/{write_word.file}"
    acting = tool_call(case.tool, case.arguments(path, write_word.word, write_word.command))
    s = stack(
        policy(tokenizer, write_word.task.instruction, acting, case.final),
        **case.orchestrator,
    )
    statuses = s.run(run_one(s, write_word.task.id, case.harness))

    final = statuses[-1]
    assert final.state == "finished" and final.failure == "", (
        f"the rollout ends normally: {final.state} {final.failure}: {final.error}"
    )
    assert final.reward == 1.0 and final.passed, (
        f"the file exists with the word (the task's verifier, in the sandbox), got {final.reward}:\n"
        f"{final.error}"
    )

    calls = s.store.list_calls(final.rollout_id)
    posts = sorted({p for method, p in s.requests if method == "POST"})
    record_property("protocol", case.protocol)
    record_property("paths", posts)
    record_property("calls", len(calls))
    record_property("headers", [c.headers for c in calls])
    record_property("temperatures", [c.temperature for c in calls])
    assert posts == [case.path], f"{case.harness} POSTs to {case.path} only, got {posts}"
    assert {c.protocol for c in calls} == {case.protocol}, (
        f"every call is recorded as {case.protocol}: {[c.protocol for c in calls]}"
    )

    for c in calls:  # no forced temperature here: the harness's own, else 1.0, is what was sampled
        sent = c.request.get("temperature")
        assert c.temperature == (1.0 if sent is None else sent), (
            f"call {c.seq}: recorded temperature {c.temperature}, the harness sent {sent!r}"
        )

    act_ids = reply_ids(tokenizer, acting)
    acts = [c for c in calls if c.output_ids.tolist() == act_ids]
    assert acts, f"a call got the tool call; outputs: {[tokenizer.decode(c.output_ids) for c in calls]}"
    act = acts[0]
    assert case.tool in tool_names(act), f"{case.harness} offered its {case.tool} tool: {tool_names(act)}"
    assert act.prompt_ids.dtype == np.int32 and len(act.prompt_ids) > 0, "prompt token ids are stored"
    assert len(act.output_logprobs) == len(act.output_ids) and np.all(act.output_logprobs < 0), (
        "one logprob per generated token is stored"
    )

    # the harness's next call of the same agent (same tools) after the tool ran
    follow = next((c for c in calls if c.seq > act.seq and tool_names(c) == tool_names(act)), None)
    assert follow is not None, f"{case.harness} called again after the tool call ({len(calls)} calls)"
    assert follow.output_ids.tolist() == reply_ids(tokenizer, case.final), "the next call got the final turn"
    assert len(follow.output_logprobs) == len(follow.output_ids), "its logprobs are stored too"
    prefix = expected_prefix(tokenizer, act, case.resent_context)
    assert len(follow.prompt_ids) > len(prefix), "the next prompt adds the tool result after the turn"
    mismatch = np.flatnonzero(follow.prompt_ids[: len(prefix)] != prefix)
    assert mismatch.size == 0, (
        f"{case.harness}: the next prompt diverges from the acting prompt + output at token "
        f"{mismatch[0] if mismatch.size else -1}: "
        f"{tokenizer.decode(follow.prompt_ids[max(0, mismatch[0] - 20) : mismatch[0] + 20])!r} vs "
        f"{tokenizer.decode(prefix[max(0, mismatch[0] - 20) : mismatch[0] + 20])!r}"
    )

    present = {h for h in SESSION_HEADERS if h in act.headers}
    assert present == set(case.session_headers), (
        f"{case.harness} names its session with {case.session_headers or 'no header'}: {act.headers}"
    )
    for h in case.session_headers:
        assert act.headers[h] and follow.headers.get(h) == act.headers[h], f"{h} is the same on both calls"
    if case.constant_trace:
        # traceparent is version-traceid-spanid-flags; the span changes per call, the trace does not
        traces = {c.headers.get("traceparent", "--").split("-")[1] for c in (act, follow)}
        assert len(traces) == 1 and "" not in traces, f"one W3C trace-id per run: {traces}"
