"""The data model's plain records: what the store (in-process or gRPC client) returns and the trees read.

One vocabulary from proto to SQL to Python: run, rollout, call, group, checkpoint. Token arrays
are numpy arrays here (int32 ids, float32 logprobs), packed bytes in SQL and on the wire.
"""

from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROLLOUT_STATES = ("registered", "running", "finished", "failed", "cancelled")
ENDED_ROLLOUT_STATES = ("finished", "failed", "cancelled")
RUN_STATES = ("created", "running", "finished", "failed")
PROTOCOLS = ("anthropic_messages", "openai_chat", "openai_responses")
FINISH_REASONS = ("stop", "length", "abort")


@dataclass(frozen=True)
class Run:
    id: str
    name: str
    config: dict[str, Any]
    status: str
    created_at: float


@dataclass(frozen=True)
class RolloutSpec:
    """What the orchestrator registers: one rollout of a task through a harness, in a group."""

    group_id: str
    task_id: str
    harness: str
    policy_version_start: int = 0
    orchestrator_id: str = ""  # the orchestrator instance running it ("" = none, e.g. an ad-hoc session)


@dataclass(frozen=True)
class RegisteredRollout:
    rollout_id: str
    token: str  # the API key; only its hash is stored


@dataclass(frozen=True)
class Rollout:
    id: str
    run_id: str
    group_id: str
    task_id: str
    harness: str
    status: str
    reward: float | None
    passed: bool | None
    error: str
    policy_version_start: int
    sandbox: str
    timings: dict[str, float]
    created_at: float
    # where the reward came from, for hybrid tasks: {"code": .., "rubric": .., "weights": {..}, ..};
    # None for a code-only reward
    reward_breakdown: dict[str, Any] | None = None
    # a task outcome's why, kept for a person reading a failed rollout (tails; "" when not recorded):
    verifier_output: str = ""  # the verifier's verdict line and the tail of what it printed
    harness_stderr: str = ""  # the tail of what the harness wrote to stderr


@dataclass
class Call:
    """One model call of a rollout: the raw request/response and the exact tokens the engine saw."""

    rollout_id: str
    seq: int
    protocol: str
    request: dict[str, Any]
    response: dict[str, Any]
    prompt_ids: np.ndarray  # int32 (P,)
    output_ids: np.ndarray  # int32 (O,)
    output_logprobs: np.ndarray  # float32 (O,)
    output_versions: np.ndarray  # int32 (O,)
    policy_version: int
    finish_reason: str
    latency_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    id: str = ""  # assigned by the store
    created_at: float = 0.0  # assigned by the store
    # The sampling temperature the engine used (0 = greedy, whose logprobs are of temperature 1);
    # None: not recorded (older calls), the trainer assumes its configured one.
    temperature: float | None = None


TEACHER_KEY = "teacher"  # in a recorded response's `_clawgym` section: the teacher that served the call


def is_teacher(call: Call) -> bool:
    """Whether the proxy recorded `call` as served by a teacher (a truthy `_clawgym.teacher`, e.g. the
    teacher model's name): the proxy writes `_clawgym`, a harness cannot. A teacher's tokens carry no
    policy logprob (NaN): they are demonstrations, never on-policy samples."""
    meta = call.response.get("_clawgym") if isinstance(call.response, dict) else None
    return isinstance(meta, dict) and bool(meta.get(TEACHER_KEY))


@dataclass(frozen=True)
class RolloutWithCalls:
    rollout: Rollout
    calls: list[Call]


@dataclass(frozen=True)
class Group:
    """All rollouts of one (task, harness) group, with their calls in seq order: the trainer's unit."""

    id: str
    run_id: str
    rollouts: list[RolloutWithCalls]


@dataclass(frozen=True)
class Checkpoint:
    run_id: str
    version: int
    step: int
    uri: str
    metrics: dict[str, Any]
    created_at: float = 0.0
    # the groups this checkpoint's step consumed (trained on or dropped as stale): the store marks
    # them consumed in the transaction that registers the checkpoint (the step's commit point)
    group_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class EvalRecord:
    """One recorded evaluation of a run: policy `version` on `suite` through `harness`; `metrics` is
    what `HarnessEval.metrics` wrote (pass@k, intervals, per-task counts)."""

    run_id: str
    version: int
    suite: str
    harness: str
    metrics: dict[str, Any]


@dataclass(frozen=True)
class GroupReady:
    """A bus notification that every rollout of a group has ended."""

    group_id: str
    run_id: str
    message_id: str = ""


@dataclass(frozen=True)
class Judgment:
    """An LLM judge's scoring of one rollout's rubric, recorded beside the rollout.

    `score` is None when the judge failed (`error` says how: unreachable, timed out, an HTTP
    error, or an answer that could not be parsed); the raw answer is kept whatever happened.
    """

    rollout_id: str
    model: str
    base_url: str
    prompt: list[dict[str, Any]]  # the chat messages sent
    raw_answer: str
    score: float | None  # the rubric's score in [0, 1]
    rule_scores: dict[str, float]
    error: str
    latency_s: float
    attempts: int = 1
    code_score: float | None = None  # the code checks' reward it is combined with
    id: str = ""  # assigned by the store
    created_at: float = 0.0  # assigned by the store


@dataclass(frozen=True)
class GroupSummary:
    """A group without its calls: what a listing of a run's groups shows (the browser, the exporter)."""

    id: str
    run_id: str
    size: int  # rollouts registered in the group
    ended: int  # of them ended
    ready_at: float | None  # when the last one ended (None while the group is open)
    consumed_version: int | None  # the checkpoint whose step consumed it (None: not yet)
    created_at: float


@dataclass(frozen=True)
class TrainStep:
    """The metrics one optimizer step recorded."""

    run_id: str
    step: int
    metrics: dict[str, Any]
    created_at: float
