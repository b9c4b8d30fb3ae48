"""`clawgym rollout` through the real CLI: one mini task through the reference harness with the
tiny policy (its reply is junk; the point is what gets captured and shown), and through the oracle."""

import json

import pytest

from clawgym.tasks.suites import resolve_suite

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task_dir():
    return resolve_suite("mini") / "test" / "mini-test-write_word-00"


def test_rollout_prints_the_captured_calls_and_the_prefix_tree(clawgym, run_config, task_dir):
    done = clawgym("rollout", "-c", str(run_config()), "-H", "reference", "--task", str(task_dir),
                   "--max-new-tokens", "24")  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, f"clawgym rollout failed:\n{out}\n{done.stderr}"
    assert "mini-test-write_word-00 through reference: finished" in out, out
    assert "captured calls" in out and "call 0" in out and "policy output" in out, (
        f"each call is shown:\n{out}"
    )
    assert "prefix tree:" in out and "generated" in out and "rollouts" in out, f"the tree is rendered:\n{out}"


def test_rollout_json_holds_each_call_with_its_token_counts(clawgym, run_config, task_dir):
    done = clawgym("rollout", "-c", str(run_config()), "-H", "reference", "--task", str(task_dir),
                   "--max-new-tokens", "24", "--json")  # fmt: skip
    assert done.returncode == 0, f"clawgym rollout --json failed:\n{done.stdout}\n{done.stderr}"
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown["state"] == "finished" and shown["task_id"] == "mini-test-write_word-00", shown
    assert shown["calls"], "the reference harness made at least one model call"
    first = shown["calls"][0]
    assert first["prompt_tokens"] > 50 and 1 <= first["output_tokens"] <= 24, (
        f"the prompt holds the agent's system prompt and the cap of 24 new tokens held: {first}"
    )
    assert isinstance(first["temperature"], float) and first["temperature"] >= 0, (
        f"each call shows the temperature it was sampled at: {first}"
    )


def test_rollout_through_the_oracle_passes_without_model_calls(clawgym, run_config):
    done = clawgym("rollout", "-c", str(run_config()), "-H", "oracle", "--task", "mini-test-make_dir-00")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "finished, reward 1" in done.stdout and "no model calls" in done.stdout, done.stdout


def test_rollout_with_the_oracle_teacher_shows_its_demonstration(clawgym, run_config, task_dir):
    """`proxy.teacher.kind=oracle` answers the reference harness's calls: a teacher's tokens carry no
    logprob, and the tree is drawn as SFT reads them (the view once failed on their NaN logprobs)."""
    done = clawgym("rollout", "-c", str(run_config()), "-H", "reference", "--task", str(task_dir),
                   "--set", "proxy.teacher.kind=oracle")  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, f"clawgym rollout with the oracle teacher failed:\n{out}\n{done.stderr}"
    assert "through reference: finished, reward 1" in out, out
    assert "```bash" in out and "DONE" in out, f"the solution in a fence, then DONE:\n{out}"
    assert "prefix tree:" in out, f"the tree is rendered:\n{out}"
