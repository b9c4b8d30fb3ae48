"""Asked to stop while its last step trains, a run ends after that step without the final
evaluation (`clawgym train` exits 130 then), and a resume runs just that evaluation."""

from pathlib import Path

import pytest

from clawgym.config import ClawgymConfig
from clawgym.run import Run, RunObserver
from clawgym_app.runtime import Runtime

pytestmark = pytest.mark.slow


class StopAtStep(RunObserver):
    """Sets `stop` (as the first Ctrl-C does) when step `at` starts."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.run: Run | None = None

    def step_starting(self, version: int, rollouts: int):
        if version == self.at and self.run is not None:
            self.run.stop.set()
        return None


def test_a_stop_asked_in_the_last_step_skips_the_final_evaluation_and_a_resume_runs_it(
    learnable_run, tmp_path: Path, one_thread
):
    settings = {"reference": {"max_turns": 1, "max_tokens": 2}}
    data = learnable_run(run_name="stopped", steps=2, group_size=2, groups_per_step=1,
                         harness_settings=settings, evaluation={"samples": 1, "tasks": 1, "split": "test"})  # fmt: skip
    cfg = ClawgymConfig(**data)
    observer = StopAtStep(at=2)
    with Runtime.open(cfg) as rt:
        run = Run(rt.cfg, rt, tmp_path / "run", observer)
        observer.run = run
        outcome = run.run()
    assert outcome.stopped and outcome.version == 2, "the last step is finished, the run marked stopped"
    assert [e.label for e in outcome.evals] == ["before"], f"no final evaluation: {outcome.evals}"
    assert any("before the final evaluation" in n for n in outcome.notes), outcome.notes
    assert "pass1_after" not in outcome.summary, outcome.summary

    with Runtime.open(cfg) as rt:  # the same store and checkpoints: a resume
        resumed = Run(rt.cfg, rt, tmp_path / "run").run()
    assert not resumed.stopped and [e.label for e in resumed.evals] == ["before", "after"], resumed.evals
    assert resumed.evals[-1].result.version == 2 and "pass1_after" in resumed.summary, resumed.summary
