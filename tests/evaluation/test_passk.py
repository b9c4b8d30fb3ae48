"""Pass@k and its intervals: the unbiased estimator against its combinatorial definition, Wilson
against textbook values, bootstraps that are reproducible and cover what they should."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clawgym.errors import InvalidArgument
from clawgym.evaluation.passk import (
    TaskCounts,
    bootstrap_interval,
    estimate,
    family_bootstrap_interval,
    family_paired_difference,
    paired_difference,
    pass_at_k,
    wilson_interval,
)


@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_one_minus_the_binomial_ratio(nck):
    """pass@k = 1 - C(n-c, k)/C(n, k) (Chen et al. 2021), for every n, c, k with k <= n."""
    n, c, k = nck
    exact = 1.0 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), f"n={n} c={c} k={k}"


def test_pass_at_1_is_the_fraction_of_samples_that_passed():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3), "pass@1 with n samples is c/n"
    assert pass_at_k(5, 0, 3) == 0.0, "no passing sample: pass@k is 0"
    assert pass_at_k(5, 3, 3) == 1.0, "fewer failures than k: every k-subset holds a pass"


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(InvalidArgument, match="at least 3 samples"):
        pass_at_k(2, 1, 3)
    with pytest.raises(InvalidArgument):
        pass_at_k(3, 4, 1)


def test_wilson_interval_matches_textbook_values_and_stays_in_0_1():
    """Wilson 95% for 0/10 is [0, 0.2775]; for 5/10, [0.2366, 0.7634] (Newcombe 1998, table I)."""
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4), "0 of 10"
    low, high = wilson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4)), "5 of 10"
    low, high = wilson_interval(10, 10)
    assert high == pytest.approx(1.0) and low == pytest.approx(0.7225, abs=1e-4), "10 of 10 mirrors 0 of 10"
    for n in range(1, 50):
        for c in (0, n):
            low, high = wilson_interval(c, n)
            assert low <= c / n <= high, f"{c} of {n}: [{low!r}, {high!r}] holds the estimate (no rounding)"


def test_bootstrap_interval_is_reproducible_and_brackets_the_mean():
    values = np.random.default_rng(1).random(50)
    a, b = bootstrap_interval(values), bootstrap_interval(values)
    assert a == b, "a fixed seed: the same values give the same interval"
    assert a[0] < values.mean() < a[1], "the interval brackets the sample mean"
    assert bootstrap_interval([0.4] * 20) == (pytest.approx(0.4), pytest.approx(0.4)), "no spread, no width"


def test_estimate_uses_wilson_for_one_sample_per_task_and_bootstrap_otherwise():
    single = [TaskCounts(f"t{i}", 1, int(i < 3)) for i in range(10)]
    p = estimate(single)
    assert (p.value, p.method, p.ci95) == (0.3, "wilson", wilson_interval(3, 10)), "one sample per task"
    several = [TaskCounts(f"t{i}", 4, i % 5) for i in range(10)]
    q = estimate(several, k=2)
    assert q.method == "bootstrap" and q.samples == 40, "several samples: bootstrap over tasks"
    assert q.value == pytest.approx(np.mean([pass_at_k(4, i % 5, 2) for i in range(10)])), "mean over tasks"


def test_paired_difference_pairs_tasks_and_excludes_zero_for_a_clear_gain():
    before = [TaskCounts(f"t{i}", 1, 0) for i in range(40)]
    after = [TaskCounts(f"t{i}", 1, int(i % 2 == 0)) for i in range(40)]
    delta, (low, high) = paired_difference(before, after)
    assert delta == pytest.approx(0.5), "half of the tasks flipped to passing"
    assert 0 < low <= delta <= high, f"a gain on half of 40 paired tasks is significant: [{low}, {high}]"
    with pytest.raises(InvalidArgument, match="no task"):
        paired_difference(before, [TaskCounts("other", 1, 1)])


def _gain_in_one_family_of_eight() -> tuple[list[TaskCounts], list[TaskCounts], dict[str, str]]:
    """8 families of 24 tasks; every task of family f0 goes from failing to passing, no other moves."""
    ids = [f"f{f}-{i}" for f in range(8) for i in range(24)]
    before = [TaskCounts(t, 1, 0) for t in ids]
    after = [TaskCounts(t, 1, int(t.startswith("f0-"))) for t in ids]
    return before, after, {t: t.split("-")[0] for t in ids}


def test_a_gain_carried_by_one_family_is_significant_over_tasks_but_not_over_families():
    """The reason for the family-level interval: 24 flipped tasks of one family in 192 look like a
    sure gain task by task, yet a draw of 8 families misses that family a third of the time."""
    before, after, family_of = _gain_in_one_family_of_eight()
    delta, (task_low, _) = paired_difference(before, after)
    same, (low, high) = family_paired_difference(before, after, family_of)
    assert same == delta == pytest.approx(0.125)
    assert task_low > 0, "over tasks the gain is beyond its interval"
    assert low == 0.0 < delta < high, f"over families it is not: [{low}, {high}]"


def test_family_bootstrap_is_reproducible_brackets_the_mean_and_needs_two_families():
    rng = np.random.default_rng(1)
    groups = [list(rng.integers(0, 2, size=n).astype(float)) for n in (24, 24, 12, 30)]
    mean = float(np.mean([v for g in groups for v in g]))
    first = family_bootstrap_interval(groups)
    assert first == family_bootstrap_interval(groups), "a fixed seed: the same interval twice"
    assert first[0] <= mean <= first[1], (first, mean)
    assert family_bootstrap_interval([[1.0] * 5, [1.0] * 7]) == (1.0, 1.0), "no variation, no width"
    before, after, family_of = _gain_in_one_family_of_eight()
    one_family = {t: "all" for t in family_of}
    assert family_paired_difference(before, after, one_family) is None, "one family: no family-level interval"


def test_family_bootstrap_is_wider_than_the_task_bootstrap_when_families_differ():
    """Families whose gains differ (0 to 0.7): the task-level interval is too narrow for new families."""
    groups = [[1.0] * round(24 * p) + [0.0] * (24 - round(24 * p)) for p in (0.0, 0.1, 0.2, 0.3, 0.5, 0.7)]
    task = bootstrap_interval([v for g in groups for v in g])
    family = family_bootstrap_interval(groups)
    assert family[1] - family[0] > 1.5 * (task[1] - task[0]), (family, task)
