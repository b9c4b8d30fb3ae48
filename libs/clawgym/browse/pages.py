"""What the rollout browser shows, as JSON: the runs (evaluation runs under the run they evaluated),
one run (its steps as a table, checkpoints, evaluation runs, groups with their rollouts), one
rollout's tree (`clawgym.trajectory.view`) with its verifier output and harness stderr, read
through any `TrajectoryStore`.

Owns choosing and shaping the fields a page shows; not HTTP (`clawgym.browse.app` serves
these with the static page in `static/`), not the tree view's shape. Agent output is untrusted: the
values stay data here, and the page only ever puts them into the DOM as text.
"""

from collections.abc import Callable, Sequence
from dataclasses import asdict
from importlib import resources
from importlib.abc import Traversable
from typing import Any

from clawgym.errors import NotFound
from clawgym.records import EvalRecord, Run, TrainStep
from clawgym.store.interface import TrajectoryStore
from clawgym.trajectory.view import Decode, rollout_view

# A run → the function that turns its token ids into text (None: the page shows ids).
DecoderFor = Callable[[Run], Decode | None]

STATIC = resources.files(__package__) / "static"


def static_file(name: str) -> Traversable:
    """One of the page's files (index.html, browse.js, browse.css); NotFound for any other name."""
    if name not in {"index.html", "browse.js", "browse.css"}:
        raise NotFound(f"no static file {name!r}")
    return STATIC / name


def runs_page(store: TrajectoryStore) -> dict[str, Any]:
    """Every run, the newest first; an evaluation run names the run it evaluated (`of_run`)."""
    return {"runs": [_run(r) for r in store.list_runs()]}


def run_page(store: TrajectoryStore, run_id: str) -> dict[str, Any]:
    """The run, its train steps (a column per scalar metric), checkpoints, the evaluation runs of it,
    and its groups each with its rollouts."""
    run = store.get_run(run_id)
    rollouts: dict[str, list[dict]] = {}
    for r in store.list_rollouts(run_id):
        rollouts.setdefault(r.group_id, []).append(
            {k: getattr(r, k) for k in ("id", "task_id", "harness", "status", "reward", "passed", "error")}
            | {"verifier": r.verifier_output.strip().split("\n", 1)[0]}  # its verdict line, as a summary
        )
    checkpoints = store.list_checkpoints(run_id)
    step_of = {c.version: c.step for c in checkpoints}
    steps = store.list_train_steps(run_id)
    return {
        "run": _run(run),
        "step_columns": step_columns(steps),
        "steps": [{"step": s.step, "metrics": s.metrics, "created_at": s.created_at} for s in steps],
        "evaluations": evaluations_of(store, run),
        "checkpoints": [{"version": c.version, "step": c.step, "uri": c.uri, "groups": len(c.group_ids)} for c in checkpoints],
        "groups": [
            {**asdict(g), "consumed_by_step": step_of.get(g.consumed_version), "rollouts": rollouts.get(g.id, [])}
            for g in store.list_groups(run_id)
        ],
    }  # fmt: skip


def rollout_page(store: TrajectoryStore, rollout_id: str, decoder_for: DecoderFor | None = None) -> dict[str, Any]:
    """The rollout's tree view with token text when a decoder is known; `tree` is None without calls."""
    rollout = store.get_rollout(rollout_id)
    calls = store.list_calls(rollout_id)
    decode = decoder_for(store.get_run(rollout.run_id)) if decoder_for else None
    if not calls:
        return {"rollout": asdict(rollout), "tree": None}
    return {"rollout": asdict(rollout), "tree": rollout_view(calls, rollout, decode)}


def step_columns(steps: Sequence[TrainStep]) -> list[str]:
    """The metrics a step table shows: every scalar one, in the order the trainer recorded them
    (`version` is the step itself; lists such as trained_groups stay in the step's JSON)."""
    columns: dict[str, None] = {}
    for s in steps:
        for key, value in s.metrics.items():
            if key != "version" and isinstance(value, int | float) and not isinstance(value, bool):
                columns[key] = None
    return list(columns)


def evaluations_of(store: TrajectoryStore, run: Run) -> list[dict[str, Any]]:
    """The evaluation runs of `run` (their config's `of_run`), oldest first, each with its Pass@1 per
    harness: recorded on the evaluation run itself (`clawgym eval`) or on `run` naming it (the
    run's own evaluations)."""
    evals = [r for r in reversed(store.list_runs()) if _of_run(r) == run.id]
    if not evals:
        return []
    recorded = store.list_evals(run.id)
    out = []
    for e in evals:
        records = [x for x in recorded if x.metrics.get("eval_run") == e.id] or store.list_evals(e.id)
        out.append({**_run(e), "version": e.config.get("version"), "suite": e.config.get("suite"),
                    "pass_at_1": _pass_at_1(records)})  # fmt: skip
    return out


def _pass_at_1(records: Sequence[EvalRecord]) -> dict[str, float | None]:
    return {r.harness: r.metrics.get("pass@1") for r in records}


def _of_run(r: Run) -> str | None:
    of = r.config.get("of_run") if r.config.get("kind") == "eval" else None
    return of if isinstance(of, str) and of else None


def _run(r: Run) -> dict[str, Any]:
    return {"id": r.id, "name": r.name, "status": r.status, "created_at": r.created_at, "config": r.config,
            "of_run": _of_run(r)}  # fmt: skip
