"""A real harness's branches: the real Claude Code CLI, driven by a scripted policy through the real
proxy, spawns a sub-agent and compacts its context; the captured rollout's prefix tree branches
where it should, and training over it is exact (tree-packed loss and gradients = per path).

Everything is real but the policy: the proxy app under uvicorn (`Proxy` of test_real_harnesses), a
local sandbox, the task's verifier, the SQLite store, the tree the trainer builds from the store's
calls (`tree_from_calls`), trained in float64 with the trainer's CPU tree attention. The policy reads
each prompt (decoded) and answers in the policy's Qwen tool-call format:

- sub-agent: the parent calls Claude Code's `Agent` tool with a custom agent (`--agents`), in the
  foreground; the sub-agent (its own system prompt, `x-claude-code-agent-id`) writes the task's file
  and reports; the parent ends.
- compaction: Claude Code's own auto-compact, made to fire at a few hundred tokens by the adapter's
  `context_window` (625 tokens: `CLAUDE_CODE_AUTO_COMPACT_WINDOW` at the CLI's 100k minimum, with
  `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` 0.5, a percentage of it). After the first tool call it declines (nothing older than the last turn to
  summarise); after the second it asks for a summary, which the policy writes, and the next call
  starts from that summary.

`--system-prompt` and `--tools` keep the prompts near 3k tokens (the full Claude Code prompt is ~20k),
so the float64 exactness check over every path stays within a test's time on two CPU cores. Each
test leaves the rollout's tree as `clawgym.trajectory.view` draws it in its tmp folder (`tree.json`;
keep it with `pytest --basetemp DIR`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from clawgym.harnesses.base import RunContext
from clawgym.harnesses.claude_code import ClaudeCode
from clawgym.inference.scripted import ScriptedEngine
from clawgym.orchestrator.attempt import run_task
from clawgym.policies import load_tokenizer
from clawgym.rl import ValueHead, gae_terms, pack
from clawgym.rl.forward import values_by_position
from clawgym.rl.tree_attention import TREE_ATTENTION
from clawgym.trajectory import tree_from_calls
from clawgym.trajectory.view import rollout_view
from tests.harnesses.test_real_harnesses import Proxy, mini_task
from tests.rl.test_exactness import CONFIGS, LOSS_CFG, assert_same, packed_total, per_path_total, split_budget

HELPER_PROMPT = "You are the helper sub-agent: do what the launching agent asks, then report."
SUMMARY = "<summary>SUMMARY: the word file was written, then a notes file.</summary>"
CONTINUED = (
    "This session is being continued from a previous conversation"  # Claude Code's post-compaction prompt
)


class ScriptedProxy(Proxy):
    """`Proxy`, the policy answering each prompt with `reply(decoded prompt)`: a text in the policy's format."""

    def __init__(self, reply: Callable[[str], str], db: Path, model: str = "tiny-qwen3") -> None:
        tokenizer = load_tokenizer(model)
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")

        def script(prompt: list[int], index: int) -> list[int]:
            return [*tokenizer.encode(reply(tokenizer.decode(prompt)), add_special_tokens=False), end]

        super().__init__([], db, model, ScriptedEngine(script, vocab_size=len(tokenizer), max_context=131072))


class ClaudeCodeWith(ClaudeCode):
    """Claude Code with extra command-line flags and environment."""

    def __init__(self, flags: list[str], env: dict[str, str], **options) -> None:
        super().__init__(**options)
        self.flags, self.extra_env = flags, env

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        return [*super().command(instruction, ctx), *self.flags]

    def env(self, ctx: RunContext) -> dict[str, str]:
        return {**super().env(ctx), **self.extra_env}


def tool_call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def assistant_turns(prompt: str) -> int:
    """Assistant turns already in a rendered prompt (the last `<|im_start|>assistant` opens the reply)."""
    return prompt.count("<|im_start|>assistant") - 1


def last_user(prompt: str) -> str:
    return prompt[prompt.rfind("<|im_start|>user") :]


def word_task(tmp_path: Path):
    """The write_word task, its file's absolute path and the word."""
    task = mini_task("write_word", tmp_path, "Create a file named ")
    path, word = (
        task.instruction.removeprefix("Create a file named ").rstrip(".").split(" containing the text ")
    )
    return task, f"{task.workdir}/{path}", word


def capture(adapter, task, reply, tmp_path: Path, backend):
    """One rollout of `task` through `adapter` with the policy `reply`: its outcome and stored calls."""
    adapter.install()
    with ScriptedProxy(reply, tmp_path / "store.db") as proxy:
        rollout_id, token = proxy.register(adapter.name, task.id)
        outcome = asyncio.run(
            run_task(adapter, task, backend, proxy_url=proxy.url, token=token, model="policy")
        )
        calls = sorted(proxy.store.list_calls(rollout_id), key=lambda c: c.seq)
    assert outcome.verdict.reward == 1.0, f"{outcome.verdict.detail}\n{outcome.harness_output[-3000:]}"
    return outcome, calls


def sequence(call) -> np.ndarray:
    return np.concatenate([np.asarray(call.prompt_ids), np.asarray(call.output_ids)])


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.nonzero(a[:n] != b[:n])[0]
    return int(differ[0]) if len(differ) else n


def leaves(tree) -> int:
    return sum(1 for node in tree.nodes() if not node.children)


def branch_depth(these: list[list[int]], those: list[list[int]]) -> int:
    """The node depth k at which every path of `these` parts from every path of `those` (node paths
    from the root): all of `these` go on into one child there, all of `those` into another."""
    depths = {common_prefix(np.asarray(a), np.asarray(b)) for a in these for b in those}
    assert len(depths) == 1, f"the two sets part at several depths: {depths}"
    k = depths.pop()
    assert all(k < len(p) for p in these + those), "a path of one set ends inside the other's"
    assert len({p[k] for p in these}) == 1 and len({p[k] for p in those}) == 1, "each set is one subtree"
    return k


def export_view(calls, tmp_path: Path) -> dict:
    """The rollout's tree as the browser and `clawgym export` show it, written to tmp_path for a person."""
    view = rollout_view(calls, decode=load_tokenizer("tiny-qwen3").decode)
    (tmp_path / "tree.json").write_text(json.dumps(view))
    return {c["seq"]: c["path"] for c in view["calls"]}


def small_policy() -> torch.nn.Module:
    """A seeded two-layer Qwen3 over tiny-qwen3's vocabulary (the captured ids), in float64, with the
    tree attention the trainer sets on CPU: tiny-qwen3 itself costs ~3x the CPU time for the same check."""
    cfg = CONFIGS["qwen3"]()
    cfg.vocab_size, cfg.max_position_embeddings = len(load_tokenizer("tiny-qwen3")), 65536
    cfg._attn_implementation = TREE_ATTENTION
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float64).eval()


def assert_trains_exactly(tree) -> None:
    """PPO-GAE over the tree (the verifier's reward, a random value head): packed whole and split in
    two, loss and every gradient equal the sum over the tree's paths trained one at a time."""
    flat = tree.flatten()
    model = small_policy()
    head = ValueHead(model.config.hidden_size, dtype=torch.float64, init_std=0.1)
    budget = split_budget(flat, 0.3)
    values = values_by_position(model, head, pack(flat, budget, dtype=torch.float64), flat.n_positions)
    terms = gae_terms(flat, values, gamma=0.99, lam=0.9)
    linear = per_path_total(model, flat, terms, LOSS_CFG, value_head=head)
    for b in (None, budget):
        loss, n_packs, grads = packed_total(model, flat, terms, b, LOSS_CFG, value_head=head)
        assert b is None or n_packs > 1, "the split case must really split"
        assert_same((loss, grads), linear, 1e-6, f"Claude Code tree, budget={b}")
    assert any(k.startswith("extra0.") for k in linear[1]), "the value head must receive gradients"


@pytest.mark.harness
@pytest.mark.slow
def test_claude_code_sub_agent_is_a_branch_and_trains_exactly(tmp_path, backend):
    task, path, word = word_task(tmp_path)

    def reply(prompt: str) -> str:
        if HELPER_PROMPT in prompt:  # the sub-agent
            if assistant_turns(prompt) == 0:
                return tool_call("Write", {"file_path": path, "content": word})
            return "SUBDONE: the file is written."
        if assistant_turns(prompt) == 0:
            return tool_call(
                "Agent",
                {
                    "description": "write the file",
                    "prompt": f"Write {word} to {path}.",
                    "subagent_type": "helper",
                    "run_in_background": False,
                },
            )
        return "Done."

    agents = {"helper": {"description": "Writes files it is asked to write", "prompt": HELPER_PROMPT}}
    adapter = ClaudeCodeWith(
        [
            "--system-prompt",
            "You are a coding agent.",
            "--tools",
            "Agent,Write",
            "--agents",
            json.dumps(agents),
        ],
        {},
    )
    _, calls = capture(adapter, task, reply, tmp_path, backend)

    agent = [c for c in calls if "x-claude-code-agent-id" in {k.lower() for k in c.headers}]
    parent = [c for c in calls if c not in agent]
    assert [len(parent), len(agent)] == [2, 2], (
        f"parent: launch, end; sub-agent: write, report ({len(calls)})"
    )
    assert len({c.headers.get("x-claude-code-agent-id") for c in agent}) == 1, "one sub-agent"
    assert all(HELPER_PROMPT in json.dumps(c.request["system"]) for c in agent), "the sub-agent's own prompt"
    assert common_prefix(sequence(parent[0]), np.asarray(parent[1].prompt_ids)) == len(sequence(parent[0])), (
        "the parent's second call extends its first (the sub-agent's report is its tool result)"
    )
    assert "SUBDONE" in json.dumps(parent[1].request["messages"]), "the report came back to the parent"

    tree = tree_from_calls(calls, group_id="g", reward=1.0)
    stats = tree.stats()
    assert leaves(tree) == 2 and stats.n_paths == 2 and stats.branch_points == 1, stats
    assert stats.trainable_tokens == sum(len(c.output_ids) for c in calls), (
        "every generated token trained once"
    )
    paths = export_view(calls, tmp_path)
    k = branch_depth([paths[c.seq] for c in parent], [paths[c.seq] for c in agent])
    assert k == 1, f"they share only the system prompt's first line (the SDK's), then part: {k}"
    assert_trains_exactly(tree)


@pytest.mark.harness
@pytest.mark.slow
def test_claude_code_auto_compaction_is_a_branch_and_trains_exactly(tmp_path, backend):
    task, path, word = word_task(tmp_path)

    def reply(prompt: str) -> str:
        if "<summary>" in last_user(prompt):  # Claude Code asks for the summary
            return SUMMARY
        if CONTINUED in prompt:  # the conversation goes on from the summary
            return "Done."
        if assistant_turns(prompt) == 0:
            return tool_call("Write", {"file_path": path, "content": word})
        if assistant_turns(prompt) == 1:
            return tool_call("Write", {"file_path": f"{task.workdir}/notes.txt", "content": "written"})
        return "Done."

    # the adapter's own setting: compact at 80% of a 625-token context, 0.5% of the CLI's 100k window
    adapter = ClaudeCodeWith(["--system-prompt", "You are a coding agent.", "--tools", "Write"], {}, context_window=625)
    _, calls = capture(adapter, task, reply, tmp_path, backend)

    texts = [json.dumps(c.response) for c in calls]
    compaction = [c for c, t in zip(calls, texts, strict=True) if "SUMMARY:" in t]
    after = [c for c in calls if CONTINUED in json.dumps(c.request["messages"])]
    assert len(compaction) == 1 and len(after) == 1, f"one summary, one call after it: {len(calls)} calls"
    compaction, after = compaction[0], after[0]
    before = [c for c in calls if c.seq < compaction.seq]
    assert len(before) == 2 and after.seq > compaction.seq, [c.seq for c in calls]
    assert "SUMMARY:" in json.dumps(after.request["messages"]), "the summary opens the continued conversation"
    last = sequence(before[-1])
    assert common_prefix(last, np.asarray(after.prompt_ids)) < len(before[-1].prompt_ids), (
        "the call after compaction is no extension of the call before it"
    )
    assert common_prefix(last, np.asarray(compaction.prompt_ids)) < len(last), (
        "the summary request is a branch too: it drops the last turn, which is kept verbatim after it"
    )

    tree = tree_from_calls(calls, group_id="g", reward=1.0)
    stats = tree.stats()
    assert leaves(tree) == 3 and stats.n_paths == 3, stats
    assert stats.trainable_tokens == sum(len(c.output_ids) for c in calls), (
        "every generated token trained once"
    )
    paths = export_view(calls, tmp_path)
    branch_depth([paths[c.seq] for c in (*before, compaction)], [paths[after.seq]])
    assert_trains_exactly(tree)
