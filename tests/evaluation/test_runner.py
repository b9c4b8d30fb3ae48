"""The eval runner's bookkeeping: final statuses → per-task counts, retries and infrastructure
failures counted the way the module doc says."""

import pytest

from clawgym.errors import InvalidArgument
from clawgym.evaluation.runner import EvalSpec, summarize
from clawgym.orchestrator.interface import RolloutStatus


def status(
    task: str, harness: str, state: str, passed: bool | None = None, retrying: bool = False
) -> RolloutStatus:
    reward = None if passed is None else float(passed)
    return RolloutStatus(f"r-{task}-{state}-{retrying}", "g", task, harness, state, reward, passed,  # type: ignore[arg-type]
                         retrying=retrying)  # fmt: skip


def test_counts_per_task_and_harness_with_retries_replaced_and_failures_counted_as_misses():
    spec = EvalSpec("mini", ["a", "b"], harnesses=("reference", "nop"), samples=2, ks=(1, 2))
    finals = [
        status("a", "reference", "finished", True),
        status("a", "reference", "failed", retrying=True),  # replaced by the next one
        status("a", "reference", "finished", False),
        status("b", "reference", "failed"),  # out of attempts: a miss, and an infra failure
        status("b", "reference", "finished", True),
        status("a", "nop", "finished", False),
        status("a", "nop", "finished", False),
        status("b", "nop", "finished", False),
        status("b", "nop", "finished", False),
    ]
    result = summarize(spec, finals, version=3, eval_run_id="run")
    ref = result.harnesses["reference"]
    assert [(t.task_id, t.n, t.c) for t in ref.counts] == [("a", 2, 1), ("b", 2, 1)], (
        "retries do not count twice"
    )
    assert ref.infra_failures == 1, "the failed rollout without a retry is an infrastructure failure"
    assert ref.pass_at[1].value == pytest.approx(0.5) and ref.pass_at[2].value == pytest.approx(1.0), (
        "pass@1 = 2/4 samples, pass@2 = both tasks had a pass"
    )
    assert result.harnesses["nop"].pass_at[1].value == 0.0, "nop never passes"
    metrics = ref.metrics("mini", 3)
    assert metrics["pass@1"] == pytest.approx(0.5) and metrics["per_task"] == {"a": [2, 1], "b": [2, 1]}, (
        "the recorded JSON carries Pass@k and the per-task counts"
    )


def test_a_harness_with_no_ended_rollout_is_an_error_not_a_zero():
    spec = EvalSpec("mini", ["a"], harnesses=("reference",))
    with pytest.raises(InvalidArgument, match="nothing to evaluate"):
        summarize(spec, [], version=0, eval_run_id="run")


def test_spec_refuses_k_above_the_samples():
    with pytest.raises(InvalidArgument, match="k <= samples"):
        EvalSpec("mini", ["a"], samples=2, ks=(1, 4)).validate()


def test_hybrid_rewards_say_how_much_came_from_the_code_and_from_the_rubric():
    spec = EvalSpec("clawgym-bench", ["h", "c"], harnesses=("reference",), samples=2)
    weights = {"code": 0.7, "rubric": 0.3}
    finals = [
        RolloutStatus("r1", "g", "h", "reference", "finished", 0.925, False,
                      breakdown={"code": 1.0, "rubric": 0.75, "weights": weights}),
        RolloutStatus("r2", "g", "h", "reference", "finished", 0.15, False,
                      breakdown={"code": 0.0, "rubric": 0.5, "weights": weights}),
        RolloutStatus("r3", "g", "c", "reference", "finished", 1.0, True),  # code only: not hybrid
        RolloutStatus("r4", "g", "c", "reference", "failed", failure="judge"),
    ]  # fmt: skip
    ref = summarize(spec, finals, version=0, eval_run_id="run").harnesses["reference"]
    assert ref.hybrid == {"judged": 2, "mean_code": 0.5, "mean_rubric": 0.625, "not_judged": 0,
                          "judge_failures": 1}  # fmt: skip
    assert ref.metrics("clawgym-bench", 0)["hybrid"] == ref.hybrid
    assert ref.infra_failures == 1, "a judge failure is an infrastructure failure: no reward"
    assert "hybrid" not in summarize(spec, finals[2:3], 0, "run").harnesses["reference"].metrics("s", 0)
