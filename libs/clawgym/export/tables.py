"""The exported tables' rows and schemas (docs/export.md): `calls` (one row per model call) and
`trees` (one row per node of each rollout's prefix tree, from `clawgym.trajectory.view`).

Owns the column names and types; not reading the store in bulk or writing files (`writers`).
Raw request/response/headers stay JSON text: their shape differs by protocol, and a column per
protocol field would be ragged and lossy.
"""

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from clawgym.records import Rollout, RolloutWithCalls
from clawgym.trajectory.view import rollout_view

# Where a call or node came from: the same leading columns in both tables, so they join on rollout_id.
_ROLLOUT_FIELDS = [
    pa.field("run_id", pa.string()),
    pa.field("group_id", pa.string()),
    pa.field("rollout_id", pa.string()),
]

CALLS_SCHEMA = pa.schema(
    [
        *_ROLLOUT_FIELDS,
        pa.field("task_id", pa.string()),
        pa.field("harness", pa.string()),
        pa.field("rollout_status", pa.string()),
        pa.field("reward", pa.float64()),  # null while unrewarded
        pa.field("passed", pa.bool_()),  # null while unverified
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
        pa.field("request_json", pa.string()),
        pa.field("response_json", pa.string()),
        pa.field("headers_json", pa.string()),
    ]
)

TREES_SCHEMA = pa.schema(
    [
        *_ROLLOUT_FIELDS,
        pa.field("reward", pa.float64()),
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
    ]
)

TREE_NODE_COLUMNS = [f.name for f in TREES_SCHEMA][4:]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _where(r: Rollout) -> dict[str, Any]:
    return {"run_id": r.run_id, "group_id": r.group_id, "rollout_id": r.id}


def call_rows(rollout: RolloutWithCalls) -> Iterator[dict[str, Any]]:
    """One row per call of the rollout, in seq order (plain Python values, CALLS_SCHEMA's columns)."""
    r = rollout.rollout
    for c in sorted(rollout.calls, key=lambda c: c.seq):
        yield {
            **_where(r),
            "task_id": r.task_id, "harness": r.harness, "rollout_status": r.status, "reward": r.reward,
            "passed": r.passed, "call_id": c.id, "seq": c.seq, "protocol": c.protocol,
            "policy_version": c.policy_version, "temperature": c.temperature, "finish_reason": c.finish_reason,
            "latency_s": c.latency_s, "created_at": c.created_at,
            "prompt_ids": np.asarray(c.prompt_ids).tolist(), "output_ids": np.asarray(c.output_ids).tolist(),
            "output_logprobs": np.asarray(c.output_logprobs).tolist(),
            "output_versions": np.asarray(c.output_versions).tolist(),
            "request_json": _json(c.request), "response_json": _json(c.response), "headers_json": _json(c.headers),
        }  # fmt: skip


def tree_rows(rollout: RolloutWithCalls) -> Iterator[dict[str, Any]]:
    """One row per node of the rollout's tree (none for a rollout without calls), TREES_SCHEMA's columns."""
    if not rollout.calls:
        return
    r = rollout.rollout
    for node in rollout_view(rollout.calls, r)["nodes"]:
        yield {**_where(r), "reward": r.reward, "node": node["id"], **{k: node[k] for k in TREE_NODE_COLUMNS[1:]}}
