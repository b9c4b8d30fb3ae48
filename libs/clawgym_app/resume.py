"""Continuing an interrupted `clawgym train`: which run a config names, what it did, whether to go on.

A run's identity lives in its checkpoint folder: `<trainer.checkpoint_uri>/<trainer.run_name>/run.json`
records the store run id (`clawgym.trainer.checkpoint.resolve_run` writes it when the run is
created), unless `trainer.run_id` names the run outright. What the run did lives in the store: its
registered checkpoints (the steps, each with the groups it consumed) and its recorded evaluations.
So a second `clawgym train` of the same config is the same run, and must say whether it means to
continue it (`--resume`) rather than silently resuming and evaluating the initial policy again.
The run named must also be this config's run: its store record (the trainer config it was created
with) has the same `RUN_IDENTITY`, and, when found through run.json, the config's run name.

Not here: resuming itself (the trainer restores the newest registered checkpoint and owes only
unconsumed groups, `clawgym.trainer.loop`), nor what a run does in which order (`training_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clawgym.errors import FailedPrecondition, NotFound
from clawgym.records import EvalRecord, Run
from clawgym.store.interface import TrajectoryStore
from clawgym.trainer.checkpoint import RUN_MARKER, recorded_run_id, run_folder
from clawgym.trainer.config import TrainerConfig

# What a run's checkpoints are made of: resuming under other values would load its weights into
# another model or dtype, its adapters into another shape, or one algorithm's state into another's.
RUN_IDENTITY = (
    "model",
    "dtype",
    "algorithm.name",
    "lora.enabled",
    "lora.r",
    "lora.alpha",
    "lora.target_modules",
)
_ABSENT = object()  # a key the recorded config does not hold


@dataclass(frozen=True)
class PriorRun:
    """A run the config names that has done something: its newest checkpoint and its evaluations."""

    run_id: str
    version: int  # of the newest registered checkpoint; 0 when none was registered yet
    evals: list[EvalRecord] = field(default_factory=list)
    where: str = ""  # where the run's identity was found, for messages


def named_run(cfg: TrainerConfig) -> tuple[str, str]:
    """(run id, where it is recorded) of the run `cfg` trains, or ('', marker path) when it names none yet."""
    marker = f"{run_folder(cfg)}/{RUN_MARKER}"
    if cfg.run_id:
        return cfg.run_id, "trainer.run_id"
    return recorded_run_id(cfg), marker


def find_prior_run(cfg: TrainerConfig, store: TrajectoryStore) -> PriorRun | None:
    """The run `cfg` names if it registered a checkpoint or recorded an evaluation, else None (a run
    created but killed before either has nothing to repeat: starting it again is starting it)."""
    run_id, where = named_run(cfg)
    if not run_id:
        return None
    try:
        run = store.get_run(run_id)
    except NotFound:
        return None  # the trainer's own check names the dangling marker (`resolve_run`)
    check_same_run(cfg, run, where)
    checkpoints = store.list_checkpoints(run_id)
    evals = store.list_evals(run_id)
    if not checkpoints and not evals:
        return None
    version = max((c.version for c in checkpoints), default=0)
    return PriorRun(run_id, version, evals, where)


def check_resume(cfg: TrainerConfig, prior: PriorRun | None, resume: bool) -> None:
    """FailedPrecondition unless `resume` matches what the store holds: continuing needs a run with
    something done, and a run with something done is continued only when asked to."""
    if prior is not None and not resume:
        raise FailedPrecondition(
            f"run {prior.run_id} ({prior.where}) already trained {prior.version} of {cfg.steps} steps "
            f"and recorded {len(prior.evals)} evaluation(s): pass --resume to continue it, or give this "
            "run its own trainer.run_name (or trainer.checkpoint_uri) to start afresh"
        )
    if prior is None and resume:
        run_id, where = named_run(cfg)
        state = f"run {run_id} has no checkpoint or evaluation yet" if run_id else f"no {where}"
        raise FailedPrecondition(f"--resume: nothing to resume ({state}); run without --resume to start it")


def check_same_run(cfg: TrainerConfig, run: Run, where: str) -> None:
    """FailedPrecondition, saying how they differ, when `run` (named by `where`) is not `cfg`'s run."""
    differences = [
        f"trainer.{key} is {there!r} there, {here!r} here"
        for key, there, here in _identity_pairs(run.config, cfg.model_dump(mode="json"))
        if there != here
    ]
    if where != "trainer.run_id" and run.name != cfg.run_name:  # a run.json copied from another run
        differences.insert(
            0, f"the run is named {run.name!r}, this config's trainer.run_name is {cfg.run_name!r}"
        )
    if differences:
        raise FailedPrecondition(
            f"{where} names run {run.id}, which is not this config's run ({'; '.join(differences)}): "
            "train it with the config it was started with, or give this config its own trainer.run_name "
            "(or trainer.checkpoint_uri)"
        )


def _identity_pairs(recorded: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, recorded value, current value) of each RUN_IDENTITY key the recorded config holds (a run
    created by an older clawgym, or not by the trainer, may lack some: those are not compared)."""
    pairs = []
    for key in RUN_IDENTITY:
        there, here = recorded, current
        for part in key.split("."):
            there = there.get(part, _ABSENT) if isinstance(there, dict) else _ABSENT
            here = here.get(part) if isinstance(here, dict) else None
        if there is not _ABSENT:
            pairs.append((key, there, here))
    return pairs
