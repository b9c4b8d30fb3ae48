"""The `evaluation` config section (`ClawgymConfig.evaluation`, env `CLAWGYM_EVALUATION__…`).

Owns what a run evaluates and when: held-out tasks of the trainer's suite (its `test` split by
default), samples per task, which Pass@k, how often during training, and through which harnesses
(by default every harness the trainer trains with, so each is evaluated as it is trained).
"""

from pydantic import Field

from clawgym.section import Section


class EvaluationConfig(Section):
    """Periodic and final evaluation of a training run, and the defaults of `clawgym eval`."""


    suite: str = Field("", description="task suite to evaluate on; empty = trainer.suite")
    split: str = Field(
        "test",
        description="the suite's split of held-out tasks (all tasks if it has none; a training run then "
        "refuses to start, as it would evaluate tasks it trains on: `clawgym tasks import` gives a suite a "
        "held-out split)",
    )
    tasks: int = Field(0, ge=0, description="evaluate on this many tasks, spread over task families; 0 = all")
    task_ids: list[str] = Field(
        default_factory=list,
        description="evaluate exactly these tasks of the suite (overrides split and tasks); a training run "
        "refuses ids it also trains on (trainer.tasks, else the suite's train split)",
    )
    samples: int = Field(1, ge=1, description="rollouts per (task, harness): n of the Pass@k estimator")
    ks: list[int] = Field(default_factory=lambda: [1], description="report Pass@k for each k (k <= samples)")
    harnesses: list[str] = Field(
        default_factory=list, description="harnesses to evaluate through; empty = the trainer's harness mix"
    )
    every_steps: int = Field(
        0, ge=0, description="evaluate every N training steps; 0 = only before and after"
    )
    at_start: bool = Field(True, description="evaluate the initial policy before the first step")
    at_end: bool = Field(True, description="evaluate the final policy after the last step")
