"""A bad run config fails at start, with a message naming the field; a good one loads from YAML.

Through `load_config` (the YAML a user writes) and through `clawgym serve trainer -c` (a real
process: exit code 2, the message on stderr, no traceback).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clawgym.config import load_config
from clawgym.errors import InvalidArgument
from clawgym.trainer.config import check_trainer_config

BAD = {
    "unknown harness": (
        {"model": "tiny-qwen3", "harnesses": [{"name": "no-such-agent"}]},
        "trainer.harnesses.0.name",
    ),
    "negative batch size": ({"model": "tiny-qwen3", "groups_per_step": -4}, "trainer.groups_per_step"),
    "zero group size": ({"model": "tiny-qwen3", "group_size": 0}, "trainer.group_size"),
    "unknown algorithm": ({"model": "tiny-qwen3", "algorithm": {"name": "dpo"}}, "trainer.algorithm.name"),
    "typo in a key": ({"model": "tiny-qwen3", "grups_per_step": 4}, "trainer.grups_per_step"),
    "missing model": ({}, "trainer.model"),
    "unknown model": ({"model": "no-such-model"}, "trainer.model"),
}


def _yaml(tmp_path: Path, trainer: dict) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"store": {"url": f"sqlite:///{tmp_path}/s.db"}, "trainer": trainer}))
    return path


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_run_config_is_refused_naming_the_field(case, tmp_path):
    trainer, field = BAD[case]
    with pytest.raises(InvalidArgument) as e:
        check_trainer_config(load_config(_yaml(tmp_path, trainer)).trainer)
    assert field in str(e.value), f"{case}: the error must name {field}: {e.value}"


def test_the_trainer_process_refuses_a_bad_config_at_start_with_the_field_on_stderr(tmp_path):
    """`python -m clawgym_services.trainer -c bad.yaml`: exit 2, the field named, no traceback."""
    for trainer, field in (BAD["unknown harness"], BAD["missing model"]):
        done = subprocess.run(
            [sys.executable, "-m", "clawgym_services.trainer", "-c", str(_yaml(tmp_path, trainer))],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2, f"a bad config must fail at start with exit code 2: {done.returncode}"
        assert field in done.stderr and "Traceback" not in done.stderr, (
            f"stderr must name {field}:\n{done.stderr}"
        )


def test_a_run_config_loads_with_harness_aliases_and_nested_algorithm(tmp_path):
    """Aliases resolve to the registry's names; nested sections and env-style defaults load."""
    cfg = load_config(
        _yaml(
            tmp_path,
            {
                "model": "tiny-qwen3",
                "harnesses": [{"name": "claude", "weight": 3}, {"name": "reference"}],
                "algorithm": {"name": "ppo", "lr_schedule": "cosine", "warmup_steps": 10},
                "mode": "async",
                "max_policy_lag": 2,
            },
        )
    ).trainer
    check_trainer_config(cfg)
    assert [h.name for h in cfg.harnesses] == ["claude-code", "reference"], (
        "aliases must resolve to adapter names"
    )
    assert cfg.algorithm.name == "ppo" and cfg.algorithm.warmup_steps == 10 and cfg.mode == "async", cfg


def test_the_example_configs_trainer_sections_load():
    """configs/*.yaml: the `trainer:` section each example carries is a valid TrainerConfig section."""
    for name in ("compose.yaml", "cluster.yaml"):
        data = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / name).read_text())
        load_config(trainer=data["trainer"])  # raises InvalidArgument naming the field otherwise


def test_the_trainer_falls_back_to_the_temperature_the_proxy_forces():
    """For calls recorded without their temperature the trainer assumes its own: the proxy's forced
    temperature unless one is set by hand; greedy or unforced leaves T = 1."""
    assert load_config(proxy={"temperature": 0.7}).trainer.algorithm.temperature == 0.7
    assert load_config(proxy={"temperature": 0.0}).trainer.algorithm.temperature == 1.0
    assert load_config().trainer.algorithm.temperature == 1.0
    same = {"proxy": {"temperature": 0.5}, "trainer": {"algorithm": {"temperature": 0.5}}}
    assert load_config(**same).trainer.algorithm.temperature == 0.5
    # the trainer's own is only the fallback for calls recorded without one: set, it is kept
    explicit = load_config(proxy={"temperature": 0.7}, trainer={"algorithm": {"temperature": 1.0}})
    assert explicit.trainer.algorithm.temperature == 1.0


def test_the_trainer_builds_its_policy_in_the_engines_model_cache(tmp_path):
    """One cache of built-in policies per process (`inference.cache_dir`): the trainer's tokenizer, its
    policy and a toy run's engine are all built there, so a deployment that moves the cache moves all
    three (there is no trainer.cache_dir left to forget)."""
    from clawgym.assemble import build_trainer
    from clawgym.config import ClawgymConfig
    from clawgym.trainer.policy import build_policy

    models = tmp_path / "models"
    cfg = ClawgymConfig(
        store={"url": f"sqlite:///{tmp_path / 'store.db'}"},
        inference={"cache_dir": str(models)},
        trainer={"model": "tiny-qwen3", "rollout_source": "toy", "checkpoint_uri": str(tmp_path / "ckpt")},
    )
    trainer = build_trainer(cfg)
    try:
        assert [p.name for p in models.iterdir() if p.is_dir()], (
            "tokenizer and toy engine built into inference.cache_dir"
        )
        assert trainer.cache_dir == str(models), "the trainer is given the inference section's cache"
    finally:
        trainer.close()
    other = tmp_path / "other"
    build_policy(cfg.trainer, cache_dir=str(other))
    assert [p.name for p in other.iterdir() if p.is_dir()], (
        "build_policy builds a built-in policy where it is told"
    )


def test_a_reply_budget_that_fills_the_context_is_refused_naming_both_fields():
    with pytest.raises(
        InvalidArgument, match=r"proxy.max_new_tokens \(32768\).*inference.max_model_len \(32768\)"
    ):
        load_config(proxy={"max_new_tokens": 32768}, inference={"max_model_len": 32768})
    assert (
        load_config(proxy={"max_new_tokens": 4096}, inference={"max_model_len": 32768}).proxy.max_new_tokens
        == 4096
    )
    assert load_config(proxy={"max_new_tokens": 50000}).inference.max_model_len == 0, (
        "0: the model's own, unchecked"
    )
