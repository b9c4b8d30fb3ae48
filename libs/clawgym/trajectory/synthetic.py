"""Synthetic rollouts shaped like harness traces, as store records: for benchmarks and tests only.

Owns a seeded generator of `Group` records whose token structure mimics what the proxy captures
from a harness: one long system prompt + tool definitions shared by every rollout, a task prompt
shared by the G samples of a group, 10-30 calls per rollout with a growing history (tool results
as context, assistant turns generated), and a few branches: a *compaction* (the history is
replaced by a summary the policy generated) and *sub-agents* (a separate history under their own
system prompt). Outputs often open with the same few tokens (a tool-call header), so samples of a
group share generated tokens at identical positions, as real ones do. No text, only ids.
"""

from dataclasses import dataclass

import numpy as np

from clawgym.records import Call, Group, Rollout, RolloutWithCalls


@dataclass(frozen=True)
class TraceShape:
    """Sizes of the synthetic traces (token counts are means of small random ranges)."""

    n_groups: int = 1
    group_size: int = 8  # G samples per task
    calls: tuple[int, int] = (10, 30)  # calls per rollout, inclusive range
    system_tokens: int = 2000  # harness system prompt + tools, shared by the whole batch
    task_tokens: int = 200  # task prompt, shared by a group
    observation_tokens: int = 60  # tool result per call (context)
    output_tokens: int = 40  # generated per call
    header_tokens: int = 6  # common opening of outputs (tool-call header)
    p_header: float = 0.7  # probability an output opens with the common header
    p_compaction: float = 0.05  # per call: the harness compacts the history
    p_subagent: float = 0.05  # per call: a sub-agent runs 1-3 calls under its own system prompt
    subagent_system_tokens: int = 300
    vocab_size: int = 32000
    versions: tuple[int, ...] = (0,)  # policy versions rollouts are drawn from
    temperatures: tuple[float | None, ...] = (None,)  # sampling temperatures calls are drawn from
    logprob_mean: float = -1.5
    logprob_std: float = 0.5


def synthetic_groups(shape: TraceShape, seed: int = 0) -> list[Group]:
    """`shape.n_groups` groups of `shape.group_size` rewarded rollouts with their calls."""
    rng = np.random.default_rng(seed)
    V = shape.vocab_size

    def tokens(n: int) -> np.ndarray:
        return rng.integers(1, V, size=max(int(n), 1), dtype=np.int32)

    def around(n: int) -> int:
        return max(1, int(rng.integers(max(1, n // 2), n + n // 2 + 1)))

    system, sub_system, header = (
        tokens(shape.system_tokens),
        tokens(shape.subagent_system_tokens),
        tokens(shape.header_tokens),
    )
    groups = []
    for g in range(shape.n_groups):
        task = tokens(shape.task_tokens)
        rollouts = []
        for i in range(shape.group_size):
            rid = f"g{g}-r{i}"
            version = int(rng.choice(shape.versions))
            calls: list[Call] = []

            def call(
                prompt: np.ndarray, rid: str = rid, calls: list[Call] = calls, version: int = version
            ) -> np.ndarray:
                n = around(shape.output_tokens)
                out = tokens(n)
                if rng.random() < shape.p_header:
                    out = np.concatenate([header, out])
                lp = _logprobs(prompt, out, version, shape)
                temps = shape.temperatures
                temperature = temps[int(rng.integers(len(temps)))] if len(temps) > 1 else temps[0]
                calls.append(_call(rid, len(calls), prompt, out, lp, version, temperature))
                return out

            history = np.concatenate([system, task])
            for k in range(int(rng.integers(shape.calls[0], shape.calls[1] + 1))):
                prompt = (
                    history if k == 0 else np.concatenate([history, tokens(around(shape.observation_tokens))])
                )
                history = np.concatenate([prompt, call(prompt)])
                if rng.random() < shape.p_compaction:
                    summary = call(np.concatenate([history, tokens(8)]))  # "summarise the conversation"
                    history = np.concatenate([system, tokens(4), summary, tokens(4)])
                if rng.random() < shape.p_subagent:
                    sub = np.concatenate([sub_system, tokens(around(shape.task_tokens // 2))])
                    for _ in range(int(rng.integers(1, 4))):
                        sub = np.concatenate([sub, call(sub), tokens(around(shape.observation_tokens))])
                    history = np.concatenate([history, tokens(around(shape.observation_tokens))])
            reward = float(rng.random() < 0.5)
            rollout = Rollout(
                id=rid, run_id="synthetic", group_id=f"g{g}", task_id=f"task-{g}", harness="synthetic",
                status="finished", reward=reward, passed=reward > 0, error="", policy_version_start=version,
                sandbox="", timings={}, created_at=0.0,
            )  # fmt: skip
            rollouts.append(RolloutWithCalls(rollout=rollout, calls=calls))
        groups.append(Group(id=f"g{g}", run_id="synthetic", rollouts=rollouts))
    return groups


def _logprobs(prompt: np.ndarray, out: np.ndarray, version: int, shape: TraceShape) -> np.ndarray:
    """Engine logprobs that depend only on (prefix length, token, previous token, version): the same
    generation at the same position under the same policy gets the same logprob, as a
    deterministic engine would give it."""
    prev = np.concatenate([prompt[-1:], out[:-1]]).astype(np.int64)
    where = np.arange(len(prompt), len(prompt) + len(out), dtype=np.int64)
    h = (
        where * 1_000_003 + out.astype(np.int64) * 7_919 + prev * 104_729 + version * 15_485_863
    ) % 2_147_483_647
    u = ((h * 48_271) % 2_147_483_647) / 2_147_483_647.0  # uniform in [0, 1)
    return np.minimum(shape.logprob_mean + shape.logprob_std * (2.0 * u - 1.0) * 1.7, -1e-3).astype(
        np.float32
    )


def _call(
    rid: str, seq: int, prompt: np.ndarray, out: np.ndarray, lp: np.ndarray, version: int,
    temperature: float | None = None,
) -> Call:
    return Call(
        rollout_id=rid, seq=seq, protocol="openai_chat", request={}, response={},
        prompt_ids=prompt.astype(np.int32), output_ids=out.astype(np.int32), output_logprobs=lp,
        output_versions=np.full(len(out), version, np.int32), policy_version=version, finish_reason="stop",
        temperature=temperature,
    )  # fmt: skip
