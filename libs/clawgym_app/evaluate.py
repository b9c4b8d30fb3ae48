"""What `clawgym eval` does: choose the policy version, the tasks and harnesses, run, record.

Owns resolving `--checkpoint` (a version of the config's run, or a folder/URI) and the run the
results are recorded against: the config's training run when the store knows it (so reports show
them beside its steps), else a run of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
from rich.console import Console

from clawgym.config import ClawgymConfig
from clawgym.errors import InvalidArgument, NotFound
from clawgym.evaluation.runner import EvalResult, EvalSpec
from clawgym.store.interface import TrajectoryStore
from clawgym.trainer.checkpoint import run_folder
from clawgym_app.logs import quiet_libraries
from clawgym_app.progress import RolloutBar, make_progress
from clawgym_app.runtime import Runtime
from clawgym_app.training_run import eval_spec

DEFAULT_MODEL = "smollm2-135m"


@dataclass(frozen=True)
class EvalRequest:
    """The command line's choices; empty/negative values defer to the config's `evaluation` section."""

    checkpoint: str = ""
    harnesses: list[str] = field(default_factory=list)
    k: int = 1
    samples: int = 0
    tasks: int = -1
    suite: str = ""
    split: str = ""
    model: str = ""


def configure(cfg: ClawgymConfig, req: EvalRequest) -> tuple[ClawgymConfig, EvalSpec]:
    """The config to open (the model filled in, the request's choices in its `evaluation` section)
    and the evaluation to run."""
    if req.k < 1:
        raise InvalidArgument(f"--k must be >= 1, got {req.k}")
    e = cfg.evaluation
    samples = req.samples or max(req.k, e.samples)
    update: dict = {"samples": samples, "ks": sorted({1, req.k, *(kk for kk in e.ks if kk <= samples)})}
    update |= {name: getattr(req, name) for name in ("suite", "split", "harnesses") if getattr(req, name)}
    if req.tasks >= 0:
        update["tasks"] = req.tasks
    if req.tasks >= 0 or req.split or req.suite:
        update["task_ids"] = []  # a new choice of tasks replaces the config's own list
    model = req.model or cfg.trainer.model or DEFAULT_MODEL
    cfg = cfg.model_copy(
        update={
            "trainer": cfg.trainer.model_copy(update={"model": model}),
            "evaluation": e.model_copy(update=update),
        }
    )
    return cfg, eval_spec(cfg)


def known_run(store: TrajectoryStore, cfg: ClawgymConfig) -> str:
    """The config's training run id if the store knows it (trainer.run_id or run.json), else ''."""
    run_id = cfg.trainer.run_id
    if not run_id:
        fs, folder = fsspec.core.url_to_fs(run_folder(cfg.trainer))
        if fs.exists(f"{folder}/run.json"):
            run_id = json.loads(fs.cat_file(f"{folder}/run.json"))["run_id"]
    if not run_id:
        return ""
    try:
        return store.get_run(run_id).id
    except NotFound:
        return ""


def checkpoint_uri(store: TrajectoryStore, run_id: str, checkpoint: str) -> tuple[int, str]:
    """(version, uri) of `--checkpoint`: a version number of the run, or a folder/URI (version 0 unless vN)."""
    if checkpoint.isdigit():
        if not run_id:
            raise NotFound(
                "--checkpoint V needs the config's run in the store (trainer.run_id or its run.json)"
            )
        version = int(checkpoint)
        for c in store.list_checkpoints(run_id):
            if c.version == version:
                return version, c.uri
        raise NotFound(f"run {run_id} has no checkpoint v{version}")
    name = Path(checkpoint.rstrip("/")).name
    return (int(name[1:]) if name[:1] == "v" and name[1:].isdigit() else 0), checkpoint


def run_eval(cfg: ClawgymConfig, req: EvalRequest, console: Console) -> tuple[EvalResult, str]:
    """Opens the runtime, serves the requested checkpoint, evaluates, records; returns (result, run id)."""
    quiet_libraries()
    cfg, spec = configure(cfg, req)
    with console.status("starting the runtime (store, engine, proxy, orchestrator)"):
        runtime = Runtime.open(cfg)
    with runtime:
        run_id = known_run(runtime.store, cfg)
        version = runtime.served_version()
        if req.checkpoint:
            version, uri = checkpoint_uri(runtime.store, run_id, req.checkpoint)
            with console.status(f"loading checkpoint v{version} into the engine"):
                runtime.load_checkpoint(version, uri)
        if not run_id:
            run_id = runtime.store.create_run("eval", {"kind": "eval", "model": cfg.trainer.model}).id
        total = len(spec.task_ids) * len(spec.harnesses) * spec.samples
        with make_progress(console) as progress:
            bar = RolloutBar(progress, f"eval v{version} ({', '.join(spec.harnesses)})", total)
            result = runtime.evaluate(spec, version=version, record_run_id=run_id, on_status=bar)
    return result, run_id
