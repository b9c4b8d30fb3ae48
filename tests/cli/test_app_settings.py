"""The app's settings without running anything: harness settings in a run config reach the adapters
the orchestrator builds, and the quickstart's config carries them, absolute paths and its task choice
(train and held-out tasks apart)."""

import os
from pathlib import Path

import pytest

from clawgym.config import ClawgymConfig, load_config
from clawgym.errors import InvalidArgument
from clawgym.harnesses.reference import Reference
from clawgym.orchestrator.catalog import Catalog
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.suites import resolve_suite
from clawgym_app.commands.quickstart import QuickstartOptions


def test_harness_settings_of_the_config_reach_the_adapters_the_catalog_builds():
    o = ClawgymConfig(
        orchestrator={
            "harness_timeout_s": 120,
            "harness_settings": {
                "reference": {"max_turns": 1, "max_tokens": 40, "command_timeout_s": 5},
                "mini": {"max_turns": 2},
            },
        }
    ).orchestrator
    catalog = Catalog(harness_timeout_s=o.harness_timeout_s, harness_settings=o.harness_settings)
    reference = catalog.adapter("reference")
    assert isinstance(reference, Reference), "the reference adapter"
    assert (reference.limits.max_turns, reference.max_tokens) == (1, 40), "its turn cap and reply length"
    argv = reference.command("task", _ctx())
    assert argv[argv.index("--max-turns") + 1] == "1" and argv[argv.index("--max-tokens") + 1] == "40", argv
    assert float(argv[argv.index("--command-timeout") + 1]) == 5, f"its command time cap: {argv}"
    mini = catalog.adapter("mini-swe-agent")
    assert mini.limits.max_turns == 2, "an alias in the settings names the canonical harness"
    assert reference.limits.timeout_s == mini.limits.timeout_s == 120, "harness_timeout_s still applies"
    nop = catalog.adapter("nop")
    assert nop.limits.max_turns == nop.default_limits.max_turns, "no settings: the adapter's defaults"


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"no-such-harness": {"max_turns": 1}}, "unknown harness 'no-such-harness'"),
        ({"claude-code": {"max_tokens": 40}}, "harness claude-code takes no max_tokens"),
        ({"codex": {"command_timeout_s": 5}}, "harness codex takes no command_timeout_s"),
        ({"reference": {"max_turn": 1}}, "max_turn"),
    ],
)
def test_a_harness_setting_no_harness_can_take_is_refused_at_load_naming_it(settings, error):
    with pytest.raises(InvalidArgument, match=error):
        load_config(flags={"orchestrator": {"harness_settings": settings}})


def test_the_quickstart_config_holds_its_harness_settings_and_absolute_paths(tmp_path, monkeypatch):
    """config.yaml must repeat the run's evaluation from any folder: the turn cap and reply length are in
    it, and the store and checkpoints are named by absolute paths even for a relative --run-dir."""
    monkeypatch.chdir(tmp_path)
    cfg = QuickstartOptions(max_turns=2, max_new_tokens=24, steps=24).config(Path("runs/x"))
    s = cfg.orchestrator.harness_settings["reference"]
    assert (s.max_turns, s.max_tokens) == (2, 24), "the reference harness's turn cap and reply length"
    assert s.command_timeout_s == 5, "a command that blocks holds its step 5 s, not the agent's default 30"
    assert cfg.store.url == f"sqlite:///{tmp_path}/runs/x/clawgym.db", cfg.store.url
    assert cfg.trainer.checkpoint_uri == f"{tmp_path}/runs/x/checkpoints", cfg.trainer.checkpoint_uri
    assert (cfg.trainer.keep_checkpoints, cfg.trainer.keep_every) == (1, 8), "v8, v16 and v24 are kept"


def test_quickstart_trains_on_the_train_split_and_evaluates_held_out_tasks_of_the_chosen_levels():
    opts = QuickstartOptions(max_level=2, eval_tasks=0)
    train, held_out = opts.task_ids()
    tasks = {t.id: t for t in load_tasks(resolve_suite("mini"))}
    assert train and held_out and not set(train) & set(held_out), (
        "disjoint, non-empty train and held-out sets"
    )
    assert {tasks[t].split for t in train} == {"train"} and {tasks[t].split for t in held_out} == {"test"}
    assert max(int(tasks[t].metadata["level"]) for t in train + held_out) == 2, "levels 1-2 only"
    families = {tasks[t].metadata["family"] for t in held_out}
    cut = QuickstartOptions(max_level=2, eval_tasks=len(families)).task_ids()[1]
    assert {tasks[t].metadata["family"] for t in cut} == families, "a cut keeps one task per family"
    cfg = opts.config(Path("/tmp/unused"))
    assert cfg.trainer.tasks == train and cfg.evaluation.task_ids == held_out, "the config carries both"
    assert cfg.trainer.algorithm.temperature == cfg.proxy.temperature == opts.temperature, (
        "the trainer scores tokens at the temperature the proxy samples them"
    )


def _ctx():
    from clawgym.harnesses.base import RunContext

    return RunContext(workdir="/w", home="/h", proxy_url="http://127.0.0.1:1", token="t", model="m")


def test_the_command_line_defaults_are_the_quickstart_options_defaults():
    import inspect
    from dataclasses import fields

    from clawgym_app.commands.quickstart import command

    defaults = {f.name: f.default for f in fields(QuickstartOptions)}
    options = {name: p.default.default for name, p in inspect.signature(command).parameters.items()}
    assert {k: options[k] for k in defaults} == defaults, "quickstart --help shows the defaults the run uses"


def test_eval_names_its_results_store_and_refuses_a_store_it_cannot_record_into():
    """`clawgym eval`'s results store: the config's by default (printed, password hidden), else the one
    --store names; with services the proxy and orchestrator record into their own, so --store is refused."""
    from clawgym_app.commands.evaluate import EvalRequest, results_store

    cfg = ClawgymConfig(store={"url": "postgresql+psycopg://clawgym:secret@db:5432/clawgym"})
    assert results_store(cfg, EvalRequest()) == (
        cfg,
        "the config's store postgresql+psycopg://clawgym:***@db:5432/clawgym",
    )
    named, where = results_store(cfg, EvalRequest(store="sqlite:////tmp/results.db"))
    assert named.store.url == where == "sqlite:////tmp/results.db", (
        "--store replaces the store evaluated into"
    )
    services = ClawgymConfig(orchestrator={"grpc_url": "127.0.0.1:50053"})
    with pytest.raises(InvalidArgument, match="need an embedded evaluation"):
        results_store(services, EvalRequest(store="sqlite:////tmp/results.db"))
    with pytest.raises(InvalidArgument, match="name one results store"):
        results_store(cfg, EvalRequest(store="sqlite:////tmp/results.db", store_service="127.0.0.1:50051"))


def test_the_default_policy_is_the_served_one_when_the_config_names_no_trained_one():
    """One default policy: what inference.model defaults to, what the quickstart runs, and what eval
    evaluates (and rollout runs) when neither --model nor trainer.model names one. A config that
    names only inference.model is evaluated on that policy, not on a second default of the command."""
    from clawgym.policies.specs import DEFAULT_POLICY
    from clawgym_app.commands.evaluate import EvalRequest, configure

    assert ClawgymConfig().inference.model == QuickstartOptions().model == DEFAULT_POLICY
    served, _ = configure(ClawgymConfig(inference={"model": "tiny-qwen3"}), EvalRequest())
    assert served.trainer.model == "tiny-qwen3", "eval runs the config's served policy"
    named, _ = configure(ClawgymConfig(inference={"model": "tiny-qwen3"}), EvalRequest(model=DEFAULT_POLICY))
    assert named.trainer.model == DEFAULT_POLICY, "--model wins"


def test_the_quickstart_computes_in_bfloat16_only_where_the_cpu_computes_it_natively(tmp_path):
    """`--compute-dtype auto` asks oneDNN, whose view ONEDNN_MAX_CPU_ISA caps: an AVX2-only CPU (no
    bfloat16 instructions, where they would be emulated) serves float32 with the trainer's own weights,
    all of them trained (`--finetune auto`); bfloat16 is served from the engine's own copy of the
    weights (`weight_sync: copy`), the trainer's float32 weights compute in it (`trainer.autocast`) and
    LoRA adapters train. LoRA in float32 has the engine's own copy too, adapters merged."""
    import subprocess
    import sys

    probe = (
        "from pathlib import Path; from clawgym_app.commands.quickstart import QuickstartOptions; "
        "c = QuickstartOptions().config(Path('/tmp/unused')); "
        "print(c.inference.dtype, c.inference.weight_sync, c.trainer.autocast, c.trainer.lora.enabled, "
        "c.trainer.trained_layers)"
    )
    capped = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert capped.stdout.split() == ["float32", "shared", "off", "False", "15"], capped.stdout + capped.stderr
    for dtype, finetune, expected in (
        ("float32", "auto", ("float32", "shared", "off", False, 15)),
        ("float32", "lora", ("float32", "copy", "off", True, 0)),
        ("bfloat16", "auto", ("bfloat16", "copy", "bfloat16", True, 0)),
        ("bfloat16", "full", ("bfloat16", "copy", "bfloat16", False, 15)),
    ):
        c = QuickstartOptions(compute_dtype=dtype, finetune=finetune).config(tmp_path)
        t = c.trainer
        got = (c.inference.dtype, c.inference.weight_sync, t.autocast, t.lora.enabled, t.trained_layers)
        assert got == expected, (dtype, finetune, got)


def test_quickstart_trains_the_top_half_of_the_layers_where_every_weight_trains_unless_given(tmp_path):
    def layers(**options) -> int:
        return QuickstartOptions(compute_dtype="float32", **options).config(tmp_path).trainer.trained_layers

    assert (layers(), layers(model="tiny-qwen3")) == (15, 2), "auto: half of SmolLM2's 30 and tiny-qwen3's 4"
    assert (layers(trained_layers=0), layers(trained_layers=8)) == (0, 8), "a given count is kept (0 = all)"
    assert layers(finetune="lora", trained_layers=8) == 8, "with LoRA: the top 8 layers' adapters"
    with pytest.raises(
        InvalidArgument, match=r"--trained-layers must be -1 \(auto\), 0 \(every layer\) or more"
    ):
        layers(trained_layers=-2)


def test_quickstart_lora_adapts_every_linear_layer_at_10x_the_learning_rate_of_full_training(tmp_path):
    lora = QuickstartOptions(finetune="lora").config(tmp_path).trainer
    assert lora.lora.enabled and (lora.lora.r, lora.lora.alpha) == (16, 32), lora.lora
    assert lora.lora.target_modules == ["all-linear"], lora.lora.target_modules
    full = QuickstartOptions(finetune="full").config(tmp_path).trainer
    assert not full.lora.enabled, "--finetune full trains every weight"
    assert (lora.algorithm.lr, full.algorithm.lr) == (2e-4, 2e-5), "lr 0: by what is trained"
    given = QuickstartOptions(finetune="lora", lr=5e-5).config(tmp_path).trainer.algorithm.lr
    assert given == 5e-5, "a given learning rate is kept"
    rank4 = QuickstartOptions(finetune="lora", lora_rank=4).config(tmp_path).trainer.lora
    assert (rank4.r, rank4.alpha) == (4, 8), "scale alpha / r = 2 at any rank"
    with pytest.raises(InvalidArgument, match="--finetune must be auto, lora or full, not 'qlora'"):
        QuickstartOptions(finetune="qlora").config(tmp_path)


def test_the_quickstart_budget_is_15_minutes_only_for_every_layer_in_float32_unless_given(tmp_path):
    from clawgym.config import with_sets
    from clawgym_app.commands.quickstart import budget_minutes

    bf16 = QuickstartOptions(compute_dtype="bfloat16").config(tmp_path)
    fp32 = QuickstartOptions(compute_dtype="float32").config(tmp_path)
    every_layer = QuickstartOptions(compute_dtype="float32", trained_layers=0).config(tmp_path)
    assert (budget_minutes(0, bf16), budget_minutes(0, fp32), budget_minutes(0, every_layer)) == (10, 10, 15)
    assert budget_minutes(7.5, bf16) == budget_minutes(7.5, fp32) == 7.5, "a given budget is kept"
    half = with_sets(bf16, ["trainer.autocast=off"])  # a bfloat16 engine beside a float32 update
    assert budget_minutes(0, half) == 15.0, "10 minutes were measured with both in bfloat16"
    assert budget_minutes(0, with_sets(half, ["trainer.trained_layers=15"])) == 10.0, (
        "or with the top layers alone trained"
    )
