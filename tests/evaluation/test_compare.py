"""A before/after comparison and the headline figures a run reports from it (summary.json, --json)."""

from clawgym.evaluation.compare import compare
from clawgym.evaluation.passk import TaskCounts, estimate, paired_difference
from clawgym.evaluation.runner import EvalResult, HarnessEval
from clawgym.report.summary import before_after


def _counts(passed: list[int]) -> list[TaskCounts]:
    return [TaskCounts(f"t{i}", 1, c) for i, c in enumerate(passed)]


def _result(version: int, **per_harness: list[int]) -> EvalResult:
    harnesses = {}
    for name, passed in per_harness.items():
        counts = _counts(passed)
        harnesses[name] = HarnessEval(name, counts, {1: estimate(counts)}, sum(passed) / len(passed), 0)
    return EvalResult("mini", version, harnesses, "eval-run")


def test_a_clear_gain_has_intervals_apart_and_a_difference_above_zero():
    before, after = _counts([0] * 40), _counts([1] * 30 + [0] * 10)
    c = compare(before, after)
    assert (c.delta, c.ci95_delta) == paired_difference(before, after), "the paired difference of passk"
    assert (c.before, c.after) == (estimate(before), estimate(after)), "each side's Pass@1 as estimated alone"
    assert c.intervals_apart and c.difference_excludes_zero, f"0/40 → 30/40 is a gain by both readings: {c}"


def test_no_change_is_neither_apart_nor_a_difference_above_zero():
    same = _counts([1, 0] * 20)
    c = compare(same, same)
    assert c.delta == 0.0 and not c.intervals_apart and not c.difference_excludes_zero, str(c)


def test_the_summary_names_one_harness_without_a_suffix_in_the_contract_order():
    out = before_after(["reference"], _result(0, reference=[0] * 10), _result(5, reference=[1] * 8 + [0] * 2))
    assert list(out) == [
        "pass1_before", "ci95_before", "pass1_after", "ci95_after", "delta", "ci95_delta", "significant",
    ], f"the --json/summary.json keys, in order: {list(out)}"  # fmt: skip
    assert (out["pass1_before"], out["pass1_after"], out["delta"]) == (0.0, 0.8, 0.8), out
    assert out["significant"] is True and len(out["ci95_delta"]) == 2, out


def test_the_summary_suffixes_each_harness_of_a_mix_and_skips_the_difference_without_an_after():
    out = before_after(["a", "b"], _result(0, a=[0, 1], b=[1, 1]), None)
    assert list(out) == ["pass1_before_a", "ci95_before_a", "pass1_before_b", "ci95_before_b"], (
        f"only the before figures, one set per harness: {out}"
    )
    assert (out["pass1_before_a"], out["pass1_before_b"]) == (0.5, 1.0), out


def test_the_summary_adds_the_family_level_interval_where_tasks_span_two_families():
    before, after = _result(0, reference=[0] * 12), _result(5, reference=[1] * 6 + [0] * 6)
    family_of = {f"t{i}": "odd" if i % 2 else "even" for i in range(12)}
    out = before_after(["reference"], before, after, None, "_unseen_families", family_of)
    assert list(out)[-2:] == ["ci95_delta_unseen_families_by_family", "significant_unseen_families"], out
    low, high = out["ci95_delta_unseen_families_by_family"]
    assert low <= out["delta_unseen_families"] <= high, out
    only_one = before_after(["reference"], before, after, None, "", {f"t{i}": "one" for i in range(12)})
    assert "ci95_delta_by_family" not in only_one, "one family: no family-level interval"
