"""The run report: markdown tables and PNG plots written from step metrics and evaluations."""

import json

from PIL import Image

from clawgym.report import EvalPoint, RunReport, write_report


def test_report_writes_markdown_json_and_a_png_per_plot_with_data(tmp_path):
    steps = [
        {"step": s, "reward": 0.1 * s, "pass_rate": 0.1 * s, "loss": 0.5, "approx_kl": 0.01 * s,
         "entropy": 1.0 - 0.05 * s, "logprob_mismatch": 0.02, "kl_engine_train": 0.001,
         "sharing_ratio": 3.0, "tokens": 900, "harness/reference/reward": 0.1 * s,
         "harness/reference/pass_rate": 0.1 * s, "harness/mini-swe-agent/reward": 0.0,
         "harness/mini-swe-agent/pass_rate": 0.0}
        for s in range(1, 6)
    ]  # fmt: skip
    evals = [
        EvalPoint(0, "reference", "mini", {1: 0.1}, {1: (0.05, 0.2)}, 40, 40, label="before"),
        EvalPoint(5, "reference", "mini", {1: 0.5}, {1: (0.35, 0.65)}, 40, 40, label="after"),
    ]
    report = RunReport("a run", "run-1", {"model": "m"}, steps, evals, {"train": 10.0}, {"pass1_after": 0.5})
    path = write_report(report, tmp_path / "out")
    text = path.read_text()
    assert "| after | 5 | reference | mini | 40 | 40 | 0.500 [0.350, 0.650]" in text, "eval row with its CI"
    assert "### Per harness" in text and "mini-swe-agent reward" in text, "two harnesses: a per-harness table"
    pngs = sorted(p.name for p in path.parent.glob("*.png"))
    assert pngs == ["kl_entropy.png", "logprob_mismatch.png", "reward_pass_rate.png", "sharing.png"], pngs
    for name in pngs:
        with Image.open(path.parent / name) as im:
            assert im.size[0] > 500 and im.size[1] > 300, f"{name} is a real image, got {im.size}"
        assert f"![{name[:-4]}]({name})" in text, f"the markdown shows {name}"
    assert json.loads((path.parent / "report.json").read_text())["run_id"] == "run-1", (
        "report.json mirrors it"
    )


def test_report_without_steps_draws_only_what_has_data(tmp_path):
    report = RunReport(
        "eval only", "run-2", evals=[EvalPoint(0, "oracle", "mini", {1: 1.0}, {1: (0.9, 1.0)}, 4, 4)]
    )
    path = write_report(report, tmp_path)
    assert [p.name for p in tmp_path.glob("*.png")] == ["reward_pass_rate.png"], "no step metrics: one plot"
    assert "## Training steps" not in path.read_text(), "no step table without steps"


def test_a_report_says_which_part_of_hybrid_rewards_came_from_code_and_which_from_the_judge(tmp_path):
    metrics = {"version": 2, "suite": "clawgym-bench", "tasks": 2, "samples": 4, "pass@1": 0.25,
               "pass@1_ci95": [0.05, 0.7], "mean_reward": 0.6,
               "hybrid": {"judged": 3, "mean_code": 0.5, "mean_rubric": 0.8333, "not_judged": 0,
                          "judge_failures": 1}}  # fmt: skip
    point = EvalPoint.from_metrics(metrics, "reference", label="after")
    assert point.hybrid == metrics["hybrid"]
    text = write_report(RunReport("hybrid", "run-3", evals=[point]), tmp_path).read_text()
    assert "## Hybrid rewards (code checks + rubric judge)" in text
    assert "| after | 2 | reference | 3 | 0.500 | 0.833 | 0 | 1 |" in text
    plain = write_report(RunReport("plain", "run-4", evals=[EvalPoint.from_metrics(
        {**metrics, "hybrid": None}, "reference")]), tmp_path / "plain").read_text()  # fmt: skip
    assert "Hybrid rewards" not in plain


def test_the_kl_plot_has_a_panel_for_clip_fraction_when_steps_record_it(tmp_path):
    """KL (approx_kl, kl_ref), entropy and clip fraction: one panel each, only for recorded metrics."""
    from clawgym.report.plots import DPI, kl_and_entropy

    steps = [
        {"step": s, "approx_kl": 0.01, "kl_ref": 0.002 * s, "entropy": 1.0, "clipfrac": 0.05} for s in (1, 2)
    ]
    with Image.open(kl_and_entropy(RunReport("r", "run-1", steps=steps), tmp_path / "three.png")) as im:
        assert im.size[0] > 3 * 5 * DPI, f"three panels: KL, entropy, clip fraction; width {im.size[0]}"
    without = [{k: v for k, v in s.items() if k != "clipfrac"} for s in steps]
    with Image.open(kl_and_entropy(RunReport("r", "run-1", steps=without), tmp_path / "two.png")) as im:
        assert im.size[0] < 3 * 5 * DPI, f"no clip fraction recorded: two panels; width {im.size[0]}"
