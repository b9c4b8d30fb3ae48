"""Which train step consumed each group of a run, and the advantage each rollout got there.

The store keeps the step that consumed a group (its checkpoint) and the rewards, not the advantages:
the trainer computes them inside the step. For GRPO they are recomputed here as the trainer computes
them: the group's trained rollouts (`trainer.batch.trained_rollouts`: with a call, not failed; an
unrewarded one at the run's `failed_reward`) through `rl.grpo_advantages` with the run's
`scale_by_std` and `leave_one_out`. A rollout gets none when the trainer did not train it: an
infrastructure failure, a group not consumed yet, or one its step consumed without training (too
stale, nothing generated: the step's `trained_groups` leaves it out). PPO's advantages are per
token (GAE on the value head at that step), which nothing records: none either.

Owns this recomputation for the exported tables; not the maths (`clawgym.rl`), nor which rollouts a
step trains (`clawgym.trainer.batch`).
"""

from dataclasses import dataclass

import torch
from pydantic import ValidationError

from clawgym.records import Group, Run, TrainStep
from clawgym.rl.advantages import grpo_advantages
from clawgym.store.interface import TrajectoryStore
from clawgym.trainer.batch import trained_rollouts
from clawgym.trainer.config import AlgorithmConfig


@dataclass(frozen=True)
class RunSteps:
    """What the export needs of a run's training: how its advantages were computed, and its steps."""

    algorithm: AlgorithmConfig | None  # None: not a training run (or a config this version cannot read)
    failed_reward: float
    step_of: dict[int, int]  # checkpoint version -> the step that made it (consumed its groups)
    trained: dict[int, set[str] | None]  # step -> the groups it trained (None: the step did not say)
    note: str  # what the `advantage` column holds, for the export's manifest

    @classmethod
    def read(cls, store: TrajectoryStore, run_id: str) -> "RunSteps":
        """The run's steps as the store records them (its run, checkpoints and train steps)."""
        algorithm, failed_reward, note = _settings(store.get_run(run_id))
        trained = {s.step: _trained_groups(s) for s in store.list_train_steps(run_id)}
        step_of = {c.version: c.step for c in store.list_checkpoints(run_id)}
        return cls(algorithm, failed_reward, step_of, trained, note)

    def step(self, consumed_version: int | None) -> int | None:
        """The train step that consumed a group (None: not consumed yet)."""
        return None if consumed_version is None else self.step_of.get(consumed_version)

    def advantages(self, group: Group, step: int | None) -> dict[str, float]:
        """rollout id -> its advantage in the step that trained `group`; empty when none (module doc)."""
        algo = self.algorithm
        if algo is None or algo.name != "grpo" or step is None:
            return {}
        trained = self.trained.get(step)
        if trained is not None and group.id not in trained:
            return {}
        rollouts = trained_rollouts(group, self.failed_reward)
        if not rollouts:
            return {}
        rewards = torch.tensor([reward for _, reward in rollouts], dtype=torch.float64)
        adv = grpo_advantages(
            rewards, torch.zeros(len(rollouts), dtype=torch.int64),
            scale_by_std=algo.scale_by_std, leave_one_out=algo.leave_one_out,
        )  # fmt: skip
        return {r.rollout.id: float(a) for (r, _), a in zip(rollouts, adv.tolist(), strict=True)}


def _trained_groups(step: TrainStep) -> set[str] | None:
    groups = step.metrics.get("trained_groups")
    return set(groups) if isinstance(groups, list) else None  # steps recorded before it was kept: None


def _settings(run: Run) -> tuple[AlgorithmConfig | None, float, str]:
    """The run's algorithm and failed_reward from its config (a trainer's config, as the trainer
    created the run), and the manifest's note on the advantages."""
    if not isinstance(run.config.get("algorithm"), dict):
        return None, 0.0, "none: not a training run"
    try:
        algo = AlgorithmConfig.model_validate(run.config["algorithm"])
        failed_reward = float(run.config.get("failed_reward", 0.0))
    except (ValidationError, TypeError, ValueError) as e:
        return None, 0.0, f"none: the run's algorithm settings cannot be read ({e.__class__.__name__})"
    if algo.name == "sft":
        return algo, failed_reward, "none: an SFT run trains demonstrations, with no advantages"
    if algo.name != "grpo":
        note = f"none: {algo.name}'s advantages are per token (GAE on the value head), not recorded"
        return algo, failed_reward, note
    baseline = "the mean of the group's other rewards" if algo.leave_one_out else "the group's mean reward"
    scale = ", divided by the group's reward std + 1e-6" if algo.scale_by_std else ""
    note = (
        f"grpo, recomputed from each trained group's rewards (reward - {baseline}{scale}; an unrewarded "
        f"rollout at failed_reward {failed_reward}): the store keeps no advantages"
    )
    return algo, failed_reward, note
