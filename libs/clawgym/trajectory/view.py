"""One rollout's prefix tree as plain JSON data: what the rollout browser draws and `clawgym export` writes.

Owns the view's shape (below) and how it is derived from a rollout's calls; not I/O (the store,
HTTP and files are the callers'), not the tree rules (`radix`, `builder`), not HTML.

The view of a rollout with calls c_0 … c_n (seq order):

- `nodes`: the tree's nodes in pre-order (`RadixTree.nodes`), each
  `{id, parent (-1: a child of the root), depth (tokens above it), token_ids, generated (bool per
  token), gen_call (the seq of the call that generated each token, or None), logprobs, versions,
  temperatures (per token, None where not generated), calls (seqs passing through), ends (seqs
  whose sequence ends here), children (ids), spans, text (per token, given `decode`)}`.
- `spans`: a node's tokens cut into runs `{start, end, kind, call}`: kind "generated" (by call
  `call`), "shared" (context that two or more calls passed through: the reused prefix) or "prompt"
  (context of one call only).
- `calls`: per call its metadata (seq, protocol, policy_version, temperature, finish_reason,
  latency_s, n_prompt, n_output, created_at, request, response, headers, output_logprobs,
  output_versions) and `path`, the node ids its prompt + output runs along.
- `rollout`: the rollout record's fields when given, and `stats`: the tree's `TreeStats`.

A token is attributed to the first call (in seq order) whose output holds it: the tree's rule 1
(generated wins over context; a retried identical generation keeps the first call's logprob).
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from clawgym.records import Call, Rollout
from clawgym.trajectory.builder import tree_from_calls
from clawgym.trajectory.radix import Node, RadixTree

Decode = Callable[[Sequence[int]], str]

SPAN_KINDS = ("generated", "shared", "prompt")


def rollout_view(calls: Sequence[Call], rollout: Rollout | None = None, decode: Decode | None = None) -> dict:
    """The JSON view of one rollout's calls (at least one, all of one rollout); see the module docstring."""
    ordered = sorted(calls, key=lambda c: c.seq)
    tree = tree_from_calls(
        ordered,
        group_id=rollout.group_id if rollout else "",
        reward=rollout.reward if rollout else None,
    )
    ids = {id(node): i for i, node in enumerate(tree.nodes())}
    nodes = list(tree.nodes())
    paths = [_path(tree, c) for c in ordered]

    through: list[list[int]] = [[] for _ in nodes]
    gen_call: list[list[int | None]] = [[None] * len(n) for n in nodes]
    for call, path in zip(ordered, paths, strict=True):
        start = len(call.prompt_ids)  # the call's first generated position along its path
        for node in path:
            i = ids[id(node)]
            through[i].append(call.seq)
            depth = _depth(node)
            for k in range(max(start - depth, 0), len(node)):
                if gen_call[i][k] is None:
                    gen_call[i][k] = call.seq
    by_seq = {c.seq: c for c in ordered}

    out_nodes = []
    for i, node in enumerate(nodes):
        depth = _depth(node)
        logprobs: list[float | None] = []
        versions: list[int | None] = []
        temperatures: list[float | None] = []
        for k, seq in enumerate(gen_call[i]):
            call = by_seq.get(seq) if seq is not None else None
            if call is None:
                logprobs.append(None)
                versions.append(None)
                temperatures.append(None)
                continue
            j = depth + k - len(call.prompt_ids)  # the token's index in the call's output
            logprobs.append(_finite(call.output_logprobs[j]))
            versions.append(int(call.output_versions[j]) if len(call.output_versions) else call.policy_version)
            temperatures.append(call.temperature)
        token_ids = [int(t) for t in node.tokens]
        view: dict[str, Any] = {
            "id": i,
            "parent": ids.get(id(node.parent), -1),
            "depth": depth,
            "token_ids": token_ids,
            "generated": [s is not None for s in gen_call[i]],
            "gen_call": gen_call[i],
            "logprobs": logprobs,
            "versions": versions,
            "temperatures": temperatures,
            "calls": through[i],
            "ends": [c.seq for c, p in zip(ordered, paths, strict=True) if p[-1] is node],
            "children": [ids[id(c)] for c in node.children.values()],
            "spans": _spans(gen_call[i], shared=len(through[i]) > 1),
        }
        if decode is not None:
            view["text"] = [decode([t]) for t in token_ids]
        out_nodes.append(view)

    return {
        "rollout": _rollout_fields(rollout) if rollout else {"id": ordered[0].rollout_id},
        "stats": {**asdict(tree.stats()), "sharing_ratio": tree.stats().sharing_ratio},
        "nodes": out_nodes,
        "calls": [_call_fields(c, [ids[id(n)] for n in p]) for c, p in zip(ordered, paths, strict=True)],
    }


# --- internals ---


def _path(tree: RadixTree, call: Call) -> list[Node]:
    """The nodes `prompt_ids + output_ids` runs along; it ends at a node's end (the tree split there)."""
    seq = np.concatenate([np.asarray(call.prompt_ids), np.asarray(call.output_ids)]).astype(np.int32)
    node, pos, path = tree.root, 0, []
    while pos < len(seq):
        node = node.children[int(seq[pos])]
        pos += len(node)
        path.append(node)
    assert pos == len(seq), "a sequence inserted into the tree ends at a node's end"
    return path


def _depth(node: Node) -> int:
    depth, up = 0, node.parent
    while up is not None:
        depth += len(up)
        up = up.parent
    return depth


def _spans(gen_call: list[int | None], shared: bool) -> list[dict]:
    """Runs of tokens with the same kind and generating call."""
    context = "shared" if shared else "prompt"
    spans: list[dict] = []
    for k, seq in enumerate(gen_call):
        kind = context if seq is None else "generated"
        if spans and spans[-1]["kind"] == kind and spans[-1]["call"] == seq:
            spans[-1]["end"] = k + 1
        else:
            spans.append({"start": k, "end": k + 1, "kind": kind, "call": seq})
    return spans


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _rollout_fields(r: Rollout) -> dict:
    return {
        "id": r.id, "run_id": r.run_id, "group_id": r.group_id, "task_id": r.task_id, "harness": r.harness,
        "status": r.status, "reward": r.reward, "passed": r.passed, "error": r.error,
        "policy_version_start": r.policy_version_start, "created_at": r.created_at,
    }  # fmt: skip


def _call_fields(c: Call, path: list[int]) -> dict:
    return {
        "seq": c.seq,
        "id": c.id,
        "protocol": c.protocol,
        "policy_version": c.policy_version,
        "temperature": c.temperature,
        "finish_reason": c.finish_reason,
        "latency_s": c.latency_s,
        "n_prompt": len(c.prompt_ids),
        "n_output": len(c.output_ids),
        "created_at": c.created_at,
        "request": c.request,
        "response": c.response,
        "headers": c.headers,
        "output_logprobs": [_finite(x) for x in np.asarray(c.output_logprobs).tolist()],
        "output_versions": [int(v) for v in np.asarray(c.output_versions).tolist()],
        "path": path,
    }
