"""The app's settings without running anything: harness settings reach the adapters the orchestrator
builds, and the quickstart's task choice keeps train and held-out tasks apart."""

from clawgym.harnesses.reference import Reference
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.suites import resolve_suite
from clawgym_app.commands.quickstart import QuickstartOptions
from clawgym_app.runtime import HarnessSettings, SettingsCatalog


def test_harness_settings_reach_the_adapters_the_catalog_builds():
    catalog = SettingsCatalog(
        {"reference": HarnessSettings(max_turns=1, max_tokens=40), "mini": HarnessSettings(max_turns=2)}
    )
    reference = catalog.adapter("reference")
    assert isinstance(reference, Reference), "the reference adapter"
    assert (reference.limits.max_turns, reference.max_tokens) == (1, 40), "its turn cap and reply length"
    assert (
        "--max-turns" in (argv := reference.command("task", _ctx()))
        and argv[argv.index("--max-turns") + 1] == "1"
    )
    mini = catalog.adapter("mini-swe-agent")
    assert mini.limits.max_turns == 2, "an alias in the settings names the canonical harness"
    assert catalog.adapter("nop").limits == catalog.adapter("nop").default_limits, "no settings: defaults"


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
    cfg = opts.config(__import__("pathlib").Path("/tmp/unused"))
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
