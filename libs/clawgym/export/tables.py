"""The exported tables' rows and schemas (docs/export.md): `calls` (one row per model call) and
`trees` (one row per node of each rollout's prefix tree, from `clawgym.trajectory.view`).

Owns the column names and types; not reading the store in bulk or writing files (`writers`), nor
where a rollout's train step and advantage come from (`advantages`: they arrive as `Annotations`).
Raw request/response/headers stay JSON text: their shape differs by protocol, and a column per
protocol field would be ragged and lossy. Decoded text is for reading: training uses the ids.
"""

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from clawgym.records import Rollout, RolloutWithCalls
from clawgym.trajectory.view import Decode, rollout_view

# Where a call or node came from: the same leading columns in both tables, so they join on rollout_id.
_ROLLOUT_FIELDS = [
    pa.field("run_id", pa.string()),
    pa.field("group_id", pa.string()),
    pa.field("rollout_id", pa.string()),
]
# What training made of the rollout (both tables): null where its group was not trained.
_TRAINING_FIELDS = [
    pa.field("step", pa.int64()),  # the train step that consumed its group; null: not consumed yet
    pa.field("advantage", pa.float64()),  # its advantage in that step (`advantages`); null: none
]

CALLS_SCHEMA = pa.schema(
    [
        *_ROLLOUT_FIELDS,
        pa.field("task_id", pa.string()),
        pa.field("harness", pa.string()),
        pa.field("rollout_status", pa.string()),
        pa.field("reward", pa.float64()),  # null while unrewarded
        pa.field("passed", pa.bool_()),  # null while unverified
        *_TRAINING_FIELDS,
        pa.field("call_id", pa.string()),
        pa.field("seq", pa.int32()),
        pa.field("protocol", pa.string()),
        pa.field("policy_version", pa.int64()),
        pa.field("temperature", pa.float64()),  # null: not recorded (older calls); 0 = greedy
        pa.field("finish_reason", pa.string()),
        pa.field("latency_s", pa.float64()),
        pa.field("created_at", pa.float64()),
        pa.field("prompt_ids", pa.list_(pa.int32())),
        pa.field("output_ids", pa.list_(pa.int32())),
        pa.field("output_logprobs", pa.list_(pa.float32())),
        pa.field("output_versions", pa.list_(pa.int32())),
        pa.field("prompt_text", pa.string()),  # the ids decoded by the policy's tokenizer; null: none given
        pa.field("output_text", pa.string()),
        pa.field("request_json", pa.string()),
        pa.field("response_json", pa.string()),
        pa.field("headers_json", pa.string()),
    ]
)

TREES_SCHEMA = pa.schema(
    [
        *_ROLLOUT_FIELDS,
        pa.field("reward", pa.float64()),
        *_TRAINING_FIELDS,
        pa.field("node", pa.int32()),  # pre-order index within the rollout's tree
        pa.field("parent", pa.int32()),  # -1: a child of the root
        pa.field("depth", pa.int32()),  # tokens above the node
        pa.field("token_ids", pa.list_(pa.int32())),
        pa.field("generated", pa.list_(pa.bool_())),
        pa.field("gen_call", pa.list_(pa.int32())),  # seq of the call that generated each token; null: context
        pa.field("logprobs", pa.list_(pa.float32())),  # null where not generated
        pa.field("versions", pa.list_(pa.int32())),
        pa.field("temperatures", pa.list_(pa.float64())),
        pa.field("calls", pa.list_(pa.int32())),  # seqs of the calls passing through
        pa.field("ends", pa.list_(pa.int32())),  # seqs of the calls whose sequence ends here
        pa.field("text", pa.string()),  # the node's tokens decoded together; null: no tokenizer given
    ]
)

# the columns `rollout_view` gives each node under the same name
TREE_NODE_COLUMNS = ["parent", "depth", "token_ids", "generated", "gen_call", "logprobs", "versions",
                     "temperatures", "calls", "ends"]  # fmt: skip


@dataclass(frozen=True)
class Annotations:
    """What a rollout's rows carry beyond the store's record of it: its group's train step, its
    advantage there (`advantages`), and the tokenizer's decode for the text columns (None: null)."""

    step: int | None = None
    advantage: float | None = None
    decode: Decode | None = None

    def text(self, ids: Sequence[int]) -> str | None:
        return None if self.decode is None else self.decode([int(t) for t in ids])


def _logprobs(logprobs: np.ndarray) -> list[float | None]:
    """Logprobs as a list, null where none was recorded (a teacher's tokens: NaN in the store)."""
    arr = np.asarray(logprobs)
    if np.isfinite(arr).all():
        return arr.tolist()
    return [x if math.isfinite(x) else None for x in arr.tolist()]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _where(r: Rollout) -> dict[str, Any]:
    return {"run_id": r.run_id, "group_id": r.group_id, "rollout_id": r.id}


def call_rows(rollout: RolloutWithCalls, notes: Annotations = Annotations()) -> Iterator[dict[str, Any]]:
    """One row per call of the rollout, in seq order (plain Python values, CALLS_SCHEMA's columns)."""
    r = rollout.rollout
    for c in sorted(rollout.calls, key=lambda c: c.seq):
        yield {
            **_where(r),
            "task_id": r.task_id, "harness": r.harness, "rollout_status": r.status, "reward": r.reward,
            "passed": r.passed, "step": notes.step, "advantage": notes.advantage,
            "call_id": c.id, "seq": c.seq, "protocol": c.protocol,
            "policy_version": c.policy_version, "temperature": c.temperature, "finish_reason": c.finish_reason,
            "latency_s": c.latency_s, "created_at": c.created_at,
            "prompt_ids": np.asarray(c.prompt_ids).tolist(), "output_ids": np.asarray(c.output_ids).tolist(),
            "output_logprobs": _logprobs(c.output_logprobs),
            "output_versions": np.asarray(c.output_versions).tolist(),
            "prompt_text": notes.text(c.prompt_ids), "output_text": notes.text(c.output_ids),
            "request_json": _json(c.request), "response_json": _json(c.response), "headers_json": _json(c.headers),
        }  # fmt: skip


def tree_rows(rollout: RolloutWithCalls, notes: Annotations = Annotations()) -> Iterator[dict[str, Any]]:
    """One row per node of the rollout's tree (none for a rollout without calls), TREES_SCHEMA's columns."""
    if not rollout.calls:
        return
    r = rollout.rollout
    for node in rollout_view(rollout.calls, r)["nodes"]:
        yield {
            **_where(r), "reward": r.reward, "step": notes.step, "advantage": notes.advantage, "node": node["id"],
            **{k: node[k] for k in TREE_NODE_COLUMNS}, "text": notes.text(node["token_ids"]),
        }  # fmt: skip
