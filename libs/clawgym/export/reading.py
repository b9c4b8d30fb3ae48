"""An export folder read back as the store's records: its `calls` table as `Group`s of rollouts with
their calls, so that what a store run gives the trainer an export of it gives too.

Owns the mapping from `calls` rows (`tables.CALLS_SCHEMA`) to `records`; not the files' formats
(`writers.read_export`). The `trees` table is not needed: trees are rebuilt from the calls' exact
ids (`prompt_ids + output_ids`), as the trainer builds them from the store. What a row does not
carry (a rollout's error, sandbox, timings) is left empty; the rest comes back as recorded.
"""

import json
from pathlib import Path

import numpy as np

from clawgym.errors import InvalidArgument
from clawgym.export.writers import MANIFEST, read_export
from clawgym.records import Call, Group, Rollout, RolloutWithCalls


def is_export(folder: Path) -> bool:
    """Whether `folder` is an export folder (its run.json has an `export_version`)."""
    try:
        return "export_version" in json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError, TypeError):
        return False


def export_run_id(folder: Path) -> str:
    """The id of the run an export folder holds."""
    return str(json.loads((folder / MANIFEST).read_text())["run"]["id"])


def export_groups(folder: Path) -> list[Group]:
    """The groups of an export folder, in the order written, each rollout's calls in seq order."""
    if not is_export(folder):
        raise InvalidArgument(f"{folder} is not an export folder (no {MANIFEST} with an export_version)")
    groups: dict[str, dict[str, RolloutWithCalls]] = {}
    run_of: dict[str, str] = {}
    for row in read_export(folder, ("calls",))["calls"]:
        rollouts = groups.setdefault(row["group_id"], {})
        run_of[row["group_id"]] = row["run_id"]
        if row["rollout_id"] not in rollouts:
            rollouts[row["rollout_id"]] = RolloutWithCalls(_rollout(row), [])
        rollouts[row["rollout_id"]].calls.append(_call(row))
    return [
        Group(
            id=group_id,
            run_id=run_of[group_id],
            rollouts=[
                RolloutWithCalls(r.rollout, sorted(r.calls, key=lambda c: c.seq)) for r in rollouts.values()
            ],
        )
        for group_id, rollouts in groups.items()
    ]


def _rollout(row: dict) -> Rollout:
    return Rollout(
        id=row["rollout_id"], run_id=row["run_id"], group_id=row["group_id"], task_id=row["task_id"],
        harness=row["harness"], status=row["rollout_status"], reward=row["reward"], passed=row["passed"],
        error="", policy_version_start=0, sandbox="", timings={}, created_at=0.0,
    )  # fmt: skip


def _call(row: dict) -> Call:
    return Call(
        rollout_id=row["rollout_id"],
        seq=int(row["seq"]),
        protocol=row["protocol"],
        request=json.loads(row["request_json"]),
        response=json.loads(row["response_json"]),
        prompt_ids=np.asarray(row["prompt_ids"], np.int32),
        output_ids=np.asarray(row["output_ids"], np.int32),
        output_logprobs=np.asarray(row["output_logprobs"], np.float32),
        output_versions=np.asarray(row["output_versions"], np.int32),
        policy_version=int(row["policy_version"]),
        finish_reason=row["finish_reason"],
        latency_s=float(row["latency_s"]),
        headers=json.loads(row["headers_json"]),
        id=row["call_id"],
        created_at=float(row["created_at"]),
        temperature=row["temperature"],
    )
