"""Trees built from the store's records: a rollout's calls, branches from compaction and sub-agents,
GRPO groups and batches.

Token ids: 1 <sys>, 2 tools, 3 <user>, 4 "fix the bug", 5 <assistant>, 6 "ls", 7 <tool>, 8 "a.py",
9 "cat", 10 "done", 12 "summary", 13 "summarise!", 20 <sub-sys>, 21 "find usages", 22 "grep".
"""

import numpy as np
import pytest

from clawgym.errors import InvalidArgument
from clawgym.records import Call, Group, Rollout, RolloutWithCalls
from clawgym.trajectory import tree_from_calls, tree_from_group, tree_from_groups
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups

SYS, TOOLS, USER, TASK, ASSIST, LS, TOOL, A_PY, CAT, DONE = range(1, 11)
SUMMARY, SUMMARISE, SUB_SYS, FIND, GREP = 12, 13, 20, 21, 22
PROMPT = [SYS, TOOLS, USER, TASK, ASSIST]


def call(
    rid: str, seq: int, prompt: list[int], output: list[int], version: int = 3, temperature: float | None = 0.7
) -> Call:
    return Call(
        rollout_id=rid, seq=seq, protocol="anthropic_messages", request={}, response={},
        prompt_ids=np.array(prompt, np.int32), output_ids=np.array(output, np.int32),
        output_logprobs=np.full(len(output), -0.5, np.float32), output_versions=np.full(len(output), version, np.int32),
        policy_version=version, finish_reason="stop", temperature=temperature,
    )  # fmt: skip


def rollout(rid: str, group: str, reward: float, calls: list[Call]) -> RolloutWithCalls:
    r = Rollout(
        id=rid, run_id="run", group_id=group, task_id="t", harness="h", status="finished", reward=reward,
        passed=reward > 0, error="", policy_version_start=3, sandbox="", timings={}, created_at=0.0,
    )  # fmt: skip
    return RolloutWithCalls(rollout=r, calls=calls)


def test_calls_with_growing_history_form_one_line_with_every_output_trainable():
    c0 = call("r", 0, PROMPT, [LS])
    c1 = call("r", 1, [*PROMPT, LS, TOOL, A_PY, ASSIST], [CAT])
    c2 = call("r", 2, [*PROMPT, LS, TOOL, A_PY, ASSIST, CAT, TOOL, ASSIST], [DONE])
    tree = tree_from_calls([c2, c0, c1], reward=1.0)  # out of order on purpose: seq order is used
    s = tree.stats()
    assert (s.n_paths, s.branch_points, s.unique_tokens) == (1, 0, 13), f"one line of 13 tokens: {s}"
    assert s.trainable_tokens == 3 and s.generated_tokens == 3, "LS, CAT, DONE stay generated"
    assert s.call_tokens == 6 + 10 + 13, "every call's prompt+output is counted"
    flat = tree.flatten()
    assert flat.gen_version.tolist() == [3, 3, 3], "per-token policy versions are kept"
    assert tree.rollouts[0].reward == 1.0, "the rollout's reward travels with the tree"


def test_each_generated_token_keeps_the_temperature_of_its_engine_logprob():
    """A call's recorded sampling temperature goes to its output tokens; greedy (0) logprobs are of
    temperature 1 (as the engine reports them); a call without one (older records) is NaN: unknown."""
    c0 = call("r", 0, PROMPT, [LS], temperature=0.7)
    c1 = call("r", 1, [*PROMPT, LS, TOOL, A_PY, ASSIST], [CAT, GREP], temperature=0.0)
    c2 = call("r", 2, [*PROMPT, LS, TOOL, A_PY, ASSIST, CAT, GREP, TOOL, ASSIST], [DONE], temperature=None)
    flat = tree_from_calls([c0, c1, c2], reward=1.0).flatten()
    t = flat.gen_temperature
    assert t[:3].tolist() == pytest.approx([0.7, 1.0, 1.0]) and np.isnan(t[3]), t
    back = type(flat).from_bytes(flat.to_bytes())
    assert np.array_equal(back.gen_temperature, t, equal_nan=True), "temperatures survive serialisation"
    assert np.array_equal(flat.to_radix().flatten().gen_temperature, t, equal_nan=True), "and the radix form"
    with pytest.raises(InvalidArgument, match="temperature"):
        tree_from_calls([call("q", 0, PROMPT, [LS], temperature=-1.0)])


def test_compaction_rewrites_history_and_branches_after_the_system_prompt():
    """The harness replaced the history by a summary the policy generated: a second path."""
    before = [*PROMPT, LS, TOOL, A_PY, ASSIST]
    calls = [
        call("r", 0, PROMPT, [LS]),
        call("r", 1, [*before, SUMMARISE], [SUMMARY]),  # the compaction call extends the history
        call("r", 2, [SYS, TOOLS, USER, SUMMARY, ASSIST], [CAT]),  # summary now as context
        call("r", 3, [SYS, TOOLS, USER, SUMMARY, ASSIST, CAT, TOOL, ASSIST], [DONE]),
    ]
    tree = tree_from_calls(calls, reward=1.0)
    s = tree.stats()
    assert s.n_paths == 2 and s.branch_points == 1, f"old history and compacted history: {s}"
    assert s.unique_tokens == 3 + 8 + 6, f"shared <sys> tools <user>, then two branches: {s}"
    assert s.path_tokens == 11 + 9 and s.depth == 11, f"paths of 11 and 9 tokens: {s}"
    assert s.trainable_tokens == 4, "LS, SUMMARY (generated), CAT, DONE; SUMMARY as context is not"
    flat = tree.flatten()
    summary_positions = np.flatnonzero(flat.tokens == SUMMARY)
    assert len(summary_positions) == 2, "the summary appears twice: generated once, as context once"
    assert sum(p in flat.gen_pos for p in summary_positions) == 1, "only the generated one is trainable"


def test_a_sub_agent_with_its_own_system_prompt_is_a_separate_branch_from_the_root():
    calls = [
        call("r", 0, PROMPT, [LS]),
        call("r", 1, [SUB_SYS, FIND], [GREP]),
        call("r", 2, [SUB_SYS, FIND, GREP, TOOL, ASSIST], [DONE]),
        call("r", 3, [*PROMPT, LS, TOOL, DONE, ASSIST], [CAT]),
    ]
    tree = tree_from_calls(calls, reward=0.0)
    s = tree.stats()
    assert s.n_paths == 2 and s.branch_points == 1, f"main agent and sub-agent: {s}"
    assert len(tree.root.children) == 2, "the sub-agent starts its own root branch"
    assert s.unique_tokens == 10 + 6 and s.trainable_tokens == 4, f"{s}"
    assert s.sharing_ratio == 1.0, "nothing is shared between main agent and sub-agent"


def test_a_group_shares_the_prompt_and_keeps_per_rollout_rewards_and_generated_flags():
    group = Group(
        id="g", run_id="run",
        rollouts=[
            rollout("a", "g", 1.0, [call("a", 0, PROMPT, [LS, A_PY])]),
            rollout("b", "g", 0.0, [call("b", 0, PROMPT, [LS, CAT])]),
            rollout("c", "g", 0.0, []),  # failed before its first call: skipped
        ],
    )  # fmt: skip
    tree = tree_from_group(group)
    s = tree.stats()
    assert s.n_rollouts == 2, "a rollout without calls is not in the tree"
    assert (s.unique_tokens, s.path_tokens, s.n_paths) == (8, 14, 2), f"prompt and LS shared: {s}"
    assert s.trainable_tokens == 3 and s.generated_tokens == 4, "LS generated by both samples"
    assert [(r.id, r.group_id, r.reward) for r in tree.rollouts] == [("a", "g", 1.0), ("b", "g", 0.0)], (
        "infos"
    )


def test_a_batch_of_groups_shares_the_harness_system_prompt():
    g1 = Group(id="g1", run_id="run", rollouts=[rollout("a", "g1", 1.0, [call("a", 0, PROMPT, [LS])])])
    g2 = Group(
        id="g2",
        run_id="run",
        rollouts=[rollout("b", "g2", 0.0, [call("b", 0, [SYS, TOOLS, USER, 99, ASSIST], [LS])])],
    )
    s = tree_from_groups([g1, g2]).stats()
    assert (s.unique_tokens, s.branch_points, s.n_paths) == (3 + 3 + 3, 1, 2), f"branch after <user>: {s}"


def test_malformed_calls_raise_invalid_argument():
    bad_lp = call("r", 0, PROMPT, [LS])
    bad_lp.output_logprobs = np.zeros(2, np.float32)
    with pytest.raises(InvalidArgument):
        tree_from_calls([bad_lp])
    with pytest.raises(InvalidArgument):
        tree_from_calls([call("r", 0, [], [LS])])
    with pytest.raises(InvalidArgument):
        tree_from_calls([call("r", 0, PROMPT, [LS]), call("s", 1, PROMPT, [CAT])])
    with pytest.raises(InvalidArgument):
        tree_from_calls([])


def test_synthetic_traces_look_like_harness_rollouts():
    shape = TraceShape(system_tokens=300, task_tokens=50, calls=(10, 12), observation_tokens=20, output_tokens=15,
                       p_compaction=0.1, p_subagent=0.1, vocab_size=1000)  # fmt: skip
    groups = synthetic_groups(shape, seed=1)
    system_start = groups[0].rollouts[0].calls[0].prompt_ids[0]
    main_calls = [sum(c.prompt_ids[0] == system_start for c in r.calls) for r in groups[0].rollouts]
    assert min(main_calls) >= 10, f"each rollout has at least 10 main-agent calls: {main_calls}"
    s = tree_from_groups(groups).stats()
    assert s.n_rollouts == 8 and s.n_paths > 8, f"G=8 and some branches from compaction/sub-agents: {s}"
    assert s.sharing_ratio > 1.3, f"samples share the system prompt and task: {s}"
    assert s.generated_tokens > s.trainable_tokens, "output headers make samples share generated positions"
    again = tree_from_groups(synthetic_groups(shape, seed=1)).stats()
    assert again == s, "the generator is deterministic for a seed"
