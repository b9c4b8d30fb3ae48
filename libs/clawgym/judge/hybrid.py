"""A hybrid task's reward: the code checks' verdict and the judge's rubric score, weighted.

`reward = code_weight x code + rubric_weight x rubric` (ClawGym-Bench: 0.7 and 0.3); passed =
reward >= the task's threshold. The breakdown recorded with the rollout says which part came from
where. Without a judge the rubric is not judged: the reward is the code part alone (weights
code 1, rubric 0) and the breakdown says so (`rubric_status`), never a rubric score of 0.
"""

from __future__ import annotations

from typing import Any

from clawgym.judge.client import JudgeOutcome
from clawgym.tasks.model import Task
from clawgym.tasks.verify import Verdict

JUDGED, NOT_JUDGED = "judged", "not_judged"


def combine(task: Task, code: Verdict, outcome: JudgeOutcome | None) -> tuple[Verdict, dict[str, Any]]:
    """The task's verdict and reward breakdown; `outcome` None = no judge configured, else a
    successful judgment (a failed one is the caller's infrastructure failure)."""
    rubric = task.rubric
    assert rubric is not None, "combine() is for tasks with a rubric"
    if outcome is None:
        breakdown = {
            "code": code.reward,
            "rubric": None,
            "weights": {"code": 1.0, "rubric": 0.0},
            "rubric_status": f"{NOT_JUDGED}: no judge configured",
        }
        return code, breakdown
    assert outcome.score is not None, "a failed judgment has no score to combine"
    reward = rubric.code_weight * code.reward + rubric.rubric_weight * outcome.score
    reward = min(1.0, max(0.0, round(reward, 12)))  # 0.7 x 1 + 0.3 x 1 is 1, not 0.999…
    breakdown = {
        "code": code.reward,
        "rubric": outcome.score,
        "weights": rubric.weights,
        "rule_scores": dict(outcome.rule_scores),
        "judge_model": outcome.model,
        "rubric_status": JUDGED,
    }
    detail = (
        f"hybrid reward {reward:.4f} = {rubric.code_weight:g} x code {code.reward:.4f} "
        f"+ {rubric.rubric_weight:g} x rubric {outcome.score:.4f}\n{code.detail}"
    )
    passed = task.verifier.passed(reward)
    return Verdict(reward, passed, detail, {**code.scores, "rubric": outcome.score}), breakdown
