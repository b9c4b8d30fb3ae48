"""An evaluation reports a version's Pass@1 only if that version served every one of its calls."""

import pytest

from clawgym.config import ClawgymConfig
from clawgym.errors import FailedPrecondition
from clawgym.evaluation.runner import EvalSpec
from clawgym_app.runtime import Runtime

pytestmark = pytest.mark.slow


def test_an_evaluation_served_by_another_version_is_refused_naming_the_call(learnable, learnable_run, one_thread):
    settings = {"reference": {"max_turns": 1, "max_tokens": 2}}
    cfg = ClawgymConfig(**learnable_run(run_name="versions", steps=1, harness_settings=settings))
    spec = EvalSpec(str(learnable.suite), learnable.test_ids[:2], ("reference",), samples=2)
    with Runtime.open(cfg) as rt:
        served = rt.served_version()
        result = rt.evaluate(spec, version=served)
        assert result.harnesses["reference"].infra_failures == 0, "the evaluation itself ran"
        with pytest.raises(FailedPrecondition, match=rf"evaluation of v{served + 1} refused: call 0 of rollout .* served by version\(s\) \[{served}\]"):
            rt.evaluate(spec, version=served + 1)
