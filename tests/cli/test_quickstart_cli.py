"""`clawgym quickstart` at a toy budget through the real CLI (STYLE.md 18): the whole job runs (eval,
GRPO step through the reference harness, eval, report) and prints the one JSON object it promises."""

import json

import pytest
import yaml

from clawgym.config import ClawgymConfig

pytestmark = pytest.mark.slow


def test_quickstart_at_a_toy_budget_prints_the_json_contract_and_writes_the_run_folder(clawgym, tmp_path):
    run_dir = tmp_path / "run"
    done = clawgym(
        "quickstart", "--model", "tiny-qwen3", "--steps", "1", "--eval-tasks", "4", "--eval-unseen-tasks", "2",
        "--group-size", "2",
        "--groups-per-step", "2", "--max-new-tokens", "16", "--sampling", "uniform", "--mode", "sync", "--run-dir", str(run_dir), "--json",
    )  # fmt: skip
    assert done.returncode == 0, f"clawgym quickstart failed:\n{done.stdout}\n{done.stderr}"
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, f"--json prints exactly one line on stdout, got {len(lines)}:\n{done.stdout}"
    result = json.loads(lines[0])
    for key in ("pass1_before", "pass1_after", "ci95_before", "ci95_after", "minutes"):
        assert key in result and (key == "minutes" or f"{key}_unseen_families" in result), (
            f"the JSON contract has {key}: {result}"
        )
    assert "ci95_delta_unseen_families" in result, f"the unseen families' paired difference: {result}"
    for part in ("", "_unseen_families"):  # 4 trained and 2 unseen tasks, each over 2 families at least
        low, high = result[f"ci95_delta{part}_by_family"]
        assert low <= result[f"delta{part}"] <= high, f"the difference's interval over families: {result}"
    assert result["label_unseen_families"] == "sibling families", "copy_dir runs cp, delete_by_extension rm"
    assert 0.0 <= result["pass1_before"] <= 1.0 and len(result["ci95_after"]) == 2, result
    low, high = result["ci95_before"]
    assert low <= result["pass1_before"] <= high, f"Pass@1 lies in its interval: {result}"
    assert result["steps"] == 1 and result["eval_tasks"] == 4, f"the toy budget was used: {result}"
    assert result["eval_tasks_unseen_families"] == 2, f"two tasks of unseen families: {result}"
    kinds = {row["kind"] for row in result["per_family"].values()}
    assert kinds == {"trained", "unseen"} and len(result["per_family"]) == 6, result["per_family"]
    report = (run_dir / "report.md").read_text()
    assert "## Evaluations" in report and "## Training steps" in report, "the report has both parts"
    assert "### Pass@1 per family" in report and "families with no training task" in report, (
        "the report shows Pass@1 per family and says what each held-out set shares with training"
    )
    assert "| copy_dir | unseen, sibling: cp -r |" in report, "a sibling family's kind names what it shares"
    assert (run_dir / "reward_pass_rate.png").stat().st_size > 10_000, "the reward/pass-rate plot exists"
    saved = ClawgymConfig(**yaml.safe_load((run_dir / "config.yaml").read_text()))
    assert saved.trainer.model == "tiny-qwen3" and saved.trainer.steps == 1, "config.yaml reproduces the run"
    assert saved.trainer.sampling.mode == "uniform", "--sampling reaches the trainer's task draw (signal by default)"
    assert saved.trainer.mode == "sync", "--mode reaches the trainer's loop (async by default)"
    assert "clawgym quickstart" in done.stderr, "progress goes to stderr with --json"


def test_a_quickstart_its_time_budget_ends_early_still_evaluates_after(clawgym, tmp_path):
    """The budget stops training early to leave room for the final evaluation: that evaluation runs."""
    done = clawgym(
        "quickstart", "--model", "tiny-qwen3", "--steps", "500", "--eval-tasks", "4", "--eval-unseen-tasks", "2",
        "--group-size", "2", "--groups-per-step", "2", "--max-new-tokens", "16", "--mode", "sync",
        "--minutes", "0.75", "--run-dir", str(tmp_path / "run"), "--json",
    )  # fmt: skip
    assert done.returncode == 0, f"clawgym quickstart failed:\n{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert 1 <= result["steps"] < 500, f"the budget must end training early: {result['steps']} steps"
    assert "would not fit another step" in " ".join(done.stderr.split()), "the early end is said"
    assert result.get("pass1_after") is not None and result.get("pass1_after_unseen_families") is not None, (
        f"the final evaluation ran after the early end: {result}"
    )
    saved = ClawgymConfig(**yaml.safe_load((tmp_path / "run" / "config.yaml").read_text()))
    assert saved.trainer.sampling.mode == "signal", "the quickstart's default draw (not the trainer's uniform) is used"
