"""End to end: a real harness solves a bundled mini-suite task through the real proxy, driven by the orchestrator.

orchestrator (registers the rollout, token) → bubblewrap sandbox → harness CLI installed from its
registry into the cache → proxy (the harness's own protocol) → scripted engine via tiny-qwen3 →
store; then the task's verifier. Each test checks the reward, the captured calls and their token
ids, and the capture invariant: the second call's prompt starts with the first call's prompt +
output, token for token (the proxy spliced the generated ids back in).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from clawgym.harnesses.registry import get_harness
from clawgym.orchestrator.interface import Batch, RolloutRequest, RolloutStatus

pytestmark = pytest.mark.slow


def tool_call(name: str, **arguments: str) -> str:
    """A Qwen-style tool call, as the policy's chat template writes one."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


async def run_one(stack, task_id: str, harness: str) -> tuple[list[RolloutStatus], str]:
    run = stack.store.create_run(f"e2e-{harness}")
    statuses = [
        s async for s in stack.orchestrator.run_rollouts(Batch(run.id, [RolloutRequest(task_id, harness)]))
    ]
    return statuses, run.id


def check_solved_and_captured(stack, statuses: list[RolloutStatus], tokenizer, first: str) -> None:
    final = statuses[-1]
    assert final.state == "finished" and final.failure == "", f"{final.state} {final.failure}: {final.error}"
    assert final.reward == 1.0 and final.passed, f"the verifier gives 1.0, got {final.reward}:\n{final.error}"
    record = stack.store.get_rollout(final.rollout_id)
    assert (record.status, record.reward, record.passed) == ("finished", 1.0, True), (
        "the store has the reward"
    )

    calls = stack.store.list_calls(final.rollout_id)
    assert len(calls) >= 2, f"an acting call and a final one are recorded, got {len(calls)}"
    expected_first = [
        *tokenizer.encode(first, add_special_tokens=False),
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
    ]
    c0, c1 = calls[0], calls[1]
    assert c0.output_ids.tolist() == expected_first, "call 0 stored exactly the token ids the engine produced"
    assert len(c0.output_logprobs) == len(c0.output_ids) and np.all(c0.output_logprobs < 0), (
        "logprobs per token"
    )
    assert c0.prompt_ids.dtype == np.int32 and len(c0.prompt_ids) > 0, "prompt token ids are stored"
    prefix = np.concatenate([c0.prompt_ids, c0.output_ids])
    assert len(c1.prompt_ids) > len(prefix), "the second prompt adds the tool result after the first turn"
    mismatch = np.flatnonzero(c1.prompt_ids[: len(prefix)] != prefix)
    assert mismatch.size == 0, (
        f"call 1's prompt diverges from call 0's prompt+output at token {mismatch[:1]}: "
        f"{tokenizer.decode(c1.prompt_ids[max(0, mismatch[0] - 20) : mismatch[0] + 20])!r} vs "
        f"{tokenizer.decode(prefix[max(0, mismatch[0] - 20) : mismatch[0] + 20])!r}"
    )


@pytest.mark.harness
def test_claude_code_writes_the_file_with_its_write_tool_and_is_rewarded(
    stack, scripted, write_word, tokenizer
):
    """Claude Code (Anthropic Messages, streamed tool_use) calls Write, then answers; reward 1.0."""
    get_harness("claude-code").install()
    path = f"{write_word.task.workdir}/{write_word.file}"
    first = "I will write the file.\n" + tool_call("Write", file_path=path, content=write_word.word + "\n")
    s = stack(scripted(first, "Done: the file is written."))
    statuses, _ = s.run(run_one(s, write_word.task.id, "claude-code"))
    check_solved_and_captured(s, statuses, tokenizer, first)
    request = s.store.list_calls(statuses[-1].rollout_id)[0].request
    assert any(t.get("name") == "Write" for t in request.get("tools", [])), (
        "Claude Code offered its Write tool"
    )


@pytest.mark.harness
def test_mini_swe_agent_runs_the_bash_command_then_submits_and_is_rewarded(
    stack, scripted, write_word, tokenizer
):
    """mini-swe-agent (Chat Completions, never streaming) runs a bash tool call each turn; the second
    submits with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`; reward 1.0."""
    get_harness("mini-swe-agent").install()
    first = tool_call("bash", command=write_word.command)
    s = stack(scripted(first, tool_call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")))
    statuses, _ = s.run(run_one(s, write_word.task.id, "mini-swe-agent"))
    check_solved_and_captured(s, statuses, tokenizer, first)


def test_the_reference_harness_runs_the_bash_block_then_stops_and_is_rewarded(
    stack, scripted, write_word, tokenizer
):
    """The reference agent (Chat Completions, fenced bash blocks) runs the block, then reads DONE."""
    first = f"```bash\n{write_word.command}\n```"
    s = stack(scripted(first, "DONE"))
    statuses, _ = s.run(run_one(s, write_word.task.id, "reference"))
    check_solved_and_captured(s, statuses, tokenizer, first)
    assert [st.state for st in statuses] == ["registered", "running", "verifying", "finished"], statuses
